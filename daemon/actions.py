"""Performs decisions: the only code that sends to OpenCode (through a bridge) or writes the store.

Every send goes through one gate, right before it leaves: the session must have a live owner
(the bridge connection whose events mention it) and OpenCode's DB must say it is a root session
(a fresh read of ``parent_id``; unreadable means no). An injection is written to the store as an
intent before it is sent and carries a marker (decision, injection, kind) in its text part, so a
crash between the two steps can be reconciled from OpenCode's DB without sending twice.

Where a request goes (the session's owner) and the toasts: ``outbox``; their words: ``toasts``;
when an open injection is sent, confirmed or given up across time and restarts: ``recovery``.

Observe mode (``mode = "observe"``, issue 23): ``perform`` records every decision as in act
mode (the budget it spent included, so the recorded "would" sequence is the one act mode would
have taken) with ``Decision.observed`` set, writes no intent and starts nothing; ``abort``,
``abort_subagent`` and ``send_injection`` refuse, so no other path can act either.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Protocol

from opencode_autoretry.daemon.outbox import BridgeSender, Outbox
from opencode_autoretry.daemon.scheduler import Timers
from opencode_autoretry.daemon.sessions import Sessions
from opencode_autoretry.daemon.toasts import recovery_toast
from opencode_autoretry.decisions.budget import PendingRetry
from opencode_autoretry.decisions.observed import observe_toast
from opencode_autoretry.decisions.subagents import subagent_toast
from opencode_autoretry.models import (
    Action,
    BudgetGroup,
    Decision,
    Session,
    Turn,
    from_epoch_ms,
    to_epoch_ms,
)
from opencode_autoretry.plugin_bridge.protocol import (
    Abort,
    ModelRef,
    Prompt,
    ProtocolError,
    encode,
)
from opencode_autoretry.store.database import InjectionRecord, Store

log = logging.getLogger(__name__)

#: Writes of one injection that may break before it is failed for good (``Actions._unsent``).
UNSENT_TRIES = 3


class SessionReader(Protocol):
    """The part of ``OpenCodeDB`` the gate and the sender read (fresh on every call)."""

    def session(self, session_id: str) -> Session | None: ...
    def last_turn(self, session_id: str) -> Turn | None: ...


@dataclass(frozen=True)
class Outcome:
    sent: bool
    reason: str


@dataclass(frozen=True)
class Performed:
    """What ``Actions.perform`` did: the decision's id and the continuation it wrote, if any
    (its intent; callers that send it at once need not look for it in the store)."""

    decision_id: int
    injection: InjectionRecord | None = None


def _stored(at: datetime) -> datetime:
    return from_epoch_ms(to_epoch_ms(at)) or at


def continuation_target(turn: Turn | None) -> tuple[str | None, ModelRef | None, str | None]:
    """Agent, model and variant of the turn's last step (D21), else of its user message."""
    if turn is None:
        return None, None, None
    source = turn.last_step or turn.user
    model = None
    if source.provider_id and source.model_id:
        model = ModelRef(source.provider_id, source.model_id)
    agent = source.agent or turn.user.agent
    return agent, model, source.variant or turn.user.variant


class Actions:
    def __init__(
        self,
        store: Store,
        bridge: BridgeSender,
        db: Callable[[], SessionReader | None],
        timers: Timers,
        sessions: Sessions,
        *,
        observe: bool = False,
    ) -> None:
        self.store = store
        #: Observe mode: record what would be done, do nothing (issue 23).
        self.observe = observe
        self.outbox = Outbox(bridge, sessions, observe=observe)
        self._db = db
        self._timers = timers
        self._sessions = sessions
        self.pending: dict[str, PendingRetry] = {}  # session -> its waiting retry
        self._kinds: dict[int, str] = {}  # injection id -> kind, for the marker
        self._models: dict[int, str] = {}  # injection id -> "provider/model" (fallback)
        self._unsent_tries: dict[int, int] = {}  # injection id -> writes that broke
        self._broken_on: dict[int, str] = {}  # injection id -> the connection its write broke
        #: Called with every recorded decision (notifications outside OpenCode, issue 10; the
        #: telemetry export, issue 24).
        self.listeners: list[Callable[[Decision, int, datetime], None]] = []
        #: Called with every continuation written to a bridge (the telemetry export).
        self.sent_listeners: list[Callable[[InjectionRecord, datetime], None]] = []

    # -- the gate ---------------------------------------------------------------------------

    def gate(self, session_id: str) -> tuple[str | None, str | None]:
        """(owner connection, None) when sending is allowed, else (None, why not)."""
        owner = self.owner_of(session_id)
        if owner is None:
            return None, "no live owner for this session"
        db = self._db()
        session = db.session(session_id) if db is not None else None
        if session is None:
            return None, "session not readable in OpenCode's DB (fail-closed)"
        if session.parent_id is not None:
            return None, "child session (never injected)"
        return owner, None

    # -- decisions --------------------------------------------------------------------------

    def perform(self, decision: Decision, now: datetime, message_id: str | None) -> Performed:
        """Record the decision and carry it out; returns what was written. The budget it spent,
        the decision and its continuation's intent are written in one transaction, before
        anything leaves: after a crash there is all of it (the intent goes out after the
        restart) or none (the failure is judged anew)."""
        if self.observe:
            decision = replace(decision, observed=True)
        with self.store.atomic():
            if decision.ledger is not None:
                self.store.save_ledger(decision.ledger, now)
            decision_id = self.store.record_decision(decision, now, message_id)
            injection = self._record_intent(decision_id, decision, now)
        injection_id = injection.id if injection is not None else None
        log.info("decision %s %s: %s", decision_id, decision.session_id, decision.reason)
        if decision.observed:
            self._observed(decision_id, decision)
        elif decision.action is Action.NOTIFY:
            self.notify(decision.session_id, decision.text or decision.reason, "warning")
        elif decision.action is Action.ABORT:
            self.abort_subagent(decision, now)
        elif injection_id is not None:
            self._start_injection(injection_id, decision, now, message_id)
        for listener in self.listeners:
            try:
                listener(decision, decision_id, now)
            except Exception:  # telling the user must never stop the recovery
                log.exception("decision listener failed")
        return Performed(decision_id, injection)

    def _observed(self, decision_id: int, decision: Decision) -> None:
        """Observe mode: say what would have been done, in the log and a toast; do nothing.
        A hung subagent's would-be abort is told in its parent's window, as the abort is."""
        toast = observe_toast(decision)
        if toast is None:
            return
        log.info("observe mode: decision %s %s %s", decision_id, decision.session_id, toast)
        session = decision.session_id
        if decision.action is Action.ABORT:
            db = self._db()
            child = db.session(session) if db is not None else None
            parent = child.parent_id if child is not None else None
            session = parent if parent is not None and self.owner_of(parent) else session
        self.notify(session, toast, "info")

    def abort_subagent(self, decision: Decision, now: datetime) -> bool:
        """Stop a hung child session (issue 9) and tell the parent's window. Only an abort:
        a prompt to a child stays refused by ``gate`` here and by the bridge."""
        child = decision.session_id
        if self.observe:
            log.info("observe mode: not aborting subagent %s", child)
            return False
        owner = self.owner_of(child)
        db = self._db()
        session = db.session(child) if db is not None else None
        if owner is None or session is None or session.parent_id is None:
            log.info("not aborting subagent %s: no live owner or not a readable child", child)
            return False
        self._sessions.ensure(child).abort_requested = now  # its abort error is not a failure
        abort = Abort(id=self.outbox.next_id("abort", None), session_id=child)
        sent = self.outbox.send(owner, abort)
        parent = session.parent_id
        self.notify(parent if self.owner_of(parent) else child, subagent_toast(decision),
                    "warning")
        return sent

    def _record_intent(
        self, decision_id: int, decision: Decision, now: datetime
    ) -> InjectionRecord | None:
        if not decision.sends or decision.observed:
            return None
        text, due = decision.text or "Continue.", decision.due or now
        injection_id = self.store.record_intent(
            decision_id, decision.session_id, decision.turn_id, text, due, now,
        )
        return InjectionRecord(  # as the store holds it (its times in whole milliseconds)
            id=injection_id, decision_id=decision_id, session_id=decision.session_id,
            turn_id=decision.turn_id, text=text, due=_stored(due), state="intent",
            created=_stored(now),
            sent_at=None, confirmed_at=None, message_id=None, error=None,
        )

    def _start_injection(
        self, injection_id: int, decision: Decision, now: datetime, message_id: str | None
    ) -> None:
        due = decision.due or now
        self._kinds[injection_id] = str(decision.kind or "")
        if decision.turn_id is not None and decision.group is not None:
            self.pending[decision.session_id] = PendingRetry(
                decision.session_id, decision.turn_id, message_id, decision.group, due
            )
        if decision.model is not None:  # model fallback: the continuation's model
            self._models[injection_id] = decision.model
        self.notify(decision.session_id, decision.toast or recovery_toast(decision, now), "info")
        if decision.action is Action.ABORT_THEN_INJECT:
            self.abort(decision.session_id, now)
        self._timers.arm(injection_id, due)

    def abort(self, session_id: str, now: datetime) -> bool:
        if self.observe:
            log.info("observe mode: not aborting %s", session_id)
            return False
        owner, refusal = self.gate(session_id)
        if owner is None:
            log.info("not aborting %s: %s", session_id, refusal)
            return False
        request_id = self.outbox.next_id("abort", None)
        view = self._sessions.ensure(session_id)
        view.abort_requested = now
        return self.outbox.send(owner, Abort(id=request_id, session_id=session_id))

    # -- injections -------------------------------------------------------------------------

    def send_injection(self, injection: InjectionRecord, now: datetime) -> Outcome:
        """Send one due intent through its session's owner, or fail it with the reason."""
        if self.observe:  # an intent of act mode, found after a restart in observe mode
            self._close(injection, now, "cancelled: observe mode (nothing is sent)",
                        failed=False)
            return Outcome(False, "observe mode")
        owner, refusal = self.gate(injection.session_id)
        if owner is None:
            self._close(injection, now, f"not sent: {refusal}", failed=True)
            self.notify(injection.session_id, f"autoretry: not continuing — {refusal}", "warning")
            return Outcome(False, refusal or "refused")
        db = self._db()
        agent, model, variant = continuation_target(
            db.last_turn(injection.session_id) if db else None
        )
        switch = self._models.get(injection.id)
        if switch is not None:
            provider, _, model_id = switch.partition("/")
            model, variant = ModelRef(provider, model_id), None
        marker = {
            "decision": str(injection.decision_id),
            "injection": str(injection.id),
            "kind": self._kinds.get(injection.id, ""),
        }
        request_id = self.outbox.next_id("prompt", injection.id)
        prompt = Prompt(
            id=request_id, session_id=injection.session_id, text=injection.text, agent=agent,
            model=model, variant=variant, marker=marker,
        )
        try:
            encode(prompt)
        except ProtocolError as exc:  # no bridge would read it: say so now, not on every tick
            self._close(injection, now, f"not sent: the continuation is too long ({exc})",
                        failed=True)
            return Outcome(False, "too long")
        # Marked sent before it leaves: a store that fails here stops the send, and a crash
        # after it leaves cannot make the intent look unsent (never twice, issue 11).
        self.store.mark_sent(injection.id, now)
        if not self.outbox.send(owner, prompt):
            return self._unsent(injection, now, owner)
        self.pending.pop(injection.session_id, None)
        log.info("injection %s %s sent as %s to %s", injection.id, injection.session_id,
                 request_id, owner)
        self.log_line(injection.session_id, f"autoretry sent {injection.text!r}")
        for listener in self.sent_listeners:
            try:
                listener(injection, now)
            except Exception:  # counting must never stop the recovery
                log.exception("sent listener failed")
        return Outcome(True, "sent")

    def confirm(self, injection_id: int, message_id: str | None, now: datetime) -> bool:
        """The marked message is in OpenCode (DB row or chat.message): close the injection."""
        for injection in self.store.open_injections():
            if injection.id == injection_id:
                self.store.mark_confirmed(injection_id, now, message_id)
                log.info("injection %s %s confirmed: %s", injection_id, injection.session_id,
                         message_id)
                self._timers.cancel(injection_id)
                self.pending.pop(injection.session_id, None)
                return True
        return False

    def cancel_open(self, session_id: str | None, now: datetime, reason: str) -> int:
        """Cancel intents not yet sent (for one session, or all); returns how many."""
        cancelled = 0
        for injection in self.store.open_injections(session_id):
            if injection.state == "intent":
                self._close(injection, now, reason, failed=False)
                cancelled += 1
        return cancelled

    def _unsent(self, injection: InjectionRecord, now: datetime, broken_on: str | None,
                why: str = "not sent: bridge connection lost") -> Outcome:
        """The owner's connection broke under the write. A failed write ends before the
        line's newline, and the bridge runs complete lines only, so OpenCode never got it: the
        intent waits for the session's owner again (the hello after a socket cut), or fails
        after the owner grace like any intent without one. Never again on the connection it
        broke on (``write_broke_on``): the server has shut that one down, and until its close
        reaches the loop the session still names it as owner (the short soak tried three
        times within 0.1 s and gave the continuation up). Failed when it broke on a few
        connections in turn."""
        tries = self._unsent_tries[injection.id] = self._unsent_tries.get(injection.id, 0) + 1
        if broken_on is not None:
            self._broken_on[injection.id] = broken_on
        if tries > UNSENT_TRIES:
            self._close(injection, now, why, failed=True)
        else:
            self.store.mark_unsent(injection.id, why)
            log.info("injection %s %s %s; it waits for its session's owner", injection.id,
                     injection.session_id, why)
        return Outcome(False, "bridge connection lost")

    def write_broke_on(self, injection_id: int, conn_id: str) -> bool:
        """This injection's write broke on ``conn_id``: that connection is closing."""
        return self._broken_on.get(injection_id) == conn_id

    def fail(self, injection: InjectionRecord, now: datetime, why: str) -> None:
        self._close(injection, now, why, failed=True)

    def never_arrived(self, injection: InjectionRecord, now: datetime) -> None:
        """A sent continuation its bridge says it never ran (``Recovery.resend_lost``)."""
        self._unsent(injection, now, None, "not run: its line was lost on the way to the bridge")

    def _close(self, injection: InjectionRecord, now: datetime, why: str, *, failed: bool) -> None:
        if failed:
            self.store.mark_failed(injection.id, now, why)
        else:
            self.store.mark_cancelled(injection.id, now, why)
        self._timers.cancel(injection.id)
        self.pending.pop(injection.session_id, None)
        self._unsent_tries.pop(injection.id, None)
        self._broken_on.pop(injection.id, None)
        log.info("injection %s %s %s: %s", injection.id, injection.session_id,
                 "failed" if failed else "cancelled", why)

    def on_ack(self, request_id: str, ok: bool, error: str | None, now: datetime) -> None:
        kind, injection_id = self.outbox.acked(request_id)
        if ok or kind != "prompt" or injection_id is None:
            return
        for injection in self.store.open_injections():
            if injection.id == injection_id:
                self.store.mark_failed(injection_id, now, f"refused by the bridge: {error}")
                log.info("injection %s %s failed: refused by the bridge: %s", injection_id,
                         injection.session_id, error)
                self.notify(injection.session_id, f"autoretry: not continuing — {error}", "warning")

    # -- telling the user (through the outbox) --------------------------------------------

    def owner_of(self, session_id: str) -> str | None:
        return self.outbox.owner_of(session_id)

    def notify(self, session_id: str, message: str, variant: str) -> bool:
        return self.outbox.notify(session_id, message, variant)

    def log_line(self, session_id: str, message: str) -> None:
        self.outbox.log_line(session_id, message)

    def remember(self, injections: Iterable[InjectionRecord], kinds: Mapping[int, str],
                 groups: Mapping[int, tuple[BudgetGroup | None, str | None]]) -> None:
        """After a restart: the marker kind and pending retry of each open intent."""
        for injection in injections:
            self._kinds[injection.id] = kinds.get(injection.id, "")
            group, message_id = groups.get(injection.id, (None, None))
            if injection.state == "intent" and group and injection.turn_id and injection.due:
                self.pending[injection.session_id] = PendingRetry(
                    injection.session_id, injection.turn_id, message_id, group, injection.due
                )
