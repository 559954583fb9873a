"""What the daemon does about a loop: the glue between ``RepetitionWatch`` and the actions.

The loop hands every bridge event to ``RepetitionGuard.on_event``. On a ``LoopFound`` the
decision core decides as for any failure (kind REPETITION, group ``repetition``: remind, then
replan, then stop with a toast, per turn); this module only adapts how it is carried out:

- a live loop (one stream repeating itself) is stopped: the decision's abort, or, once the
  budget is spent, an abort anyway ("stop for good"), and a ``trim`` goes to the owning bridge
  so later steps never see the repeated tail (OpenCode's DB, and so the TUI, keep it all);
- a cross-step loop gets its reminder WITHOUT an abort, sent at once: OpenCode queues a
  prompt that arrives while busy and runs it after the current step.

Trims are recorded in the store and re-sent to every bridge that says hello, so they survive
daemon and OpenCode restarts. Why the store and not a marker the bridge could read back: a
stopped loop whose budget is spent gets no injected message to carry a marker, and the bridge
would need the detectors to recompute the cut; the daemon already has both the cut and a store.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from opencode_autoretry.daemon.actions import Actions, SessionReader
from opencode_autoretry.daemon.outbox import BridgeSender
from opencode_autoretry.daemon.repetition.watch import LoopFound, RepetitionWatch
from opencode_autoretry.daemon.sessions import Sessions, SessionView
from opencode_autoretry.models import Action, Decision, LiveFacts, Turn, Verdict
from opencode_autoretry.plugin_bridge.protocol import Config, Trim
from opencode_autoretry.store.database import Store

log = logging.getLogger(__name__)

#: The events the watch needs (deltas, part ends, step ends, deletions).
WATCHED_EVENTS = frozenset(
    {"message.part.delta", "message.part.updated", "message.updated", "session.deleted"}
)
TRIM_RESEND_WINDOW = timedelta(days=7)  # trims older than this are not re-sent on hello
TRIM_RESEND_MAX = 2000  # = the bridge's TRIM_LIMIT (tests/test_shared_limits.py)
Decide = Callable[[SessionView, Turn, Verdict, LiveFacts, datetime], Decision]


class RepetitionGuard:
    def __init__(
        self,
        watch: RepetitionWatch,
        store: Store,
        actions: Actions,
        sessions: Sessions,
        db: Callable[[], SessionReader | None],
        decide: Decide,
        bridge: BridgeSender,
        penalties: Mapping[str, Mapping[str, float]] | None = None,
    ) -> None:
        self.watch = watch
        self._store = store
        self._actions = actions
        self._sessions = sessions
        self._db = db
        self._decide = decide
        self._bridge = bridge
        self.penalties = dict(penalties or {})

    def on_event(
        self, view: SessionView, kind: str, props: Mapping[str, Any], now: datetime
    ) -> Decision | None:
        if kind not in WATCHED_EVENTS:
            return None
        found = self.watch.on_event(kind, view.session_id, props)
        return self.act(view, found, now) if found is not None else None

    def act(self, view: SessionView, found: LoopFound, now: datetime) -> Decision | None:
        """Decide about one loop and carry the decision out; None without a readable turn."""
        db = self._db()
        turn = db.last_turn(view.session_id) if db is not None else None
        if turn is None:
            log.info("loop in %s but no readable turn: %s", view.session_id, found.reason())
            return None
        verdict = found.verdict()
        live = self._sessions.live_facts(view.session_id)
        decision = self._decide(view, turn, verdict, live, now)
        if not found.live and decision.action is Action.ABORT_THEN_INJECT:
            decision = replace(decision, action=Action.INJECT)  # its reason says inject
        performed = self._actions.perform(decision, now, verdict.message_id)
        if decision.action is Action.INJECT and performed.injection is not None:
            # A cross-step reminder goes out while the session is busy (Recovery would hold
            # it until idle, and a looping agent may never be idle).
            self._actions.send_injection(performed.injection, now)
        if found.live and decision.action in (Action.ABORT_THEN_INJECT, Action.NOTIFY):
            if decision.action is Action.NOTIFY:
                self._actions.abort(view.session_id, now)  # out of budget: stop for good
            self.trim(found, now, performed.decision_id)
        return decision

    def trim(self, found: LoopFound, now: datetime, decision_id: int | None = None) -> bool:
        """Record the trim and send it to the session's owner; False when not sent (also in
        observe mode: a trim changes what the model is sent next, issue 23)."""
        trim = found.trim()
        if trim is None or self._actions.observe:
            return False
        self._store.record_trim(
            trim.session_id, trim.message_id, trim.part_id, trim.keep_chars, now,
            excerpt=trim.excerpt, decision_id=decision_id,
        )
        owner = self._actions.owner_of(trim.session_id)
        return owner is not None and self._bridge.send(owner, trim)

    def on_hello(self, conn_id: str, now: datetime) -> int:
        """A bridge connected: its config, then the recent trims (it keeps them in memory
        only, and may belong to a restarted OpenCode). Returns how many trims were sent."""
        if self.penalties and not self._actions.observe:  # they change the provider's requests
            self._bridge.send(conn_id, Config(penalties=self.penalties))
        records = self._store.trims(since=now - TRIM_RESEND_WINDOW)[-TRIM_RESEND_MAX:]
        sent = 0
        for record in records:
            trim = Trim(
                session_id=record.session_id, message_id=record.message_id,
                part_id=record.part_id, keep_chars=record.keep_chars, excerpt=record.excerpt,
            )
            if not self._bridge.send(conn_id, trim):
                break
            sent += 1
        return sent

    def new_turn(self, session_id: str) -> None:
        self.watch.new_turn(session_id)
