"""Hung subagents (issue 9): the pure decision, the [stall] table and the loop over fakes."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from daemon_fakes import Harness
from opencode_rows import aborted_error

from opencode_autoretry.config.settings import SettingsError, resolve
from opencode_autoretry.decisions.budget import DecisionContext, decide, new_ledger
from opencode_autoretry.decisions.policy import load_policy
from opencode_autoretry.decisions.subagents import (
    OFF_REASON,
    subagent_stall_verdict,
    subagent_toast,
    whole_seconds,
)
from opencode_autoretry.models import Action, Kind, LiveFacts
from opencode_autoretry.plugin_bridge import protocol

NOW = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
VERDICT = subagent_stall_verdict(182.4, "msg_child_step")


def decided(ledger=None, **context):
    ledger = ledger or new_ledger("ses_child", "msg_parent_turn")
    values = {"session_id": "ses_child", "is_child": True, **context}
    return decide(ledger, VERDICT, DecisionContext(**values), load_policy({}), NOW)


def test_a_hung_child_is_aborted_once_and_never_sent_anything():
    decision, ledger = decided()
    assert decision.action is Action.ABORT and not decision.sends
    assert decision.kind is Kind.SUBAGENT_STALL and decision.text is None
    assert decision.turn_id == "msg_parent_turn" and decision.limit == 1
    assert whole_seconds(decision.hung_seconds) == 182
    assert ledger.handled == {"msg_child_step"} and ledger.first_failure == NOW
    again, same = decided(ledger)
    assert again.action is Action.SKIP and "already aborted once" in again.reason
    assert same == ledger


@pytest.mark.parametrize(
    "context, reason",
    [
        ({"enabled": False}, "autoretry is off"),
        ({"subagents": False}, OFF_REASON),
        ({"is_child": None}, "fail-closed"),
        ({"is_child": False}, "not a child session"),
        ({"live": LiveFacts(permission_pending=True)}, "permission"),
        ({"live": LiveFacts(question_pending=True)}, "question"),
        ({"live": LiveFacts(child_busy=True)}, "busy subagent"),
    ],
)
def test_a_hung_child_is_left_alone(context, reason):
    decision, ledger = decided(**context)
    assert decision.action is Action.SKIP and reason in decision.reason
    assert not ledger.handled


def test_the_toast_says_how_long_it_hung():
    decision, _ = decided()
    assert subagent_toast(decision) == (
        "autoretry: a subagent hung after 182 s with no progress — stopped it so this "
        "session can go on"
    )
    assert whole_seconds(None) is None


# -- the [stall] table ----------------------------------------------------------------------


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(text)
    return path


def test_stall_subagents_defaults_on_and_can_be_switched_off(tmp_path):
    assert resolve(environ={}, config_path=write(tmp_path, "")).stall_subagents is True
    off = resolve(environ={}, config_path=write(tmp_path, "[stall]\nsubagents = false\n"))
    assert off.stall_subagents is False


@pytest.mark.parametrize(
    "text, message",
    [
        ("[stall]\nsubagent = false\n", "stall: unknown key 'subagent' (known: subagents)"),
        ('[stall]\nsubagents = "no"\n', "stall.subagents must be true or false, got 'no'"),
        ("stall = 3\n", "stall must be a table"),
        ("stall_subagents = false\n", "unknown key 'stall_subagents'"),
    ],
)
def test_a_bad_stall_table_names_the_key(tmp_path, text, message):
    with pytest.raises(SettingsError, match=message.replace("(", r"\(").replace(")", r"\)")):
        resolve(environ={}, config_path=write(tmp_path, text))


# -- the loop over fakes --------------------------------------------------------------------


def hung_child(h: Harness) -> tuple[str, str, str]:
    """A root whose task child is busy on a step that streams nothing."""
    root = h.session()
    turn = h.user(root)
    h.chat(root, turn)
    h.status(root, "busy")
    child = h.session(parent_id=root)
    task = h.user(child, "Do the subtask")
    h.chat(child, task)
    h.status(child, "busy")
    h.rows.assistant(child, task, finish=None, text="", completed=False)
    h.rows.commit()
    # The parent's task tool runs while the child works: the parent is never stalled.
    h.event("message.part.updated", sessionID=root,
            part={"type": "tool", "callID": "call_task", "state": {"status": "running"}})
    return root, turn, child


def test_a_hung_child_is_aborted_and_the_parent_is_told(tmp_path):
    h = Harness(tmp_path)
    h.hello()
    root, turn, child = hung_child(h)
    h.advance(h.settings.stall_timeout - 1)
    assert h.bridge.of(protocol.Abort) == []
    h.advance(2)
    [abort] = h.bridge.of(protocol.Abort)
    assert abort.session_id == child
    [decision] = h.store.decisions(child)
    assert (decision.kind, decision.action, decision.turn_id) == ("subagent_stall", "abort", turn)
    assert whole_seconds(decision.facts.hung_seconds) == int(h.settings.stall_timeout + 1)
    assert any("a subagent hung" in t for t in h.toasts())
    assert h.store.decisions(root) == []
    # The abort's error and idles are ours: nothing more, and never a prompt to anyone.
    h.error_then_idle(child, aborted_error())
    h.advance(h.settings.stall_timeout * 3)
    assert h.prompts() == [] and h.store.injections() == []
    assert len(h.bridge.of(protocol.Abort)) == 1
    assert h.loop.actions.gate(child) == (None, "child session (never injected)")


def test_one_abort_per_child_per_parent_turn_survives_a_restart(tmp_path):
    h = Harness(tmp_path)
    h.hello()
    root, turn, child = hung_child(h)
    h.advance(h.settings.stall_timeout + 1)
    assert len(h.bridge.of(protocol.Abort)) == 1
    h.loop = h.new_loop()  # the daemon restarts; the child is still busy and silent
    h.hello()
    h.status(child, "busy")
    h.advance(h.settings.stall_timeout + 1)
    assert len(h.bridge.of(protocol.Abort)) == 1
    [_, skip] = h.store.decisions(child)
    assert skip.action == "skip" and "already aborted once" in skip.reason
    assert h.prompts() == []


def test_a_child_waiting_on_a_permission_is_left_alone_however_long(tmp_path, caplog):
    h = Harness(tmp_path)
    h.hello()
    root, turn, child = hung_child(h)
    h.event("permission.asked", id="per_1", sessionID=child, permission="bash")
    caplog.set_level("INFO")
    for _ in range(10):
        h.advance(h.settings.stall_timeout)
    assert h.bridge.of(protocol.Abort) == [] and h.prompts() == []
    assert h.store.decisions(child) == [] and h.store.decisions(root) == []
    assert any("waiting on a permission: left alone" in r.message for r in caplog.records)


def test_subagents_off_records_a_skip_and_aborts_nothing(tmp_path):
    h = Harness(tmp_path, stall_subagents=False)
    h.hello()
    root, turn, child = hung_child(h)
    h.advance(h.settings.stall_timeout + 1)
    h.advance(h.settings.stall_timeout + 1)
    assert h.bridge.of(protocol.Abort) == [] and h.prompts() == []
    [skip] = h.store.decisions(child)  # recorded once, not every stall period
    assert skip.kind == "subagent_stall" and OFF_REASON in skip.reason


def test_a_parent_switched_off_leaves_its_hung_child_alone(tmp_path):
    h = Harness(tmp_path)
    h.hello()
    root, turn, child = hung_child(h)
    h.store.set_enabled(False, h.clock.now(), root)
    h.advance(h.settings.stall_timeout + 1)
    assert h.bridge.of(protocol.Abort) == []
    [skip] = h.store.decisions(child)
    assert "autoretry is off" in skip.reason


def test_a_root_stall_still_aborts_then_continues(tmp_path):
    h = Harness(tmp_path)
    h.hello()
    root = h.session()
    turn = h.user(root)
    h.chat(root, turn)
    h.status(root, "busy")
    h.rows.assistant(root, turn, finish=None, text="", completed=False)
    h.rows.commit()
    h.advance(h.settings.stall_timeout + 1)
    [decision] = h.store.decisions(root)
    assert (decision.kind, decision.action) == ("stall", "abort_then_inject")
