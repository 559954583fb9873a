"""Model-based tests of the whole decision path (issue 11, item 2): the real loop, store and
OpenCode DB rows, a fake bridge and a fake clock, driven by hypothesis' stateful testing.

Generated sequences mix user messages, faults of every kind the menu has, healthy and tool
turns, events that are duplicated, reordered or dropped, user aborts, ``/autoretry off|on
here``, child sessions, daemon restarts (SIGKILL), bridge cuts, OpenCode running the
continuations it was sent, and jumps of the daemon's clock forward and back. After every step:

- never more continuations for a turn than its budgets allow (per group and the shared
  interruption cap);
- never a continuation into a child session, a session switched off, or a turn the user
  aborted (after the abort);
- never two continuations for the same failure.

And at the end of every sequence, liveness (a daemon that never sends passes the rest): the
bridge comes back if it was cut and the clock runs past every waiting retry, then every
recoverable failure is continued exactly once. Recoverable, in the model's own terms: a failed
step (blank, forged length, tool call as text, disconnect) of a root session whose end reached
the daemon (its events, or the hello of the bridge that was cut while it ended and that owned
the session); its group's budget left in the turn's ledger (count, shared interruption cap, not
exhausted, not already handled); autoretry on; a live owner (the bridge was never away while
the clock moved on: past the owner grace a continuation is given up by design); nothing in the
way (its child busy, an abort the daemon asked for still in flight, a retry of the same turn
already waiting: that one continues the turn); and no ``off here`` since. If the session moved
on before the continuation went out (a user message, a user abort, a step OpenCode took by
itself), it must at least have been decided by then: the move cancels a waiting back-off, by
design. A failure still its session's last step must have gone out.

The suite runs ``AUTORETRY_MODEL_EXAMPLES`` sequences (default 150); the figure in
docs/reliability.md comes from a run with 10 000 (``AUTORETRY_MODEL_EXAMPLES=10000 pytest -n 0
--timeout=0 tests/test_decision_model.py``), which prints the sequences, the events the daemon
handled, the continuations sent and the failures held to one.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest
from daemon_fakes import CONN, PID, Harness, disconnect
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from opencode_rows import aborted_error, tokens

from opencode_autoretry.decisions.policy import INTERRUPTION_GROUPS
from opencode_autoretry.models import BudgetGroup, TurnLedger
from opencode_autoretry.plugin_bridge import protocol

EXAMPLES = int(os.environ.get("AUTORETRY_MODEL_EXAMPLES", "150"))
FAULTS = ("healthy", "blank", "disconnect", "tool_as_text", "length", "tool_turn")
DELIVERY = ("normal", "duplicated", "reordered", "dropped")
#: Thousands of small SQLite files: on tmpfs when there is one (fsyncs dominate on a disk).
SCRATCH = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
SECONDS = (-30.0, 0.5, 1.0, 6.0, 11.0, 40.0, 120.0)
#: The budget group of each failing fault (the classifier's: blank, forged length and a tool
#: call written as text are "blank"; the disconnect is an interruption).
GROUP_OF_FAULT = {"blank": BudgetGroup.BLANK, "length": BudgetGroup.BLANK,
                  "tool_as_text": BudgetGroup.BLANK, "disconnect": BudgetGroup.DISCONNECT}
#: The settling at the end moves the clock at most this far a step (a tick each).
SETTLE_STEP = 5.0


@dataclass(frozen=True)
class Failure:
    """A failed step the daemon was told of, owed one continuation."""

    session_id: str
    turn: str
    group: BudgetGroup


@dataclass
class Tally:
    """Across the sequences of one run, for the printed figure."""

    sequences: int = 0
    steps: int = 0  # ``step`` rules drawn (OpenCode's own steps; a no-op in a closed turn)
    events: int = 0  # bridge messages the daemon handled
    continuations: int = 0
    owed: int = 0  # failures the liveness check held to exactly one continuation


TALLY = Tally()


class DecisionPath(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="ar-model-", dir=SCRATCH))
        self.h = Harness(self.tmp)
        self.h.hello()
        self.roots: list[str] = []
        self.child: str | None = None
        self.turn: dict[str, str] = {}  # session -> open user turn (message id)
        self.off: set[str] = set()
        self.aborted: dict[tuple[str, str], int] = {}  # (session, turn) -> prompts at abort
        self.off_at: dict[str, int] = {}  # session -> prompts when switched off
        self.delivered = 0  # prompts OpenCode has run
        self.conn = CONN
        self.conns = 1
        # Liveness bookkeeping: failed step id -> what is owed; each session's last step;
        # sessions the daemon last heard busy (on this connection, this daemon).
        self.owed: dict[str, Failure] = {}
        self.last_step: dict[str, str] = {}
        self.step_of: dict[str, tuple[str, str, str]] = {}  # step -> (session, turn, fault)
        self.busy: set[str] = set()
        # A bridge cut: the sessions the cut connection owned (its traffic named them) wait for
        # its hello; the failed steps written while it was away are judged then (gap review).
        self.heard: set[str] = set()
        self.away: set[str] = set()
        self.unseen: set[str] = set()
        self.steps = 0
        self.events = 0

    def teardown(self) -> None:
        try:
            if sys.exc_info()[0] is None:  # the sequence passed: its end must be live too
                self.settle()
                self.continuations_stay_within_budget_and_where_they_belong()
                self.every_recoverable_failure_was_continued_once()
                self._count()
        finally:
            self._close()

    def _count(self) -> None:
        TALLY.sequences += 1
        TALLY.steps += self.steps
        TALLY.events += self.events
        TALLY.continuations += len(self.h.prompts())
        TALLY.owed += len(self.owed)

    def _close(self) -> None:
        sent = len(self.h.prompts())
        event(f"continuations sent: {'0' if not sent else '1-2' if sent <= 2 else '3+'}")
        decided = {d.action for d in self.h.store.decisions()}
        event(f"gap reviews: {'some' if self.h.loop.gap.judged else 'none'}")
        for action in sorted(decided):
            event(f"decided: {action}")
        self.h.store.close()
        self.h.rows.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    # -- setup --------------------------------------------------------------------------------

    @initialize()
    def sessions(self) -> None:
        for _ in range(2):
            self.roots.append(self.h.session())
        self.child = self.h.session(parent_id=self.roots[0])
        for index in range(3):  # every session starts with a turn open: steps come at once
            self.user_message(index)

    def _all(self) -> list[str]:
        return [*self.roots, *([self.child] if self.child else [])]

    # -- the user -----------------------------------------------------------------------------

    @rule(index=st.integers(0, 2))
    def user_message(self, index: int) -> None:
        sid = self._all()[index]
        mid = self.h.user(sid)
        self._chat(sid, mid, "do it")
        self.turn[sid] = mid

    @rule(index=st.integers(0, 2))
    def user_abort(self, index: int) -> None:
        sid = self._all()[index]
        if sid not in self.turn:
            return
        self._ev("session.status", sid, status={"type": "busy"})
        self._wrote(sid, self.turn[sid], "aborted", self.h.rows.assistant(
            sid, self.turn[sid], finish=None, text="", error=aborted_error()))
        self.h.rows.commit()
        view = self.h.loop.sessions.get(sid)
        if view is None or view.abort_requested is None:
            self.aborted.setdefault((sid, self.turn[sid]), len(self.h.prompts()))
        # else: the daemon asked for an abort (a stall) and this is OpenCode carrying it out;
        # a user's Esc at that very moment cannot be told apart from it (the same error).
        del self.turn[sid]  # OpenCode does nothing more in an aborted turn until the user writes
        if self.conn in self.h.bridge.alive:
            self._ev("session.error", sid, error=aborted_error())
            self._idle(sid)

    @rule(index=st.integers(0, 1), on=st.booleans())
    def switch(self, index: int, on: bool) -> None:
        sid = self.roots[index]
        if self.conn not in self.h.bridge.alive:
            return
        self.events += 1
        self.h.send(protocol.Command(id="c-1", name="autoretry", session_id=sid,
                                     arguments="on here" if on else "off here"), self.conn)
        if on:
            self.off.discard(sid)
            self.off_at.pop(sid, None)
        else:
            self.off.add(sid)
            self.off_at.setdefault(sid, len(self.h.prompts()))
            self._waive(lambda failure: failure.session_id == sid)  # off cancels what waits

    # -- OpenCode -----------------------------------------------------------------------------

    @rule(index=st.integers(0, 2), fault=st.sampled_from(FAULTS),
          delivery=st.sampled_from(DELIVERY))
    def step(self, index: int, fault: str, delivery: str) -> None:
        sid = self._all()[index]
        self.steps += 1
        if sid not in self.turn:
            return
        if self.conn in self.h.bridge.alive:
            self._ev("session.status", sid, status={"type": "busy"})
        self._write_step(sid, self.turn[sid], fault)
        self._deliver_end(sid, fault, delivery)

    def _write_step(self, sid: str, turn: str, fault: str) -> None:
        rows = self.h.rows
        if fault == "healthy":
            mid = rows.assistant(sid, turn)
        elif fault == "blank":
            mid = rows.assistant(sid, turn, finish="stop", toks=tokens(100, 0), text=None)
        elif fault == "disconnect":
            mid = rows.assistant(sid, turn, finish=None, text="", error=disconnect())
        elif fault == "tool_as_text":
            mid = rows.assistant(sid, turn, text='<function=bash>{"command": "ls"}</function>')
        elif fault == "length":
            mid = rows.assistant(sid, turn, finish="length", toks=tokens(100, 0), text=None)
        else:  # a tool step, then the answer
            rows.assistant(sid, turn, finish="tool-calls", tools=[("bash", "completed")])
            mid = rows.assistant(sid, turn)
        rows.commit()
        self._wrote(sid, turn, fault, mid)

    def _wrote(self, sid: str, turn: str, fault: str, mid: str) -> None:
        self.last_step[sid] = mid
        self.step_of[mid] = (sid, turn, fault)
        if self.conn not in self.h.bridge.alive:
            self.unseen.add(mid)

    def _deliver_end(self, sid: str, fault: str, delivery: str) -> None:
        if delivery == "dropped" or self.conn not in self.h.bridge.alive:
            return
        self._owe(self.last_step[sid])
        error = disconnect() if fault == "disconnect" else None
        for _ in range(2 if delivery == "duplicated" else 1):
            if delivery == "reordered":
                self._ev("session.idle", sid)  # the idle overtakes the error
            if error is not None:
                self._ev("session.error", sid, error=error)
            self._idle(sid)

    def _owe(self, failed: str) -> None:
        """The end of step ``failed`` is about to reach the daemon (its events, or the hello
        after a cut): owed a continuation if it failed and is recoverable now (see the
        module's docstring)."""
        sid, turn, fault = self.step_of[failed]
        group = GROUP_OF_FAULT.get(fault)
        if group is None or sid not in self.roots or sid in self.off or failed in self.owed:
            return
        if self.child in self.busy and sid == self.roots[0]:
            return  # it waits on its child (judged again when the child ends)
        view = self.h.loop.sessions.get(sid)
        if view is not None and view.abort_requested is not None:
            return  # the daemon's own abort in flight: this end is taken for it
        pending = self.h.loop.actions.pending.get(sid)
        if pending is not None and pending.turn_id == turn:
            return  # a retry of this turn is already waiting: it continues the turn
        ledger = self.h.store.load_ledger(sid, turn)
        if ledger is None or self._has_budget(ledger, group, failed):
            self.owed[failed] = Failure(sid, turn, group)

    def _has_budget(self, ledger: TurnLedger, group: BudgetGroup, failed: str) -> bool:
        policy = self.h.policy
        if ledger.user_aborted or group in ledger.exhausted or failed in ledger.handled:
            return False
        if ledger.used_in(group) >= policy.budget_for(group, None).max_retries:
            return False
        shared = sum(ledger.used_in(g) for g in INTERRUPTION_GROUPS)
        return group not in INTERRUPTION_GROUPS or shared < policy.cap_for(None)

    def _waive(self, waived: Callable[[Failure], bool]) -> None:
        self.owed = {m: f for m, f in self.owed.items() if not waived(f)}

    def _ev(self, kind: str, sid: str, **props: object) -> None:
        if self.conn in self.h.bridge.alive:  # a cut bridge delivers nothing
            self.events += 1
            self.heard.add(sid)
            self.h.event(kind, conn=self.conn, sessionID=sid, **props)
            status = props.get("status")
            if kind == "session.status" and isinstance(status, dict):
                if status.get("type") == "busy":
                    self.busy.add(sid)
                else:
                    self.busy.discard(sid)

    def _idle(self, sid: str) -> None:
        self._ev("session.status", sid, status={"type": "idle"})
        self._ev("session.idle", sid)

    def _chat(self, sid: str, mid: str, text: str, marker: dict | None = None) -> None:
        if self.conn not in self.h.bridge.alive:
            return  # a cut bridge delivers nothing (the DB has the message)
        self.events += 1
        self.heard.add(sid)
        self.h.send(protocol.ChatMessage(t=0, session_id=sid, message_id=mid, agent="build",
                                         marker=marker, text=text), self.conn)

    @rule(fault=st.sampled_from(FAULTS))
    def opencode_runs_a_continuation(self, fault: str) -> None:
        prompts = self.h.prompts()
        if self.delivered >= len(prompts):
            return
        prompt = prompts[self.delivered]
        self.delivered += 1
        if prompt.session_id not in self.turn:
            return  # its turn was aborted: the prompt went with it
        mid = self.h.injected_row(prompt.session_id, prompt)
        if self.conn in self.h.bridge.alive:
            self._chat(prompt.session_id, mid, prompt.text, dict(prompt.marker or {}))
        turn = self.turn.get(prompt.session_id)
        if turn is not None:
            self._write_step(prompt.session_id, turn, fault)
            self._deliver_end(prompt.session_id, fault, "normal")

    # -- the daemon and the bridge ------------------------------------------------------------

    @rule()
    def restart(self) -> None:
        """SIGKILL and start again; the same OpenCode's bridge says hello again."""
        self.h.loop.beat(self.h.clock.now())
        self.h.timers.armed.clear()
        self.h.loop = self.h.new_loop()
        self.busy.clear()  # a new daemon knows no live status
        # Its owners are the heartbeat's; what a cut connection owned is not among them.
        self.away.clear()
        self._reconnect()
        self.heard.clear()  # owned again through the heartbeat, not this connection's traffic

    @rule()
    def bridge_cut(self) -> None:
        self.h.closed(self.conn)
        self.h.bridge.alive.discard(self.conn)
        self.busy.clear()  # the daemon drops what the connection told it
        self.away |= self.heard & set(self.roots)
        self.heard.clear()

    @precondition(lambda self: self.conn not in self.h.bridge.alive)
    @rule()
    def bridge_back(self) -> None:
        self._reconnect()

    def _reconnect(self) -> None:
        for sid in sorted(self.away):  # what ended unseen is judged once the hello is in
            failed = self.last_step.get(sid)
            if failed in self.unseen and self.turn.get(sid) == self.step_of[failed][1]:
                self._owe(failed)
        self.away.clear()
        self.unseen.clear()
        self.h.bridge.alive.discard(self.conn)
        self.conns += 1
        self.conn = f"b{self.conns}"
        self.h.bridge.alive.add(self.conn)
        self.h.hello(conn=self.conn, pid=PID)

    @rule(seconds=st.sampled_from(SECONDS))
    def time_passes(self, seconds: float) -> None:
        """The daemon's clock jumps forward and back; OpenCode's rows keep their order (its
        message ids are made from its clock: a jump back would reorder OpenCode itself)."""
        if seconds > 0 and self.conn not in self.h.bridge.alive:
            self._waive(lambda failure: True)  # time without an owner: given up past its grace
            self.away.clear()
        self._advance(seconds)

    def _advance(self, seconds: float) -> None:
        now = self.h.clock.advance(seconds)
        self.h.rows.clock = max(self.h.rows.clock, int(now.timestamp() * 1000))
        self.h.loop.tick()

    # -- the end of a sequence ------------------------------------------------------------------

    def settle(self) -> None:
        """The bridge back if it was cut, then the clock past every waiting retry (a tick
        every few seconds, as the daemon's own ticks would come): what the daemon owes is
        due by then. OpenCode does nothing more."""
        if self.conn not in self.h.bridge.alive:
            self._reconnect()
        self.h.loop.tick()
        waiting = [i.due for i in self.h.store.open_injections() if i.state == "intent"]
        end = max([d for d in waiting if d is not None], default=self.h.clock.now())
        end += timedelta(seconds=2 * SETTLE_STEP)
        while self.h.clock.now() < end:
            self._advance(min(SETTLE_STEP, (end - self.h.clock.now()).total_seconds()))

    def _still_last(self, failed: str, failure: Failure) -> bool:
        """Still its session's last step, in its open turn: nothing moved the session on."""
        sid = failure.session_id
        return self.last_step.get(sid) == failed and self.turn.get(sid) == failure.turn

    def every_recoverable_failure_was_continued_once(self) -> None:
        """Each owed failure was continued exactly once; or, if the session moved on before
        (a user message, a user abort, a step of OpenCode's own), its continuation had at
        least been scheduled by then (a back-off the move cancels, by design)."""
        decisions = self.h.store.decisions()
        by_id = {d.id: d for d in decisions}
        continued: Counter[str] = Counter()
        for prompt in self.h.prompts():
            continued[by_id[int((prompt.marker or {})["decision"])].message_id or ""] += 1
        scheduled = {d.message_id for d in decisions
                     if d.action in ("inject", "inject_at", "abort_then_inject")}
        wrong = {
            failed: (failure, f"continued {continued[failed]} times")
            for failed, failure in self.owed.items()
            if continued[failed] > 1 or (continued[failed] == 0 and (
                self._still_last(failed, failure) or failed not in scheduled))
        }
        assert not wrong, f"recoverable failures not continued exactly once: {wrong}"

    # -- invariants ---------------------------------------------------------------------------

    @invariant()
    def continuations_stay_within_budget_and_where_they_belong(self) -> None:
        prompts = self.h.prompts()
        decisions = {d.id: d for d in self.h.store.decisions()}
        per_group: Counter[tuple[str, str, str]] = Counter()
        per_turn_interruptions: Counter[tuple[str, str]] = Counter()
        failures: Counter[str] = Counter()
        for index, prompt in enumerate(prompts):
            decision = decisions[int((prompt.marker or {})["decision"])]
            assert prompt.session_id != self.child, "a continuation into a child session"
            turn = decision.turn_id or ""
            at_abort = self.aborted.get((prompt.session_id, turn))
            assert at_abort is None or index < at_abort, "a continuation after a user abort"
            at_off = self.off_at.get(prompt.session_id)
            assert at_off is None or index < at_off, "a continuation while switched off"
            group = decision.group or ""
            per_group[(prompt.session_id, turn, group)] += 1
            if group and BudgetGroup(group) in INTERRUPTION_GROUPS:
                per_turn_interruptions[(prompt.session_id, turn)] += 1
            failures[decision.message_id or f"decision:{decision.id}"] += 1
        policy = self.h.policy
        for (_, _, group), count in per_group.items():
            assert count <= policy.budget_for(BudgetGroup(group), None).max_retries, group
        for count in per_turn_interruptions.values():
            assert count <= policy.cap_for(None)
        doubled = [m for m, count in failures.items() if count > 1]
        assert not doubled, f"two continuations for the same failure: {doubled}"

    @invariant()
    def every_send_has_its_intent(self) -> None:
        injections = {i.id for i in self.h.store.injections()}
        for prompt in self.h.prompts():
            assert int((prompt.marker or {})["injection"]) in injections


def test_decision_path(record_property: Callable[[str, object], None],
                       capsys: pytest.CaptureFixture[str]) -> None:
    before = Tally(**vars(TALLY))
    run_state_machine_as_test(DecisionPath, settings=settings(
        max_examples=EXAMPLES, stateful_step_count=30, deadline=None,
        derandomize=True, database=None,  # the same sequences every run: a stable floor below
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    ))
    run = Tally(**{k: v - getattr(before, k) for k, v in vars(TALLY).items()})
    with capsys.disabled():
        print(f"\n[decision model] sequences: {run.sequences}, step rules: {run.steps}, "
              f"events handled: {run.events}, continuations sent: {run.continuations}, "
              f"failures held to exactly one: {run.owed}")
    for name, value in vars(run).items():
        record_property(f"model_{name}", value)
    assert run.sequences >= EXAMPLES
    # Not vacuous: many failures were held to a continuation (58 in the default 150).
    assert run.owed > EXAMPLES // 4, run
