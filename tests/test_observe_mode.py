"""Observe mode (issue 23): every decision judged and recorded as in act mode, with what it
WOULD have done; nothing sent, aborted, trimmed or switched. Over the loop's real parts
(actions, store, decision core), a row-written OpenCode DB and a fake bridge."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from daemon_fakes import Harness, disconnect
from opencode_rows import aborted_error, api_error, tokens
from test_exec import World
from test_repetition_guard_daemon import busy_turn, guard_for, stream_loop
from test_subagent_stalls import hung_child

from opencode_autoretry.causes import Cause, Facts, ModelSwitch
from opencode_autoretry.config.settings import ConfigError, SettingsError, resolve_with_sources
from opencode_autoretry.daemon.control import render_status, status_report
from opencode_autoretry.decisions.observed import OBSERVE_TITLE, would_do
from opencode_autoretry.diagnostics.records import load_records
from opencode_autoretry.diagnostics.render import Style
from opencode_autoretry.diagnostics.trace.report import render_trace, trace_json
from opencode_autoretry.models import Action, BudgetGroup, Decision, Kind
from opencode_autoretry.notifications.events import NotifyEvent, from_decision
from opencode_autoretry.plugin_bridge import protocol
from opencode_autoretry.store.database import StoreView

OBSERVE = {"mode": "observe"}


def acted(h: Harness) -> list[object]:
    """Everything that would have changed a session: prompts, aborts, trims, penalties."""
    return [m for _, m in h.bridge.sent
            if isinstance(m, protocol.Prompt | protocol.Abort | protocol.Trim | protocol.Config)]


def observe_toasts(h: Harness) -> list[str]:
    return [t.message for t in h.bridge.of(protocol.Toast)]


# -- the daemon -------------------------------------------------------------------------------


def test_a_disconnect_is_recorded_as_a_would_be_continuation_and_nothing_goes_out(tmp_path):
    h = Harness(tmp_path, **OBSERVE)
    h.hello()
    sid, user, step = h.failed_turn()

    h.error_then_idle(sid, disconnect())
    h.idle(sid)  # a duplicated idle: still one decision for the failure

    [decision] = h.store.decisions(sid)
    assert (decision.kind, decision.action, decision.observed) == ("disconnect", "inject_at", True)
    assert decision.message_id == step and decision.cause is Cause.RETRY
    assert decision.would == "would continue in 5 s: connection lost (1/2)"
    assert h.store.injections(sid) == [] and h.loop.actions.pending == {}
    h.advance(30)
    assert acted(h) == []
    # The budget is spent as in act mode, so the "would" sequence is act mode's (docs).
    [ledger] = h.store.ledgers(sid)
    assert ledger.used_in(BudgetGroup.DISCONNECT) == 1 and step in ledger.handled
    assert observe_toasts(h) == [
        "autoretry (observe mode): would continue in 5 s: connection lost (1/2) — nothing done"]
    assert {t.title for t in h.bridge.of(protocol.Toast)} == {OBSERVE_TITLE}


def test_act_mode_sends_what_observe_mode_only_records(tmp_path):
    """The control: the same turn in act mode is continued (a do-nothing daemon fails the
    observe tests' positive half, this one their premise)."""
    for mode, prompts in (("act", 1), ("observe", 0)):
        (tmp_path / mode).mkdir()
        h = Harness(tmp_path / mode, mode=mode)
        h.hello()
        sid, user = h.busy_turn()
        h.blank_step(sid, user)
        h.idle(sid)
        [decision] = h.store.decisions(sid)
        assert (decision.action, decision.observed) == ("inject", mode == "observe")
        assert len(h.prompts()) == prompts


def test_a_stall_is_neither_aborted_nor_continued(tmp_path):
    h = Harness(tmp_path, **OBSERVE)
    h.hello()
    sid, user = h.busy_turn()
    h.rows.assistant(sid, user, finish=None, text="", completed=False)
    h.rows.commit()
    h.advance(h.settings.stall_timeout + 1)
    h.advance(h.settings.stall_timeout + 1)  # still stalled: the same failure, not re-recorded
    [decision] = h.store.decisions(sid)
    assert (decision.kind, decision.action, decision.observed) == (
        "stall", "abort_then_inject", True)
    assert decision.would == "would stop and continue: stalled (1/2)"
    assert acted(h) == []
    assert h.loop.sessions.ensure(sid).abort_requested is None


def test_a_runaway_loop_is_not_aborted_even_without_a_budget(tmp_path):
    h = Harness(tmp_path, runaway_steps=6, **OBSERVE)
    h.hello()
    sid, user = h.busy_turn()
    for _ in range(6):
        step = h.rows.assistant(sid, user, finish="unknown", toks=tokens(0, 0), text=None)
        h.rows.commit()
        h.event("message.updated", sessionID=sid, info={
            "id": step, "sessionID": sid, "role": "assistant", "parentID": user,
            "finish": "unknown", "tokens": {"output": 0}, "time": {"completed": 1}})
        h.status(sid, "busy")
    [decision] = h.store.decisions(sid)
    assert (decision.kind, decision.observed) == ("runaway", True)
    assert decision.would is not None and decision.would.startswith("would stop and continue")
    assert acted(h) == []


def test_a_live_loop_is_neither_stopped_nor_trimmed_and_no_penalties_go_out(tmp_path):
    h = Harness(tmp_path, repetition={"penalties": {"fake": {"presence_penalty": 1}}},
                **OBSERVE)
    guard = guard_for(h, penalties={"fake": {"presence_penalty": 1.0}})
    sid, user = busy_turn(h)
    _, _, decisions = stream_loop(h, guard, sid, user, 1)
    assert [(d.kind, d.action) for d in decisions] == [(Kind.REPETITION, Action.ABORT_THEN_INJECT)]
    [record] = h.store.decisions(sid)
    assert record.observed and record.would == "would stop and continue: repeating itself (1/2)"
    assert h.store.trims() == []
    guard.on_hello("b2", h.clock.now())
    assert acted(h) == []


def test_a_hung_subagent_is_not_aborted_and_its_parent_is_told_what_would_be(tmp_path):
    h = Harness(tmp_path, **OBSERVE)
    h.hello()
    root, turn, child = hung_child(h)
    h.advance(h.settings.stall_timeout + 1)
    [decision] = h.store.decisions(child)
    assert (decision.kind, decision.action, decision.observed) == ("subagent_stall", "abort", True)
    assert decision.would is not None and decision.would.startswith("would abort the hung")
    h.advance(h.settings.stall_timeout * 3)
    assert acted(h) == [] and h.store.injections() == []
    assert any("would abort the hung subagent" in t for t in observe_toasts(h))


def test_a_quota_with_a_fallback_chain_would_switch_and_switches_nothing(tmp_path):
    h = Harness(tmp_path, fallback={"fake/fake-model": ["fake/fake-b"]}, **OBSERVE)
    h.hello()
    quota = api_error("You exceeded your current quota (insufficient_quota)", status=429)
    sid, _, _ = h.failed_turn(quota)
    h.error_then_idle(sid, quota)
    [decision] = h.store.decisions(sid)
    assert decision.cause is Cause.MODEL_SWITCH and decision.observed
    assert decision.would == ("would switch fake/fake-model → fake/fake-b and continue: "
                              "usage limit (1/1)")
    h.advance(30)
    assert acted(h) == []


def test_the_gates_come_first_off_a_child_and_a_user_abort_record_no_would_be_action(
        tmp_path):
    """Observe mode records what act mode would do: where act mode would leave the session
    alone (switched off, a subagent, a user abort), nothing 'would' be done either."""
    h = Harness(tmp_path, **OBSERVE)
    h.hello()
    off, user = h.busy_turn()
    h.store.set_enabled(False, h.clock.now(), off)
    h.blank_step(off, user)
    h.idle(off)
    root = h.session()
    child = h.session(parent_id=root)
    task = h.user(child, "Do the subtask")
    h.chat(child, task)
    h.status(child, "busy")
    h.blank_step(child, task)
    h.idle(child)
    stopped, _, _ = h.failed_turn(aborted_error())  # the user pressed stop
    h.error_then_idle(stopped, aborted_error())
    causes = {sid: [(d.action, d.cause) for d in h.store.decisions(sid)]
              for sid in (off, child, stopped)}
    assert causes == {off: [("skip", Cause.OFF)], child: [("skip", Cause.CHILD_SESSION)],
                      stopped: [("skip", Cause.USER_ABORT)]}
    assert all(d.observed and d.would is None for d in h.store.decisions())
    assert acted(h) == [] and observe_toasts(h) == []


def test_a_permission_wait_records_nothing_and_does_nothing(tmp_path):
    h = Harness(tmp_path, **OBSERVE)
    h.hello()
    sid, _ = h.busy_turn()
    h.event("permission.asked", id="per_1", sessionID=sid, permission="external_directory")
    h.advance(h.settings.stall_timeout + 60)
    assert h.store.decisions(sid) == [] and acted(h) == []


def test_a_restart_in_observe_mode_sends_no_continuation_left_by_act_mode(tmp_path):
    h = Harness(tmp_path)
    h.hello()
    sid, _, _ = h.failed_turn()
    h.error_then_idle(sid, disconnect())
    [intent] = h.store.open_injections(sid)
    h.sigkill()
    h.config = replace(h.config, settings=replace(h.settings, mode="observe"))
    h.revive()
    h.hello()
    h.advance(30)
    assert acted(h) == []
    [injection] = h.store.injections(sid)
    assert injection.id == intent.id and injection.state == "cancelled"
    assert injection.error == "cancelled: observe mode (nothing is sent)"


def test_the_autoretry_command_and_the_heartbeat_say_observe_mode(tmp_path):
    h = Harness(tmp_path, **OBSERVE)
    h.hello()
    sid = h.session()
    reply = h.command(sid, "status")
    assert reply.title == OBSERVE_TITLE and "observe mode" in reply.message
    assert h.command(sid, "off").title == OBSERVE_TITLE
    h.loop.beat(h.clock.now())
    view = StoreView.open(h.settings.store)
    try:
        report = status_report(view, h.clock.now(), mode="act")  # the daemon's own wins
    finally:
        view.close()
    assert report["mode"] == "observe"
    assert render_status(report).startswith("autoretry is OFF — OBSERVE MODE")


# -- the reports ------------------------------------------------------------------------------


def test_trace_and_the_summary_records_keep_would_be_actions_apart(tmp_path):
    h = Harness(tmp_path, **OBSERVE)
    h.hello()
    sid, user = h.busy_turn()
    h.blank_step(sid, user)
    h.idle(sid)
    other, _, _ = h.failed_turn(api_error("Invalid API key", status=401, retryable=False))
    h.error_then_idle(other, api_error("Invalid API key", status=401, retryable=False))
    records = load_records(h.settings.store)
    assert [(d.kind, d.action) for d in records.observed] == [("blank", "inject")]
    # An observed skip reads the same in both modes: it stays a decision.
    assert [(d.kind, d.action, d.observed) for d in records.decisions] == [
        ("terminal", "skip", True)]

    from opencode_autoretry.diagnostics.trace.report import TraceReport

    report = TraceReport(None, None, None, (), records.decisions, observed=records.observed)
    text = render_trace(report, Style(colour=False))
    assert "Observe mode, would have acted: 1 (nothing was sent, aborted or switched)" in text
    assert "blank: would continue: blank reply (1/2)" in text
    body = json.loads(trace_json(report))
    assert [(o["action"], o["would"]) for o in body["observed"]] == [
        ("inject", "would continue: blank reply (1/2)")]


# -- exec -------------------------------------------------------------------------------------


def test_exec_in_observe_mode_records_and_re_runs_nothing(tmp_path: Path):
    world = World(tmp_path, mode="observe")
    world.steps = [world.first("blank")]
    assert world.runner().execute() == 0  # the run's own status
    assert len(world.spawned) == 1
    [decision] = world.store.decisions(world.session_id)
    assert (decision.action, decision.observed) == ("inject", True)
    assert world.store.injections(world.session_id) == []
    assert "would continue: blank reply (1/2) — nothing done" in world.err.getvalue()


def test_exec_in_observe_mode_exits_with_the_runs_status_where_it_would_give_up(
        tmp_path: Path):
    world = World(tmp_path, mode="observe", policy={"budgets": {"disconnect": {
        "max_retries": 0}}})
    world.steps = [world.first("disconnect")]
    assert world.runner().execute() == 1  # not 75: exec gave nothing up, it did nothing
    [decision] = world.store.decisions(world.session_id)
    assert (decision.action, decision.observed) == ("notify", True)
    assert "would give up" in world.err.getvalue()


# -- the settings and the words ---------------------------------------------------------------


def test_mode_is_resolved_like_every_top_level_key(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text('mode = "observe"\n')
    resolved = resolve_with_sources({}, {}, config)
    assert resolved.settings.observing and resolved.sources["mode"].kind == "file"
    env = resolve_with_sources({}, {"AUTORETRY_MODE": "act"}, config)
    assert not env.settings.observing and env.sources["mode"].where == "AUTORETRY_MODE"
    flag = resolve_with_sources({"mode": "observe"}, {"AUTORETRY_MODE": "act"}, config)
    assert flag.settings.observing and flag.sources["mode"].where == "--observe"
    assert resolve_with_sources({}, {}, tmp_path / "none.toml").settings.mode == "act"


@pytest.mark.parametrize("text, message", [
    ('mode = "watch"', "mode must be one of act, observe, got 'watch'"),
    ("mode = true", "mode must be one of act, observe, got True"),
])
def test_a_bad_mode_names_the_key(tmp_path, text, message):
    config = tmp_path / "config.toml"
    config.write_text(text + "\n")
    with pytest.raises(SettingsError) as error:
        resolve_with_sources({}, {}, config)
    assert isinstance(error.value, ConfigError)
    assert str(error.value) == f"{config}: {message}"


def test_the_cli_refuses_a_bad_mode_with_one_line_and_exit_2(tmp_path):
    from click.testing import CliRunner

    from opencode_autoretry.cli.main import main

    config = tmp_path / "config.toml"
    config.write_text('mode = "loud"\n')
    result = CliRunner().invoke(main, ["--config", str(config), "--store",
                                       str(tmp_path / "s.db"), "status"])
    assert result.exit_code == 2
    assert "mode must be one of act, observe, got 'loud'" in result.output


@pytest.mark.parametrize("action, cause, facts, words", [
    (Action.INJECT, Cause.RETRY, Facts(delay_s=0), "would continue: blank reply (1/2)"),
    (Action.INJECT_AT, Cause.RETRY, Facts(delay_s=5), "would continue in 5 s: blank reply (1/2)"),
    (Action.ABORT_THEN_INJECT, Cause.RETRY, Facts(), "would stop and continue: blank reply (1/2)"),
    (Action.INJECT, Cause.MODEL_SWITCH, Facts(switch=ModelSwitch("a/x", "b/y", "usage limit")),
     "would switch a/x → b/y and continue: usage limit (1/2)"),
    (Action.NOTIFY, Cause.BUDGET_SPENT, Facts(),
     "would give up: blank reply (1/2); would tell you and wait for your message"),
    (Action.ABORT, Cause.SUBAGENT_HUNG, Facts(detail="hung 181 s"),
     "would abort the hung subagent: hung 181 s"),
    (Action.SKIP, Cause.OFF, Facts(), None),
])
def test_would_do_says_each_action(action, cause, facts, words):
    assert would_do(action, Kind.BLANK, cause, facts, 1, 2) == words


def test_a_notification_of_an_observed_decision_says_it_would(tmp_path):
    from datetime import UTC, datetime

    decision = Decision(Action.NOTIFY, Cause.BUDGET_SPENT, "ses_a", "msg_u", Kind.BLANK,
                        observed=True)
    note = from_decision(NotifyEvent.GAVE_UP, decision, 1, None, datetime(2026, 1, 1, tzinfo=UTC))
    assert note.headline == "autoretry (observe mode) would give up"
    assert note.as_json()["observed"] is True
    plain = from_decision(NotifyEvent.GAVE_UP, replace(decision, observed=False), 1, None,
                          datetime(2026, 1, 1, tzinfo=UTC))
    assert plain.headline == "autoretry gave up" and plain.as_json()["observed"] is False


def test_telemetry_marks_an_observed_decision_and_counts_no_give_up_for_it():
    from opencode_autoretry.daemon.telemetry.recorder import decision_attributes, decision_counts

    decision = Decision(Action.NOTIFY, Cause.BUDGET_SPENT, "ses_a", "msg_u", Kind.BLANK)
    assert [name for name, _ in decision_counts(decision)] == [
        "autoretry.decisions", "autoretry.faults", "autoretry.gave_up"]
    observed = replace(decision, observed=True)
    assert [name for name, _ in decision_counts(observed)] == [
        "autoretry.decisions", "autoretry.faults"]
    assert decision_attributes(observed, 7)["autoretry.observed"] == 1
    assert "autoretry.observed" not in decision_attributes(decision, 7)
