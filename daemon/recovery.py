"""Pending retries across time and restarts: due sends, confirmations, the off switch.

``Actions`` performs; ``Recovery`` decides when an open injection of the store is sent,
confirmed from OpenCode's DB, failed or cancelled, and rebuilds that state after a restart.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Protocol

from opencode_autoretry.daemon.actions import Actions, SessionReader
from opencode_autoretry.daemon.scheduler import Timers
from opencode_autoretry.daemon.sessions import OWNER_GRACE, Sessions
from opencode_autoretry.models import BudgetGroup, Message
from opencode_autoretry.store.database import InjectionRecord, Store

log = logging.getLogger(__name__)


class InjectedReader(SessionReader, Protocol):
    def injected_messages(self, session_id: str) -> list[Message]: ...


class Recovery:
    """Pending retries across time and restarts: due sends, confirmations, the off switch.

    The store is the truth: every check re-reads the open injections, so a lost timer or a
    restart only delays a retry, and an intent whose marked message is already in OpenCode's
    DB is confirmed instead of sent again.
    """

    CONFIRM_TIMEOUT = timedelta(seconds=60)

    def __init__(
        self,
        store: Store,
        actions: Actions,
        sessions: Sessions,
        db: Callable[[], InjectedReader | None],
        timers: Timers,
    ) -> None:
        self._store = store
        self._actions = actions
        self._sessions = sessions
        self._db = db
        self._timers = timers
        self._owner_pids: dict[str, int] = {}

    def rebuild(self, now: datetime) -> None:
        """Start-up: owners by pid and the open injections re-armed (the ledgers in the store
        remember which failures were already handled)."""
        beat = self._store.heartbeat()
        owners = beat.info.get("owners", {}) if beat is not None else {}
        self._owner_pids = {str(k): int(v) for k, v in owners.items() if str(v).isdigit()}
        decisions = {d.id: d for d in self._store.decisions(since=now - REBUILD_WINDOW)}
        injections = self._store.open_injections()
        kinds = {i.id: decisions[i.decision_id].kind or "" for i in injections
                 if i.decision_id in decisions}
        groups = {
            i.id: (_group(decisions[i.decision_id].group), decisions[i.decision_id].message_id)
            for i in injections if i.decision_id in decisions
        }
        self._actions.remember(injections, kinds, groups)
        for injection in injections:
            if self._confirm_from_db(injection, now):
                continue
            if injection.state == "intent":
                self._timers.arm(injection.id, injection.due or now)
        log.info("rebuilt: %d open injections, %d known owners", len(injections),
                 len(self._owner_pids))

    def adopt(self, conn_id: str, pid: int, now: datetime) -> None:
        """A bridge said hello: it owns again what its process owned before our restart."""
        for session_id, owner_pid in self._owner_pids.items():
            view = self._sessions.ensure(session_id)
            if owner_pid == pid and view.owner is None:
                view.owner = conn_id
        self.send_due(now)

    def resend_lost(self, conn_id: str, ran: Mapping[int, str] | None, now: datetime) -> None:
        """A continuation marked sent, for a session this bridge's hello named, that its
        process did not run (``ran``: the hello's list; None from an older bridge, which
        cannot say) and OpenCode's DB does not show, never got there: its line died in a cut
        socket, or this daemon died between marking it sent and writing it (issue 11). It is
        an intent again, sent once the session is idle. Called before anything is sent on the
        new connection, so the list covers every line this bridge could have run. Never
        twice: the bridge refuses a copy of what it ran, and the DB is read before the send."""
        if ran is None:
            return
        for injection in self._store.open_injections():
            if injection.state != "sent" or ran.get(injection.id) == injection.session_id:
                continue
            view = self._sessions.get(injection.session_id)
            if view is None or view.owner != conn_id or self._confirm_from_db(injection, now):
                continue
            self._actions.never_arrived(injection, now)

    def send_due(self, now: datetime, session_id: str | None = None) -> None:
        for injection in self._store.open_injections(session_id):
            if injection.state == "intent" and (injection.due is None or injection.due <= now):
                self._try_send(injection, now)

    def _try_send(self, injection: InjectionRecord, now: datetime) -> None:
        session_id = injection.session_id
        if not self._store.is_enabled(session_id):
            self._actions.cancel_open(session_id, now, "cancelled: autoretry was switched off")
            return
        ledger = self._store.load_ledger(session_id, injection.turn_id or "")
        if ledger is not None and ledger.user_aborted:  # judged after the intent (a gap)
            self._actions.cancel_open(session_id, now, "cancelled: the user aborted this turn")
            return
        view = self._sessions.get(session_id)
        if view is not None and view.headless:
            return  # an `autoretry exec` run's intent: exec sends it through OpenCode's CLI
        if view is None or view.owner is None:
            if self._past_owner_grace(injection, now):
                self._actions.send_injection(injection, now)  # the gate fails it, with why
            return
        if self._actions.write_broke_on(injection.id, view.owner):  # its close is on the way
            if self._past_owner_grace(injection, now):
                self._actions.fail(injection, now, "not sent: its owner's connection broke "
                                                   "and no bridge came back for the session")
            return
        if view.busy or view.abort_requested is not None:
            return  # wait for idle (OpenCode retrying, or our abort not through yet)
        if self._confirm_from_db(injection, now):
            return
        db = self._db()
        turn = db.last_turn(session_id) if db is not None else None
        if turn is not None and injection.turn_id and turn.id != injection.turn_id:
            self._actions.cancel_open(session_id, now, "cancelled: a new user turn started")
            return
        self._actions.send_injection(injection, now)

    def _past_owner_grace(self, injection: InjectionRecord, now: datetime) -> bool:
        return injection.due is not None and now - injection.due > OWNER_GRACE

    def check_sent(self, now: datetime) -> None:
        """Sent but never seen: confirm from the DB, or give up after CONFIRM_TIMEOUT."""
        for injection in self._store.open_injections():
            if injection.state != "sent" or injection.sent_at is None:
                continue
            if now - injection.sent_at < self.CONFIRM_TIMEOUT:
                continue
            if not self._confirm_from_db(injection, now):
                self._store.mark_failed(injection.id, now, "sent but never seen in OpenCode")
                log.info("injection %s %s failed: sent but never seen in OpenCode",
                         injection.id, injection.session_id)

    def apply_switch(self, now: datetime) -> None:
        """``autoretry off`` (from the CLI, in the store) cancels every waiting retry."""
        for injection in self._store.open_injections():
            if injection.state == "intent" and not self._store.is_enabled(injection.session_id):
                self._actions.cancel_open(
                    injection.session_id, now, "cancelled: autoretry was switched off"
                )

    def confirm_from_db(self, injection: InjectionRecord, now: datetime) -> bool:
        """Confirmed when its marked message is in OpenCode's DB (exec, after a run)."""
        return self._confirm_from_db(injection, now)

    def _confirm_from_db(self, injection: InjectionRecord, now: datetime) -> bool:
        db = self._db()
        if db is None:
            return False
        for message in db.injected_messages(injection.session_id):
            marker = message.marker or {}
            if str(marker.get("injection")) == str(injection.id):
                return self._actions.confirm(injection.id, message.id, now)
        return False


REBUILD_WINDOW = timedelta(days=2)


def _group(raw: str | None) -> BudgetGroup | None:
    try:
        return BudgetGroup(raw) if raw else None
    except ValueError:
        return None
