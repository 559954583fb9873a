"""Goals and spend caps (issue 22): the pure core, the check runner, the daemon's goal path."""

from __future__ import annotations

import threading
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest
from daemon_fakes import Harness
from opencode_rows import tokens

from opencode_autoretry.causes import Cause
from opencode_autoretry.config.load import parse_config
from opencode_autoretry.config.settings import ConfigError, Settings
from opencode_autoretry.daemon.goals.runner import CheckRunner, run_check
from opencode_autoretry.decisions.caps import Caps, TurnSpend, load_caps, over_cap
from opencode_autoretry.goals.check import (
    CheckResult,
    excerpt,
    goal_verdict,
    signature,
    stagnant,
)
from opencode_autoretry.goals.config import EXCERPT_BYTES, GoalConfig, load_goal_config
from opencode_autoretry.models import Action, BudgetGroup, Decision, Kind
from opencode_autoretry.notifications.events import NotifyEvent, event_for
from opencode_autoretry.store.database import Store
from opencode_autoretry.todos.reply_intent import Intent, read_intent

DONE = "All done: the parser is in place and its tests pass."
ASKS = "I wrote the plan. Should I use SQLite or Postgres?"


# --- the pure core ---------------------------------------------------------------------------


def test_the_same_failure_with_other_numbers_and_times_has_one_signature():
    one = "FAILED tests/test_x.py::test_a - 3 != 4\n2 failed, 10 passed in 0.53s at 12:01:07"
    two = "FAILED tests/test_x.py::test_a - 5 != 4\n2 failed, 11 passed in 1.20s at 12:03:59"
    other = "FAILED tests/test_y.py::test_b - KeyError\n1 failed in 0.5s"
    assert signature(one) == signature(two) != signature(other)
    assert stagnant([signature(one), signature(two)])
    assert not stagnant([signature(other), signature(two)]) and not stagnant([signature(one)])


def test_the_fake_model_s_done_replies_read_as_done():
    """The e2e scenarios' fake replies (tests/e2e/fake_goals.py) are checked, not held."""
    from fake_goals import ASK_TEXT, DONE_TEXTS

    assert {read_intent(t).intent for t in DONE_TEXTS} == {Intent.DONE}
    assert read_intent(ASK_TEXT).intent is Intent.ASKS


def test_a_failing_check_is_continued_with_its_command_status_and_output_tail(tmp_path):
    h = Harness(tmp_path)
    sid, user = h.busy_turn()
    h.rows.assistant(sid, user, text=DONE)
    h.rows.commit()
    turn = h.loop.db().last_turn(sid)
    output = "x" * 5000 + "\nE   assert parse('a') == 1\n1 failed"
    verdict = goal_verdict(turn, CheckResult("pytest -q", 1, 2.0, output), ["sig"])
    assert verdict is not None and verdict.kind is Kind.GOAL and verdict.retryable
    assert verdict.give_up is None and verdict.message_id == turn.last_step.id
    assert "`pytest -q`" in verdict.text and "exit status 1" in verdict.text
    assert "assert parse('a') == 1\n1 failed" in verdict.text
    assert len(excerpt(output).encode()) <= EXCERPT_BYTES + 3  # the tail and its '…'
    assert goal_verdict(turn, CheckResult("pytest -q", 0, 1.0, "ok"), []) is None
    hung = goal_verdict(turn, CheckResult("pytest -q", None, 600.0, "", timed_out=True), [])
    assert hung is not None and "timed out" in (hung.give_up or "")
    same = goal_verdict(turn, CheckResult("pytest -q", 1, 1.0, "a"), ["a", "a"])
    assert same is not None and "stagnation" in (same.give_up or "")


@pytest.mark.parametrize("table, key", [
    ({"goal": {"timeout": 0}}, "goal.timeout"),
    ({"goal": {"max_continuations": 1.5}}, "goal.max_continuations"),
    ({"goal": {"max_minute": 5}}, "goal: unknown key"),
    ({"caps": {"max_turn_cost": -1}}, "caps.max_turn_cost"),
    ({"caps": {"max_turn_tokens": True}}, "caps.max_turn_tokens"),
    ({"caps": {"max_turns": 3}}, "caps: unknown key"),
])
def test_a_bad_goal_or_caps_key_is_refused_with_its_name(table, key):
    with pytest.raises(ConfigError, match=key):
        parse_config(replace(Settings(), **table))


def test_config_defaults_and_the_goal_s_own_caps():
    config = parse_config(Settings())
    assert config.goal == GoalConfig(600.0, 10, 120.0) and not config.caps.any
    assert config.policy.budget_for(BudgetGroup.GOAL).max_retries == 10
    assert GoalConfig().caps(Caps()).max_turn_minutes == 120.0  # a goal always has one
    assert GoalConfig().caps(Caps(max_turn_minutes=30.0)).max_turn_minutes == 30.0
    assert load_goal_config({"max_minutes": 5}).max_minutes == 5.0
    assert load_caps({"max_turn_cost": 2}).max_turn_cost == 2.0


def test_over_cap_names_the_cap_that_binds():
    caps = Caps(max_turn_cost=1.0, max_turn_tokens=1000, max_turn_minutes=30.0)
    assert over_cap(TurnSpend(0.5, 900, 10.0), caps) is None
    assert over_cap(TurnSpend(1.5, 900, 10.0), caps) == "max_turn_cost = 1 USD"
    assert over_cap(TurnSpend(0.5, 1001, 10.0), caps) == "max_turn_tokens = 1000"
    assert over_cap(TurnSpend(0.5, 10, 31.0), caps) == "max_turn_minutes = 30"
    assert over_cap(TurnSpend(99.0, 10**9, 9999.0), Caps()) is None  # off by default


# --- the check runner --------------------------------------------------------------------------


def test_a_check_runs_in_its_directory_with_its_exit_status_and_output(tmp_path):
    result = run_check("pwd; echo oops >&2; exit 3", str(tmp_path), 30.0)
    assert result.exit_code == 3 and not result.timed_out and not result.passed
    assert str(tmp_path) in result.output and "oops" in result.output
    assert run_check("true", str(tmp_path), 30.0).passed
    gone = run_check("true", str(tmp_path / "missing"), 30.0)
    assert gone.error is not None and not gone.passed


def test_a_hung_check_is_killed_at_its_timeout_with_its_whole_process_group(tmp_path):
    pid_file = tmp_path / "pid"
    result = run_check(f"sleep 300 & echo $! > {pid_file}; wait", str(tmp_path), 0.5)
    assert result.timed_out and result.exit_code is None and result.duration_s >= 0.5
    pid = int(pid_file.read_text())
    gone = threading.Event()  # SIGKILL is delivered at once; the exit follows when it runs
    for _ in range(3000):
        if not running(pid):
            gone.set()
            break
        gone.wait(0.01)
    assert gone.is_set(), f"the check's background job {pid} outlived its killed group"


def running(pid: int) -> bool:
    """Alive and not a zombie (a killed orphan waits for its reaper a moment)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def test_a_check_s_output_is_capped_to_its_tail(tmp_path):
    result = run_check("head -c 300000 /dev/zero | tr '\\0' a; echo END", str(tmp_path), 30.0,
                       cap=1000)
    assert len(result.output) == 1000 and result.output.endswith("END\n")


def test_the_runner_runs_one_check_per_session_on_a_worker_never_the_caller_thread():
    posted: list[object] = []
    release = threading.Event()

    def slow(command: str, directory: str | None, timeout: float, **_: object) -> CheckResult:
        release.wait()
        return CheckResult(command, 1, 0.1, "no")

    runner = CheckRunner(posted.append, 10.0, run=slow)
    assert runner.start("s1", 1, "m1", "check", None)
    assert not runner.start("s1", 1, "m1", "check", None)  # at most one per session
    assert runner.busy("s1") and runner.start("s2", 2, "m2", "check", None)
    release.set()
    for thread in list(runner._running.values()):
        thread.join()
    assert {d.session_id for d in posted} == {"s1", "s2"}  # type: ignore[attr-defined]
    assert all(d.worker != threading.get_ident() for d in posted)  # type: ignore[attr-defined]


# --- the daemon's goal path ------------------------------------------------------------------


class Checks:
    """A scripted check: each run returns the next exit status (and output)."""

    def __init__(self, *runs: tuple[int | None, str]) -> None:
        self.runs = list(runs)
        self.commands: list[tuple[str, str | None]] = []

    def __call__(self, command: str, directory: str | None, timeout: float, **_: object
                 ) -> CheckResult:
        self.commands.append((command, directory))
        code, output = self.runs.pop(0)
        return CheckResult(command, code, 0.01, output, timed_out=code is None)


def goal_harness(tmp_path: Path, checks: Checks, **settings: object) -> Harness:
    h = Harness(tmp_path, **settings)
    h.loop.goals.runner = CheckRunner(h.loop.posted.append, 10.0, run=checks)
    h.hello()
    return h


def settle(h: Harness) -> None:
    """Wait for the worker threads, then hand their results to the loop (as its inbox would)."""
    for thread in list(h.loop.goals.runner._running.values()):
        thread.join()
    while h.loop.posted:
        h.loop.handle(h.loop.posted.pop(0))


def reply(h: Harness, sid: str, parent: str, text: str = DONE, **extra: object) -> str:
    mid = h.rows.assistant(sid, parent, text=text, **extra)  # type: ignore[arg-type]
    h.rows.commit()
    h.idle(sid)
    return mid


def test_a_goal_fails_twice_then_passes_two_continuations_then_met(tmp_path):
    checks = Checks((1, "FAIL: parser missing"), (1, "FAIL: 2 tests fail"), (0, "ok"))
    h = goal_harness(tmp_path, checks)
    sid = h.session()
    assert h.command(sid, "goal pytest -q").ok
    user = h.user(sid)
    h.chat(sid, user)
    h.status(sid, "busy")
    reply(h, sid, user)
    settle(h)
    for n in (1, 2):
        prompt = h.prompts()[-1]
        assert len(h.prompts()) == n and "FAIL:" in prompt.text and "pytest -q" in prompt.text
        h.chat(sid, f"msg_cont{n}", prompt.text, marker=dict(prompt.marker or {}))
        h.status(sid, "busy")
        reply(h, sid, h.injected_row(sid, prompt))
        settle(h)
    assert len(h.prompts()) == 2 and [c for c, _ in checks.commands] == ["pytest -q"] * 3
    [goal] = h.store.goals(sid)
    assert goal.state == "met" and [c.exit_code for c in h.store.goal_checks(sid)] == [1, 1, 0]
    met = h.store.decisions(sid)[-1]
    assert met.cause == Cause.GOAL_MET and "goal met" in h.toasts()[-1]
    assert checks.commands[0][1] == "/work/project"  # the session's directory


def test_a_reply_that_asks_the_user_is_never_checked(tmp_path):
    checks = Checks()
    h = goal_harness(tmp_path, checks)
    sid = h.session()
    h.command(sid, "goal true")
    user = h.user(sid)
    h.chat(sid, user)
    reply(h, sid, user, ASKS)
    settle(h)
    assert checks.commands == [] and h.prompts() == []
    [skip] = h.store.decisions(sid)
    assert skip.action == "skip" and "the reply asks" in skip.reason


def test_a_user_message_while_the_check_runs_ends_the_goal_and_nothing_is_sent(tmp_path):
    checks = Checks((1, "FAIL"))
    h = goal_harness(tmp_path, checks)
    sid = h.session()
    h.command(sid, "goal make test")
    user = h.user(sid)
    h.chat(sid, user)
    release = threading.Event()
    run = h.loop.goals.runner._run
    h.loop.goals.runner._run = lambda *a, **k: (release.wait(), run(*a, **k))[1]
    reply(h, sid, user)
    assert h.loop.goals.runner.busy(sid)
    h.chat(sid, h.user(sid, "stop, I'll do it"))
    release.set()
    settle(h)
    assert h.prompts() == [] and h.store.goals(sid)[0].state == "ended"
    assert h.store.decisions(sid)[-1].cause == Cause.GOAL_ENDED
    assert len(h.store.goal_checks(sid)) == 1  # recorded, acted on by nothing


def test_no_goal_for_a_child_session_and_nothing_while_off(tmp_path):
    checks = Checks()
    h = goal_harness(tmp_path, checks)
    root = h.session()
    child = h.session(parent_id=root)
    reply_ = h.command(child, "goal true")
    assert not reply_.ok and "child session" in reply_.message and h.store.goals(child) == []
    h.command(root, "goal true")
    h.command(root, "off here")
    user = h.user(root)
    h.chat(root, user)
    reply(h, root, user)
    settle(h)
    assert checks.commands == [] and h.prompts() == []


def test_a_goal_survives_a_restart_and_a_reply_is_never_checked_twice(tmp_path):
    checks = Checks((1, "FAIL: one"), (0, "ok"))
    h = goal_harness(tmp_path, checks)
    sid = h.session()
    h.command(sid, "goal make test")
    user = h.user(sid)
    h.chat(sid, user)
    reply(h, sid, user)
    settle(h)
    [prompt] = h.prompts()
    h.chat(sid, "msg_c1", prompt.text, marker=dict(prompt.marker or {}))
    h.sigkill()
    h.revive()
    answer = h.injected_row(sid, prompt)
    h.loop.goals.runner = CheckRunner(h.loop.posted.append, 10.0, run=checks)
    h.hello()
    h.idle(sid)  # the first reply again: checked before the restart, not again
    settle(h)
    assert len(checks.commands) == 1
    reply(h, sid, answer)
    settle(h)
    assert len(checks.commands) == 2 and h.store.goals(sid)[0].state == "met"


def test_goal_command_shows_and_clears(tmp_path):
    h = goal_harness(tmp_path, Checks())
    sid = h.session()
    assert "no goal set" in h.command(sid, "goal").message
    assert "autoretry goal set: `pytest -q -k 'Parse'`" in h.command(
        sid, "goal pytest -q -k 'Parse'").message  # case and quoting kept
    assert "0 check(s)" in h.command(sid, "goal").message
    assert "goal `pytest -q -k 'Parse'`" in h.command(sid, "status").message
    assert "goal off" in h.command(sid, "goal off").message
    assert h.store.goals(sid)[0].state == "ended"


# --- spend caps ---------------------------------------------------------------------------------


def test_a_blank_reply_over_the_token_cap_gets_one_notice_and_nothing_more(tmp_path):
    h = Harness(tmp_path, caps={"max_turn_tokens": 50})
    h.hello()
    sid, user = h.busy_turn()
    h.blank_step(sid, user)  # 100 prompt tokens
    h.idle(sid)
    assert h.prompts() == []
    [notice] = h.store.decisions(sid)
    assert notice.action == "notify" and notice.cause == Cause.SPEND_CAP
    assert notice.facts.tokens == 100 and notice.facts.cap == "max_turn_tokens = 50"
    assert "over max_turn_tokens = 50" in h.toasts()[-1]
    h.status(sid, "busy")
    h.blank_step(sid, user)
    h.idle(sid)  # every group is closed for the rest of the turn
    assert h.prompts() == [] and h.store.decisions(sid)[-1].cause == Cause.GROUP_EXHAUSTED
    assert "spend $0 / -, 200 / 50 tokens" in h.command(sid, "status").message


def test_the_same_blank_reply_under_the_cap_is_continued(tmp_path):
    h = Harness(tmp_path, caps={"max_turn_tokens": 5000})
    h.hello()
    sid, user = h.busy_turn()
    h.rows.assistant(sid, user, finish="stop", toks=tokens(100, 0), text=None)
    h.rows.commit()
    h.idle(sid)
    assert len(h.prompts()) == 1


def test_goal_ends_and_spend_caps_raise_their_events():
    met = Decision(Action.SKIP, Cause.GOAL_MET, "s", "t", Kind.GOAL)
    ended = Decision(Action.SKIP, Cause.GOAL_ENDED, "s", "t", Kind.GOAL)
    spent = Decision(Action.NOTIFY, Cause.BUDGET_SPENT, "s", "t", Kind.GOAL)
    capped = Decision(Action.NOTIFY, Cause.SPEND_CAP, "s", "t", Kind.BLANK)
    assert event_for(met, is_child=False) is NotifyEvent.GOAL_MET
    assert event_for(ended, is_child=False) is NotifyEvent.GOAL_GIVEN_UP
    assert event_for(spent, is_child=False) is NotifyEvent.GOAL_GIVEN_UP
    assert event_for(capped, is_child=False) is NotifyEvent.GAVE_UP
    assert event_for(met, is_child=True) is None


def test_the_store_keeps_goals_across_a_reopen(tmp_path):
    store = Store.open(tmp_path / "s.db")
    now = datetime(2026, 12, 1, tzinfo=UTC)
    first = store.set_goal("s", "make", None, now)
    second = store.set_goal("s", "make test", "t", now)
    store.close()
    store = Store.open(tmp_path / "s.db")
    assert [(g.id, g.state) for g in store.goals("s")] == [(first, "ended"), (second, "active")]
    assert store.active_goal("s").command == "make test"  # type: ignore[union-attr]


def test_a_user_abort_ends_the_goal_and_nothing_is_checked(tmp_path):
    from opencode_rows import aborted_error

    checks = Checks()
    h = goal_harness(tmp_path, checks)
    sid = h.session()
    h.command(sid, "goal make test")
    user = h.user(sid)
    h.chat(sid, user)
    h.status(sid, "busy")
    h.rows.assistant(sid, user, finish=None, error=aborted_error())
    h.rows.commit()
    h.error_then_idle(sid, aborted_error())
    settle(h)
    assert checks.commands == [] and h.prompts() == []
    [goal] = h.store.goals(sid)
    assert goal.state == "ended" and goal.outcome == "the user aborted the turn"


def test_a_goal_whose_turn_began_while_the_daemon_was_down_binds_to_it(tmp_path):
    checks = Checks((0, "ok"))
    h = goal_harness(tmp_path, checks)
    sid = h.session()
    h.command(sid, "goal make test")
    h.advance(1)
    user = h.user(sid)  # no chat.message: the daemon never saw it
    reply(h, sid, user)
    settle(h)
    assert len(checks.commands) == 1 and h.store.goals(sid)[0].state == "met"
    assert h.store.goals(sid)[0].turn_id == user


def test_the_reader_takes_opencode_s_per_message_cost():
    from opencode_autoretry.opencode.shapes import parse_message

    def cost(raw: object) -> float:
        return parse_message("m", "s", 0, {"role": "assistant", "cost": raw}).cost

    assert cost(0.0123) == 0.0123 and cost(2) == 2.0
    assert cost(None) == cost("1.5") == cost(True) == cost(-1) == cost(float("inf")) == 0.0


def test_autoretry_status_lists_the_active_goals(tmp_path):
    from opencode_autoretry.daemon.control import render_status, status_report
    from opencode_autoretry.store.database import StoreView

    h = goal_harness(tmp_path, Checks())
    sid = h.session()
    refused = h.command(sid, "goal pytest -q\x1b[31m")
    assert not refused.ok and "control characters" in refused.message
    h.command(sid, "goal pytest -q")
    view = StoreView.open(h.settings.store)
    try:
        report = status_report(view, h.clock.now())
    finally:
        view.close()
    [goal] = report["goals"]
    assert goal["session_id"] == sid and goal["checks"] == 0
    text = render_status(report)
    assert "active goals: 1" in text and "`pytest -q`" in text
