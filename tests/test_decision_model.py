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

The suite runs ``AUTORETRY_MODEL_EXAMPLES`` sequences (default 150); the figure in
docs/reliability.md comes from a run with 10 000
(``AUTORETRY_MODEL_EXAMPLES=10000 pytest --timeout=0 ...``).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections import Counter
from pathlib import Path

from daemon_fakes import CONN, PID, Harness, disconnect
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from opencode_rows import aborted_error, tokens

from opencode_autoretry.decisions.policy import INTERRUPTION_GROUPS
from opencode_autoretry.models import BudgetGroup
from opencode_autoretry.plugin_bridge import protocol

EXAMPLES = int(os.environ.get("AUTORETRY_MODEL_EXAMPLES", "150"))
FAULTS = ("healthy", "blank", "disconnect", "tool_as_text", "length", "tool_turn")
DELIVERY = ("normal", "duplicated", "reordered", "dropped")
#: Thousands of small SQLite files: on tmpfs when there is one (fsyncs dominate on a disk).
SCRATCH = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
SECONDS = (-30.0, 0.5, 1.0, 6.0, 11.0, 40.0, 120.0)


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

    def teardown(self) -> None:
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
        self.h.rows.assistant(sid, self.turn[sid], finish=None, text="", error=aborted_error())
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
        self.h.send(protocol.Command(id="c-1", name="autoretry", session_id=sid,
                                     arguments="on here" if on else "off here"), self.conn)
        if on:
            self.off.discard(sid)
            self.off_at.pop(sid, None)
        else:
            self.off.add(sid)
            self.off_at.setdefault(sid, len(self.h.prompts()))

    # -- OpenCode -----------------------------------------------------------------------------

    @rule(index=st.integers(0, 2), fault=st.sampled_from(FAULTS),
          delivery=st.sampled_from(DELIVERY))
    def step(self, index: int, fault: str, delivery: str) -> None:
        sid = self._all()[index]
        if sid not in self.turn:
            return
        if self.conn in self.h.bridge.alive:
            self._ev("session.status", sid, status={"type": "busy"})
        self._write_step(sid, self.turn[sid], fault)
        self._deliver_end(sid, fault, delivery)

    def _write_step(self, sid: str, turn: str, fault: str) -> None:
        rows = self.h.rows
        if fault == "healthy":
            rows.assistant(sid, turn)
        elif fault == "blank":
            rows.assistant(sid, turn, finish="stop", toks=tokens(100, 0), text=None)
        elif fault == "disconnect":
            rows.assistant(sid, turn, finish=None, text="", error=disconnect())
        elif fault == "tool_as_text":
            rows.assistant(sid, turn, text='<function=bash>{"command": "ls"}</function>')
        elif fault == "length":
            rows.assistant(sid, turn, finish="length", toks=tokens(100, 0), text=None)
        else:  # a tool step, then the answer
            rows.assistant(sid, turn, finish="tool-calls", tools=[("bash", "completed")])
            rows.assistant(sid, turn)
        rows.commit()

    def _deliver_end(self, sid: str, fault: str, delivery: str) -> None:
        if delivery == "dropped" or self.conn not in self.h.bridge.alive:
            return
        error = disconnect() if fault == "disconnect" else None
        for _ in range(2 if delivery == "duplicated" else 1):
            if delivery == "reordered":
                self._ev("session.idle", sid)  # the idle overtakes the error
            if error is not None:
                self._ev("session.error", sid, error=error)
            self._idle(sid)

    def _ev(self, kind: str, sid: str, **props: object) -> None:
        if self.conn in self.h.bridge.alive:  # a cut bridge delivers nothing
            self.h.event(kind, conn=self.conn, sessionID=sid, **props)

    def _idle(self, sid: str) -> None:
        self._ev("session.status", sid, status={"type": "idle"})
        self._ev("session.idle", sid)

    def _chat(self, sid: str, mid: str, text: str, marker: dict | None = None) -> None:
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
        self._reconnect()

    @rule()
    def bridge_cut(self) -> None:
        self.h.closed(self.conn)
        self.h.bridge.alive.discard(self.conn)

    @precondition(lambda self: self.conn not in self.h.bridge.alive)
    @rule()
    def bridge_back(self) -> None:
        self._reconnect()

    def _reconnect(self) -> None:
        self.h.bridge.alive.discard(self.conn)
        self.conns += 1
        self.conn = f"b{self.conns}"
        self.h.bridge.alive.add(self.conn)
        self.h.hello(conn=self.conn, pid=PID)

    @rule(seconds=st.sampled_from(SECONDS))
    def time_passes(self, seconds: float) -> None:
        """The daemon's clock jumps forward and back; OpenCode's rows keep their order (its
        message ids are made from its clock: a jump back would reorder OpenCode itself)."""
        now = self.h.clock.advance(seconds)
        self.h.rows.clock = max(self.h.rows.clock, int(now.timestamp() * 1000))
        self.h.loop.tick()

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


DecisionPath.TestCase.settings = settings(
    max_examples=EXAMPLES, stateful_step_count=30, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestDecisionPath = DecisionPath.TestCase
