"""``autoretry timeline`` (D27): parts from the ``part`` table, lookups, daemon actions inline."""

from __future__ import annotations

import json

import pytest


@pytest.mark.parametrize("ref", ["swift-planet", "<id>", "<prefix>"])
def test_session_by_slug_id_or_unique_prefix(invoke, seeded, ref: str) -> None:
    sid = seeded.sessions["main"]
    ref = {"<id>": sid, "<prefix>": sid[:-4]}.get(ref, ref)
    result = invoke("timeline", ref, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["session"]["id"] == sid


def test_unknown_session_exits_1_with_closest_matches(invoke, seeded) -> None:
    result = invoke("timeline", "swift-planit")
    assert result.exit_code == 1
    assert "no session 'swift-planit'" in result.output
    assert f"{seeded.sessions['main']} (swift-planet)" in result.output
    assert "Traceback" not in result.output


def test_ambiguous_prefix_exits_1_listing_the_matches(invoke) -> None:
    result = invoke("timeline", "ses_")
    assert result.exit_code == 1 and "matches 6 sessions" in result.output


def test_json_entries_in_order_with_parts_and_daemon_records(invoke, seeded) -> None:
    body = json.loads(invoke("timeline", "swift-planet", "--json").output)
    entries = body["entries"]
    messages = [e for e in entries if e["type"] == "message"]
    assert len(messages) == 18
    assert [m["time"] for m in messages] == sorted(m["time"] for m in messages)
    by_id = {m["id"]: m for m in messages}
    tool_text = by_id[seeded.steps["healthy"]]
    assert [p["type"] for p in tool_text["parts"]] == ["step-start", "text", "step-finish"]
    assert tool_text["parts"][1]["text"].startswith("Hello from the fake model.")
    think = by_id[seeded.steps["think_only"]]
    assert {"type": "reasoning", "text": "Let me think."} in think["parts"]
    injected = by_id[seeded.users["inj_blank"]]
    assert injected["origin"] == "injected" and injected["marker"]["kind"] == "blank"
    assert by_id[seeded.users["hello"]]["origin"] == "real"
    errored = by_id[seeded.steps["disconnect"]]
    assert errored["error"] == {"name": "APIError", "message": "Connection reset by server"}
    decisions = [e for e in entries if e["type"] == "decision"]
    injections = [e for e in entries if e["type"] == "injection"]
    assert [d["action"] for d in decisions] == ["inject", "inject", "notify"]
    assert decisions[0]["message_id"] == seeded.steps["blank"]
    assert [i["message_id"] for i in injections] == [
        seeded.users["inj_blank"],
        seeded.users["inj_reset"],
    ]
    assert body["verdict"]["kind"] == "user_abort" and body["verdict"]["retryable"] is False


def test_human_output_shows_parts_tools_and_markers(invoke, seeded) -> None:
    out = invoke("timeline", "swift-planet").output
    assert '[1] 12:09:42 USER (real) "Say hello"' in out
    assert 'USER (injected) "Continue."' in out
    assert 'text: "Hello from the fake model. This is a normal answer."' in out
    assert 'reasoning: "Let me think."' in out
    assert "err=APIError: Connection reset by server" in out
    assert "↳ daemon 12:09:45 INJECT blank" in out and "injection #1 confirmed" in out
    assert "Newest step: user_abort" in out
    assert "(no content parts)" in out  # the blank step: parts exist but hold nothing


def test_tool_parts_show_name_and_status(invoke, seeded, run_on, tmp_path) -> None:
    from opencode_rows import OpenCodeRows

    rows = OpenCodeRows(tmp_path / "tools.db")
    sid = rows.session("busy-bee")
    user = rows.user(sid)
    rows.assistant(sid, user, finish="tool-calls", tools=[("bash", "completed"), ("read", "error")])
    rows.commit()
    result = run_on(tmp_path / "tools.db", tmp_path / "none.db", "timeline", "busy-bee")
    rows.close()
    assert result.exit_code == 0, result.output
    assert "tool: bash(" in result.output and "[completed]" in result.output
    assert "tool: read(" in result.output and "[error]" in result.output


def test_child_session_is_flagged(invoke, seeded) -> None:
    out = invoke("timeline", "lucky-sailor").output
    assert f"child session of {seeded.sessions['main']}" in out
