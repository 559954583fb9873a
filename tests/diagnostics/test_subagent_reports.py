"""Hung subagents in ``trace`` and ``timeline`` (issue 9): the child's abort, seen from both."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from opencode_rows import BASE_MS, OpenCodeRows, aborted_error

from opencode_autoretry.decisions.budget import DecisionContext, decide, new_ledger
from opencode_autoretry.decisions.policy import load_policy
from opencode_autoretry.decisions.subagents import subagent_stall_verdict
from opencode_autoretry.store.database import Store


def at(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


@pytest.fixture()
def hung(tmp_path: Path):
    """A root whose task child hung 182 s and was aborted; the root then finished."""
    rows = OpenCodeRows(tmp_path / "opencode.db", start_ms=BASE_MS)
    store = Store.open(tmp_path / "autoretry.db")
    root = rows.session("swift-planet")
    turn = rows.user(root, "Delegate")
    rows.assistant(root, turn, finish="tool-calls", text=None, tools=[("task", "error")])
    child = rows.session("lucky-sailor", parent_id=root)
    task = rows.user(child, "Do the subtask")
    stalled = rows.assistant(child, task, finish=None, text="", error=aborted_error())
    rows.tick(1000)
    verdict = subagent_stall_verdict(182.0, stalled)
    decision, _ = decide(new_ledger(child, turn), verdict,
                         DecisionContext(session_id=child, is_child=True), load_policy({}),
                         at(rows.clock))
    store.record_decision(decision, at(rows.clock), message_id=stalled)
    resumed = rows.assistant(root, turn)
    other = rows.session("other-root")
    rows.commit()
    store.close()
    yield {"root": root, "child": child, "resumed": resumed, "other": other}
    rows.close()


def test_trace_of_the_parent_and_of_the_child_lists_the_abort(run_on, tmp_path, hung):
    for scope in (hung["root"], hung["child"], "0"):
        result = run_on(tmp_path / "opencode.db", tmp_path / "autoretry.db", "trace", scope,
                        "--json")
        assert result.exit_code == 0, result.output
        [found] = json.loads(result.output)["subagent_aborts"]
        assert (found["session_id"], found["parent_id"]) == (hung["child"], hung["root"])
        assert found["hung_s"] == 182
        assert found["outcome"] == {"status": "resumed", "detail": "✓ parent resumed "
                                    "(finish=stop)", "message_id": hung["resumed"]}
    other = run_on(tmp_path / "opencode.db", tmp_path / "autoretry.db", "trace", hung["other"],
                   "--json")
    assert json.loads(other.output)["subagent_aborts"] == []
    text = run_on(tmp_path / "opencode.db", tmp_path / "autoretry.db", "trace", hung["root"])
    assert "Subagent aborts: 1" in text.output
    assert "Subagent aborted: hung 182 s with no progress" in text.output


def test_timeline_of_the_parent_and_of_the_child_shows_the_abort(run_on, tmp_path, hung):
    for session in (hung["root"], hung["child"]):
        result = run_on(tmp_path / "opencode.db", tmp_path / "autoretry.db", "timeline",
                        session)
        assert result.exit_code == 0, result.output
        assert "ABORT subagent_stall" in result.output and "hung 182 s" in result.output
        body = json.loads(run_on(tmp_path / "opencode.db", tmp_path / "autoretry.db",
                                 "timeline", session, "--json").output)
        [entry] = [e for e in body["entries"] if e["type"] == "decision"]
        assert (entry["session_id"], entry["action"]) == (hung["child"], "abort")


def test_the_childs_newest_step_is_the_stall_the_daemon_aborted_not_a_user_abort(
    run_on, tmp_path, hung
):
    result = run_on(tmp_path / "opencode.db", tmp_path / "autoretry.db", "timeline",
                    hung["child"])
    assert "Newest step: subagent_stall — aborted by autoretry" in result.output, result.output
    body = json.loads(run_on(tmp_path / "opencode.db", tmp_path / "autoretry.db", "timeline",
                             hung["child"], "--json").output)
    assert body["verdict"]["kind"] == "subagent_stall"
