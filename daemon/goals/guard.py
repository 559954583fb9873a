"""What the daemon does for a session with a goal (issue 22).

The user sets a goal with ``/autoretry goal <command>`` (``set``); it follows the user turn
that runs when it is set, else the session's next one (``on_user_message`` binds it). When a
root turn of that session ends healthy (``on_healthy``) and the reply neither asks nor waits
for the user, the check runs on a worker (``CheckRunner``); its result comes back through the
inbox (``on_result``), is recorded (``goal_checks``) and, while the goal and the turn are
still the ones it was run for, decided on the loop's one path: a pass ends the goal
(``goal_met``), a failure becomes a ``goal`` verdict that the budget core turns into a
continuation (or, spent, stagnant, over a cap, into the one notice that ends the goal).
A later user message, ``goal off``, or a user abort ends it too. Goals and their checks are
in the store: after a restart the next healthy end of the goal's turn is checked (a reply
already checked is never checked twice).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime

from opencode_autoretry.causes import Cause, Facts
from opencode_autoretry.daemon.actions import Actions, SessionReader
from opencode_autoretry.daemon.goals.runner import CheckRunner, GoalCheckDone
from opencode_autoretry.daemon.sessions import SessionView
from opencode_autoretry.decisions.gates import waiting_on_user
from opencode_autoretry.goals.check import CheckResult, excerpt, goal_blocker, goal_verdict
from opencode_autoretry.goals.check import signature as output_signature
from opencode_autoretry.goals.config import MAX_COMMAND_CHARS, GoalConfig
from opencode_autoretry.models import Action, BudgetGroup, Decision, Kind, LiveFacts, Turn, Verdict
from opencode_autoretry.store.database import GoalRecord, Store

log = logging.getLogger(__name__)

Decide = Callable[[SessionView, Turn, Verdict, LiveFacts, datetime], Decision]
#: What a check's excerpt in the store (and so in ``trace``) keeps of its output.
STORED_EXCERPT_BYTES = 400


class GoalGuard:
    def __init__(
        self, config: GoalConfig, store: Store, actions: Actions,
        db: Callable[[], SessionReader | None], decide: Decide,
        send_due: Callable[[datetime, str], None], runner: CheckRunner,
        *, live: Callable[[str], LiveFacts], view: Callable[[str], SessionView],
        aborted: Callable[[str], bool], enabled: Callable[[str], bool],
    ) -> None:
        self.config = config
        self._store = store
        self._actions = actions
        self._db = db
        self._decide = decide
        self._send_due = send_due
        self.runner = runner
        self._live = live
        self._view = view
        self._aborted = aborted
        self._enabled = enabled
        self._judged: dict[str, str] = {}  # session -> the last reply judged (idles repeat)

    # -- the command ------------------------------------------------------------------------

    def set(self, session_id: str, command: str, now: datetime) -> tuple[bool, str]:
        """``/autoretry goal <command>``: (ok, what to tell the user)."""
        command = command.strip()
        if not command or len(command) > MAX_COMMAND_CHARS:
            return False, f"autoretry: a goal is a shell command of 1 to {MAX_COMMAND_CHARS} chars"
        if any(ord(ch) < 32 and ch != "\t" or ord(ch) == 127 for ch in command):
            return False, "autoretry: a goal is one line without control characters"
        db = self._db()
        session = db.session(session_id) if db is not None else None
        if session is None:
            return False, "autoretry: no goal — this session is not readable in OpenCode's DB"
        if session.parent_id is not None:
            return False, "autoretry: no goal — this is a child session (its parent decides)"
        view = self._view(session_id)
        turn = self._store.current_turn(session_id) if view.status in ("busy", "retry") else None
        self._store.set_goal(session_id, command, turn, now)
        self._judged.pop(session_id, None)
        when = "when this turn ends" if turn else "after your next message's turn"
        return True, (f"autoretry goal set: `{command}` — checked {when}, continued until it "
                      f"passes (at most {self.config.max_continuations} continuations, "
                      f"{self.config.max_minutes:g} min)")

    def clear(self, session_id: str, now: datetime) -> str:
        goal = self._store.active_goal(session_id)
        if goal is None:
            return "autoretry: no goal set for this session"
        self.end(goal, "the user switched the goal off (goal off)", now)
        return f"autoretry goal off: `{goal.command}`"

    def describe(self, session_id: str) -> str:
        goal = self._store.active_goal(session_id)
        if goal is None:
            ended = self._store.goals(session_id)
            if ended:
                last = ended[-1]
                return f"autoretry: no goal set (the last one, `{last.command}`, {last.state}: " \
                       f"{last.outcome})"
            return "autoretry: no goal set — `/autoretry goal <shell command>` sets one"
        checks = self._store.goal_checks(goal_id=goal.id)
        ledger = self._store.load_ledger(session_id, goal.turn_id) if goal.turn_id else None
        used = ledger.used_in(BudgetGroup.GOAL) if ledger is not None else 0
        state = "checking now" if self.runner.busy(session_id) else (
            f"last check {_check_words(checks[-1].exit_code, checks[-1].timed_out)}"
            if checks else "not checked yet")
        return (f"autoretry goal: `{goal.command}` · {len(checks)} check(s), {state} · "
                f"{used}/{self.config.max_continuations} continuations")

    def forget(self, session_id: str) -> None:
        """The session's view was evicted (issue 20): its memory here goes with it."""
        self._judged.pop(session_id, None)

    # -- what the user does -----------------------------------------------------------------

    def on_user_message(self, session_id: str, message_id: str | None, now: datetime) -> None:
        """A real user message: it binds a goal waiting for its turn, and ends one that
        followed an earlier turn (the user took over)."""
        goal = self._store.active_goal(session_id)
        if goal is None or not message_id:
            return
        if goal.turn_id is None:
            self._store.bind_goal(goal.id, message_id)
        elif goal.turn_id != message_id:
            self.end(goal, "the user wrote a new message", now)

    def on_abort(self, session_id: str, now: datetime) -> None:
        goal = self._store.active_goal(session_id)
        if goal is not None and goal.turn_id is not None:
            self.end(goal, "the user aborted the turn", now)

    def end(self, goal: GoalRecord, why: str, now: datetime) -> None:
        """End the goal without a check's verdict: recorded (``goal_given_up``)."""
        decision = Decision(Action.SKIP, Cause.GOAL_ENDED, goal.session_id, goal.turn_id,
                            Kind.GOAL, facts=Facts(detail=why))
        with self._store.atomic():
            self._store.end_goal(goal.id, "ended", why, now)
            self._actions.perform(decision, now, None)
        log.info("goal %s of %s ended: %s", goal.id, goal.session_id, why)

    # -- a healthy end: run the check --------------------------------------------------------

    def on_healthy(self, view: SessionView, turn: Turn, live: LiveFacts, now: datetime) -> None:
        goal = self._store.active_goal(view.session_id)
        last = turn.last_step
        if goal is None or last is None or view.owner is None or view.headless:
            return  # a headless run's goal is `autoretry exec --until`'s
        if goal.turn_id != turn.id:
            if turn.user.time_created < goal.set_at:
                return  # a turn from before the goal was set
            if goal.turn_id is not None:
                self.end(goal, "the user wrote a new message", now)  # seen only in the rows
                return
            self._store.bind_goal(goal.id, turn.id)  # its message came while the daemon was down
            goal = replace(goal, turn_id=turn.id)
        if self._judged.get(view.session_id) == last.id or self.runner.busy(view.session_id):
            return
        if self._store.open_injections(view.session_id):
            return  # another continuation (a retry, a loop stop) is on its way: its end is next
        if any(c.reply_id == last.id for c in self._store.goal_checks(goal_id=goal.id)):
            return  # checked before a restart
        if not self._enabled(view.session_id) or waiting_on_user(live) is not None:
            return  # nothing is sent now; the goal waits for the next healthy end
        self._judged[view.session_id] = last.id
        aborted = "the user aborted this turn" if self._aborted(view.session_id) else None
        blocker = goal_blocker(turn, aborted=aborted)
        if blocker is not None:  # recorded, for trace: why the goal did not go on
            verdict = Verdict(Kind.GOAL, False, f"goal `{goal.command}`: {blocker}", last.id)
            self._actions.perform(self._decide(view, turn, verdict, live, now), now, last.id)
            return
        db = self._db()
        session = db.session(view.session_id) if db is not None else None
        if session is None or session.parent_id is not None:
            return
        if self.runner.start(view.session_id, goal.id, last.id, goal.command,
                             session.directory or None):
            log.info("goal %s of %s: running its check %r in %s", goal.id, view.session_id,
                     goal.command, session.directory)
            self._actions.notify(view.session_id, f"autoretry: running the goal check "
                                 f"`{goal.command}`", "info")

    # -- the check's result ------------------------------------------------------------------

    def on_result(self, done: GoalCheckDone, now: datetime) -> Decision | None:
        self.runner.finished(done.session_id)
        result = done.result
        goal = self._store.active_goal(done.session_id)
        turn = self._still_current(goal, done)
        if goal is None or turn is None:
            self._record(done, None, now)  # the session moved on: recorded, nothing done
            log.info("goal check of %s ended (%s); the goal or the turn moved on", done.session_id,
                     result.status_words)
            return None
        last = turn.last_step
        assert last is not None
        failing = [c.signature for c in self._store.goal_checks(goal_id=goal.id)
                   if c.exit_code != 0 and c.decision_id is not None]  # stale runs: not counted
        if result.passed:
            return self._met(goal, turn, done, now)
        verdict = goal_verdict(turn, result, [*failing, output_signature(result.output)])
        assert verdict is not None
        view = self._view(done.session_id)
        decision = self._decide(view, turn, verdict, self._live(done.session_id), now)
        decision = _dressed(decision, result, self.config)
        with self._store.atomic():
            performed = self._actions.perform(decision, now, last.id)
            self._record(done, performed.decision_id, now)
            if decision.action is Action.NOTIFY:
                self._store.end_goal(goal.id, "given_up", decision.reason, now)
            elif decision.action is Action.SKIP and decision.cause is Cause.USER_ABORT:
                self._store.end_goal(goal.id, "ended", "the user aborted the turn", now)
        if decision.sends:
            self._send_due(now, done.session_id)
        return decision

    def _still_current(self, goal: GoalRecord | None, done: GoalCheckDone) -> Turn | None:
        """The goal's turn, when the check's result still answers its last reply: the same
        goal, no newer reply, no other continuation on its way."""
        if goal is None or goal.id != done.goal_id:
            return None
        db = self._db()
        turn = db.last_turn(done.session_id) if db is not None else None
        last = turn.last_step if turn is not None else None
        if turn is None or last is None or turn.id != goal.turn_id or last.id != done.reply_id:
            return None
        return None if self._store.open_injections(done.session_id) else turn

    def _met(self, goal: GoalRecord, turn: Turn, done: GoalCheckDone, now: datetime) -> Decision:
        ledger = self._store.load_ledger(goal.session_id, turn.id)
        used = ledger.used_in(BudgetGroup.GOAL) if ledger is not None else 0
        decision = Decision(
            Action.SKIP, Cause.GOAL_MET, goal.session_id, turn.id, Kind.GOAL,
            facts=Facts(detail=f"`{goal.command}` exit status 0", continuations=used,
                        exit_code=0, check_s=round(done.result.duration_s, 3)),
        )
        with self._store.atomic():
            performed = self._actions.perform(decision, now, done.reply_id)
            self._record(done, performed.decision_id, now)
            self._store.end_goal(goal.id, "met", f"the check passed after {used} "
                                 "continuation(s)", now)
        self._actions.notify(goal.session_id, f"autoretry: goal met — `{goal.command}` passes "
                             f"(after {used} continuation(s))", "success")
        return decision

    def _record(self, done: GoalCheckDone, decision_id: int | None, now: datetime) -> None:
        result = done.result
        self._store.record_goal_check(
            done.goal_id, done.session_id, done.reply_id, now, result.exit_code,
            int(result.duration_s * 1000), result.timed_out, output_signature(result.output),
            excerpt(result.output, STORED_EXCERPT_BYTES) or result.error, decision_id,
        )


def _check_words(exit_code: int | None, timed_out: bool) -> str:
    if timed_out:
        return "timed out"
    return "passed" if exit_code == 0 else f"failed (exit {exit_code})"


def _dressed(decision: Decision, result: CheckResult, config: GoalConfig) -> Decision:
    """The goal's words: what the toast says of a continuation, the notice's text."""
    facts = replace(decision.facts, exit_code=result.exit_code,
                    check_s=round(result.duration_s, 3))
    decision = replace(decision, facts=facts)
    if decision.sends:
        toast = (f"autoretry: goal check {result.status_words} — continuing "
                 f"({decision.used_after}/{decision.limit})")
        return replace(decision, toast=toast)
    if decision.action is Action.NOTIFY and decision.cause is not Cause.SPEND_CAP:
        why = decision.facts.give_up or (f"{decision.used_before} of {config.max_continuations}"
                                        " continuations spent")
        text = f"autoretry: gave up on the goal `{result.command}` — {why}; waiting for you."
        return replace(decision, text=text)
    return decision
