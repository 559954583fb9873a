"""``autoretry trace`` (D29): continuations joined to triggers and outcomes; declined ones."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from opencode_rows import OpenCodeRows, tokens

from opencode_autoretry.causes import Cause, Facts
from opencode_autoretry.diagnostics.trace.outcome import outcome_of
from opencode_autoretry.models import ErrorInfo, Message, Role, Tokens


@pytest.mark.parametrize("scope", ["0", "7", "swift-planet"])
def test_continuations_with_trigger_and_outcome(invoke, seeded, scope: str) -> None:
    result = invoke("trace", scope, "--json")
    assert result.exit_code == 0, result.output
    body = json.loads(result.output)
    first, second = body["continuations"]
    assert first["message_id"] == seeded.users["inj_blank"] and first["state"] == "confirmed"
    assert first["trigger"]["message_id"] == seeded.steps["blank"]
    assert first["trigger"]["kind"] == "blank"
    assert first["outcome"] == {
        "status": "recovered",
        "detail": "✓ recovered (output=42)",
        "message_id": seeded.steps["recovered"],
    }
    assert second["trigger"]["kind"] == "disconnect"
    assert second["outcome"]["status"] == "failed"
    assert second["outcome"]["detail"] == "✗ failed (APIError)"


def test_declined_decisions_are_listed_with_reasons(invoke, seeded) -> None:
    body = json.loads(invoke("trace", "0", "--json").output)
    declined = {d["action"]: d for d in body["declined"]}
    assert declined["skip"]["session_id"] == seeded.sessions["quiet"]
    assert "no live owner" in declined["skip"]["reason"]
    assert declined["notify"]["kind"] == "rate_limit"
    only_main = json.loads(invoke("trace", "swift-planet", "--json").output)
    assert [d["action"] for d in only_main["declined"]] == ["notify"]


def test_human_output(invoke) -> None:
    out = invoke("trace", "0").output
    assert "Continuations: 2" in out
    assert "injection #1 (confirmed)" in out and "trigger: blank" in out
    assert "outcome: ✓ recovered (output=42)" in out
    assert "outcome: ✗ failed (APIError)" in out
    assert "Decisions not to act: 2" in out and "SKIP silent: no live owner" in out


def test_markers_without_a_store_are_still_traced(run_on, seeded, tmp_path) -> None:
    result = run_on(seeded.db, tmp_path / "missing-store.db", "trace", "0", "--json")
    assert result.exit_code == 0, result.output
    body = json.loads(result.output)
    assert [c["message_id"] for c in body["continuations"]] == [
        seeded.users["inj_blank"],
        seeded.users["inj_reset"],
    ]
    assert all(c["state"] is None and c["injection_id"] is None for c in body["continuations"])
    assert body["continuations"][0]["text"] == "Continue."
    assert body["declined"] == []
    out = run_on(seeded.db, tmp_path / "missing-store.db", "trace", "0").output
    assert "marker in OpenCode's DB (not in the store)" in out


def test_blank_and_pending_outcomes(run_on, tmp_path) -> None:
    rows = OpenCodeRows(tmp_path / "t.db")
    sid = rows.session("quiet-pond")
    user = rows.user(sid)
    blank = rows.assistant(sid, user, toks=tokens(100, 0), text=None)
    rows.injected(sid, decision=9, kind="blank", injection=9)
    rows.assistant(sid, user, toks=tokens(100, 0), text=None)
    rows.injected(sid, decision=10, kind="blank", injection=10)
    rows.commit()
    body = json.loads(run_on(tmp_path / "t.db", tmp_path / "s.db", "trace", "0", "--json").output)
    rows.close()
    outcomes = [c["outcome"]["status"] for c in body["continuations"]]
    assert outcomes == ["blank", "pending"]
    assert body["continuations"][0]["trigger"]["message_id"] == blank


def _step(**kwargs: object) -> Message:
    from opencode_rows import BASE_MS

    from opencode_autoretry.models import from_epoch_ms

    at = from_epoch_ms(BASE_MS)
    assert at is not None
    return Message("msg_1", "ses_1", Role.ASSISTANT, at + timedelta(seconds=1), **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("step", "status"),
    [
        (None, "pending"),
        (_step(error=ErrorInfo("APIError", "x")), "failed"),
        (_step(finish="stop", tokens=Tokens(output=5)), "recovered"),
        (_step(finish="stop"), "blank"),
        (_step(), "pending"),
    ],
)
def test_outcome_table(step: Message | None, status: str) -> None:
    assert outcome_of(step).status == status


def test_injection_whose_marker_was_dropped_is_joined_by_its_message_id(run_on, tmp_path) -> None:
    from datetime import UTC, datetime

    from opencode_autoretry.models import Action, BudgetGroup, Decision, Kind
    from opencode_autoretry.store.database import Store

    rows = OpenCodeRows(tmp_path / "t.db")
    sid = rows.session("plain-path")
    user = rows.user(sid)
    blank = rows.assistant(sid, user, toks=tokens(100, 0), text=None)
    plain = rows.user(sid, "Continue.")  # OpenCode kept the text, not the metadata
    answer = rows.assistant(sid, plain, toks=tokens(100, 7))
    rows.commit()
    store = Store.open(tmp_path / "s.db")
    at = datetime.fromtimestamp(rows.clock / 1000, tz=UTC)
    decision = Decision(
        Action.INJECT, Cause.RETRY, sid, user, Kind.BLANK, BudgetGroup.BLANK, "Continue.",
        facts=Facts(note="blank"),
    )
    decision_id = store.record_decision(decision, at, message_id=blank)
    injection = store.record_intent(decision_id, sid, user, "Continue.", None, at=at)
    store.mark_confirmed(injection, at, plain)
    store.close()
    result = run_on(tmp_path / "t.db", tmp_path / "s.db", "trace", "0", "--json")
    rows.close()
    (only,) = json.loads(result.output)["continuations"]
    assert only["message_id"] == plain and only["trigger"]["message_id"] == blank
    assert only["outcome"]["status"] == "recovered" and only["outcome"]["message_id"] == answer


def test_unreadable_store_exits_2_in_one_line(run_on, seeded, tmp_path) -> None:
    store = tmp_path / "broken-store.db"
    store.write_bytes(b"not sqlite" * 100)
    result = run_on(seeded.db, store, "trace", "0")
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert result.output.count("\n") == 1
