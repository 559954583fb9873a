"""``autoretry diagnose`` (D26): one section per abnormal kind, health header, --json."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from opencode_rows import OpenCodeRows

from opencode_autoretry.diagnostics.render import Style
from opencode_autoretry.diagnostics.steps import ABNORMAL_KINDS

EXPECTED_ALL = {
    "blank": ["old_blank", "blank"],
    "think_only": ["think_only"],
    "forged_length": ["forged_length"],
    "truncated": [],
    "tool_as_text": ["tool_as_text"],
    "disconnect": ["disconnect"],
    "stream_truncated": ["stream_truncated"],
    "timeout": ["timeout"],
    "rate_limit": ["rate_limit"],
    "server_error": ["server_error"],
    "terminal": ["terminal"],
    "silent": ["silent"],
    "orphan": ["orphan"],
    "runaway": ["loop6"],
    "user_abort": ["user_abort"],
}


def test_json_lists_every_abnormal_step_over_all_time(invoke, seeded) -> None:
    result = invoke("diagnose", "0", "--json")
    assert result.exit_code == 0, result.output
    body = json.loads(result.output)
    assert body["report"] == "diagnose" and body["version"] == 1 and body["since"] is None
    assert list(body["kinds"]) == [str(k) for k in ABNORMAL_KINDS]
    for kind, names in EXPECTED_ALL.items():
        section = body["kinds"][kind]
        assert section["count"] == len(names), kind
        assert [r["message_id"] for r in section["rows"]] == [seeded.steps[n] for n in names]


def test_json_rows_carry_the_step_facts(invoke, seeded) -> None:
    body = json.loads(invoke("diagnose", "0", "--json").output)
    row = body["kinds"]["forged_length"]["rows"][0]
    assert row["session_id"] == seeded.sessions["main"]
    assert row["finish"] == "length" and row["tokens"]["input"] == 100
    assert row["tokens"]["output"] == 0 and row["error"] is None
    assert "0 output tokens" in row["reason"]
    assert body["kinds"]["rate_limit"]["rows"][0]["error"] == "APIError"


def test_json_health_and_daemon_facts(invoke, seeded, report_env: Path) -> None:
    body = json.loads(invoke("diagnose", "--json").output)
    health = body["health"]
    assert health["db"] == str(seeded.db) and health["db_bytes"] > 0
    assert (health["sessions"], health["versions"]) == (6, ["1.18.33"])
    assert health["messages"] == 40 and health["parts"] > health["messages"]
    assert health["daemon"]["pid"] == 4242 and health["daemon"]["age_seconds"] == 30.0
    assert health["bridge"] == {
        "installed": False,
        "path": str(report_env / "opencode" / "plugins" / "autoretry.js"),
    }
    assert body["injections"] == {"count": 2, "by_state": {"confirmed": 2}}
    assert body["ownerless_sessions"] == [seeded.sessions["quiet"]]


def test_days_window_excludes_older_steps(invoke, seeded) -> None:
    body = json.loads(invoke("diagnose", "7", "--json").output)
    assert body["days"] == 7 and body["since"] is not None
    rows = body["kinds"]["blank"]["rows"]
    assert [r["message_id"] for r in rows] == [seeded.steps["blank"]]


def test_bridge_installed_is_seen(invoke, report_env: Path) -> None:
    plugin = report_env / "opencode" / "plugins" / "autoretry.js"
    plugin.parent.mkdir(parents=True)
    plugin.write_text("// bridge")
    assert json.loads(invoke("diagnose", "--json").output)["health"]["bridge"]["installed"]


def test_human_output_sections(invoke, seeded) -> None:
    result = invoke("diagnose", "0")
    assert result.exit_code == 0, result.output
    out = result.output
    assert "\x1b[" not in out  # not a terminal, NO_COLOR set
    assert f"DB:        {seeded.db}" in out
    assert "sessions=6 messages=40" in out and "OpenCode:  1.18.33" in out
    assert "pid 4242" in out and "Bridge:    not installed" in out
    assert "blank: ⚠ 2" in out and "truncated: ✓ none" in out and "runaway: ⚠ 1" in out
    assert "[2026-11-30 12:09:53]" in out  # local time (TZ=UTC here) of the forged length step
    assert "Injections by the daemon: 2 (confirmed=2)" in out
    assert f"Sessions with no live owner: 1\n  {seeded.sessions['quiet']}" in out


def test_limit_keeps_the_newest_rows_and_says_so(invoke, seeded) -> None:
    body = json.loads(invoke("diagnose", "0", "--json", "--limit", "1").output)
    assert body["kinds"]["blank"]["count"] == 2
    assert [r["message_id"] for r in body["kinds"]["blank"]["rows"]] == [seeded.steps["blank"]]
    assert "… 1 older" in invoke("diagnose", "0", "--limit", "1").output


def test_clean_db_reports_none_everywhere(run_on, tmp_path: Path) -> None:

    rows = OpenCodeRows(tmp_path / "clean.db")
    sid = rows.session("tidy-desk")
    user = rows.user(sid)
    rows.assistant(sid, user, finish="tool-calls", tools=[("bash", "completed")])
    rows.assistant(sid, user)
    rows.commit()
    result = run_on(tmp_path / "clean.db", tmp_path / "no-store.db", "diagnose", "0")
    rows.close()
    assert result.exit_code == 0, result.output
    for kind in ABNORMAL_KINDS:
        assert f"{kind}: ✓ none" in result.output
    assert "no heartbeat" in result.output and "Injections by the daemon: 0" in result.output


class FakeTty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(
    ("no_color", "tty", "expected"), [(None, True, True), ("1", True, False), (None, False, False)]
)
def test_colour_only_on_a_tty_without_no_color(monkeypatch, no_color, tty, expected) -> None:
    if no_color is None:
        monkeypatch.delenv("NO_COLOR", raising=False)
    else:
        monkeypatch.setenv("NO_COLOR", no_color)
    style = Style.for_stream(FakeTty() if tty else io.StringIO())
    assert style.colour is expected
    assert ("\x1b[" in style.good("ok")) is expected
