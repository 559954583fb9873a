"""The notification action: a recorded decision -> maybe one message on every channel.

Called by ``Actions.perform`` (every decision passes there) and by the loop for a turn that
ended healthy after a continuation. It picks the event (``notification.event_for``), applies the
per-(session, turn, event) and hourly limits (``Throttle``, plus the store across restarts),
writes one ``queued`` row per channel and hands the message to the ``Notifier``'s workers. It
runs on the loop thread and never touches the network: ``enqueue`` is a ``put_nowait``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Protocol

from opencode_autoretry.daemon.actions import SessionReader
from opencode_autoretry.daemon.notifications.notifier import DeliveryResult
from opencode_autoretry.decisions.error_kinds import classify_error
from opencode_autoretry.models import Decision, Turn
from opencode_autoretry.notifications.config import NotifyConfig, scrub
from opencode_autoretry.notifications.events import (
    Admission,
    Notification,
    NotifyEvent,
    Throttle,
    event_for,
    from_decision,
    from_kept,
    kept_form,
)
from opencode_autoretry.notifications.records import (
    NotificationRecord,
    already_notified,
    finish_notification,
    queued_notifications,
    record_notification,
)
from opencode_autoretry.store.database import Store

log = logging.getLogger(__name__)

#: A notification its daemon never delivered (killed first) is still sent when the next one
#: starts, unless it is older than this: a day-old "needs you" helps nobody.
RESEND_WITHIN = timedelta(days=1)


class Enqueuer(Protocol):
    """The part of ``Notifier`` the loop uses (a fake in unit tests)."""

    @property
    def channel_names(self) -> tuple[str, ...]: ...

    def enqueue(self, record_ids: dict[str, int | None], note: Notification) -> list[str]: ...


class Notifications:
    def __init__(
        self, store: Store, db: Callable[[], SessionReader | None], config: NotifyConfig,
        notifier: Enqueuer | None,
    ) -> None:
        self._store = store
        self._db = db
        self.config = config
        self._notifier = notifier
        self.throttle = Throttle(config.max_per_hour)
        self.enqueue_ms: list[float] = []  # loop-thread time of the last enqueues (status)

    @property
    def active(self) -> bool:
        return self._notifier is not None and bool(self._notifier.channel_names)

    # -- events -------------------------------------------------------------------------------

    def on_decision(self, decision: Decision, decision_id: int, now: datetime) -> None:
        if not self.active:
            return
        if event_for(decision, is_child=False) is None:
            return  # most decisions: no event, and no DB read for it
        db = self._db()
        session = db.session(decision.session_id) if db is not None else None
        is_child = None if session is None else session.parent_id is not None
        event = event_for(decision, is_child=is_child)
        if event is None or not self.config.wants(event):
            return
        note = from_decision(event, decision, decision_id, session, now)
        if event is NotifyEvent.TERMINAL and db is not None:
            note = replace(note, detail=self._error_reason(db, decision.session_id))
        self.send(note, now)

    @staticmethod
    def _error_reason(db: SessionReader, session_id: str) -> str | None:
        """What the error was (the decision only says it is not retried): 'the provider
        rejected the request (HTTP 401; Invalid API key)'."""
        turn = db.last_turn(session_id)
        step = turn.last_step if turn is not None else None
        if step is None or step.error is None:
            return None
        return classify_error(step.error)[1]

    def on_healthy(self, session_id: str, turn: Turn, now: datetime) -> None:
        """A turn ended well: ``recovered`` if autoretry continued it (a confirmed injection)."""
        if not self.active or not self.config.wants(NotifyEvent.RECOVERED):
            return
        continued = [i for i in self._store.injections(session_id)
                     if i.turn_id == turn.id and i.state == "confirmed"]
        if not continued or already_notified(self._store, session_id, turn.id, "recovered"):
            return
        db = self._db()
        session = db.session(session_id) if db is not None else None
        if session is None or session.parent_id is not None:
            return
        note = Notification(
            event=NotifyEvent.RECOVERED, session_id=session_id, time=now,
            reason=f"the turn ended normally after {len(continued)} continuation(s)",
            title=session.title, directory=session.directory, turn_id=turn.id,
            attempts=len(continued), decision_id=continued[-1].decision_id,
        )
        self.send(note, now)

    def tick(self, now: datetime) -> None:
        """The hourly cap has room again: one line for everything it held back."""
        if not self.active:
            return
        count = self.throttle.take_suppressed(now)
        if count:
            note = Notification(NotifyEvent.SUPPRESSED, "*", now, "hourly cap", suppressed=count)
            self._enqueue(note, now)

    # -- sending ------------------------------------------------------------------------------

    def send(self, note: Notification, now: datetime) -> bool:
        """Throttle, record and queue one notification; True when it was queued."""
        if already_notified(self._store, note.session_id, note.key, str(note.event)):
            return False
        admission = self.throttle.admit(note.session_id, note.key, str(note.event), now)
        if admission is Admission.DUPLICATE:
            return False
        if admission is Admission.CAPPED:
            record_notification(self._store, now, note.session_id, note.key, str(note.event),
                                "*", "suppressed", decision_id=note.decision_id,
                                message=self._clean(note.summary))
            log.info("notification %s for %s suppressed (hourly cap %d)", note.event,
                     note.session_id, self.config.max_per_hour)
            return False
        self._enqueue(note, now)
        return True

    def _enqueue(self, note: Notification, now: datetime) -> None:
        assert self._notifier is not None
        ids: dict[str, int | None] = {}
        payload = kept_form(note, self._clean)
        for channel in self._notifier.channel_names:
            ids[channel] = record_notification(
                self._store, note.time, note.session_id, note.key, str(note.event), channel,
                "queued", decision_id=note.decision_id, message=self._clean(note.summary),
                payload=payload,
            )
        self._hand_over(ids, note, now)

    def _hand_over(self, ids: dict[str, int | None], note: Notification, now: datetime) -> None:
        """Put ``note`` on its channels' queues; a full queue closes its row as dropped."""
        assert self._notifier is not None
        began = time.perf_counter()
        full = self._notifier.enqueue(ids, note)
        spent_ms = (time.perf_counter() - began) * 1000.0
        self.enqueue_ms = [*self.enqueue_ms[-49:], spent_ms]
        for channel in full:
            record_id = ids[channel]
            if record_id is not None:
                finish_notification(self._store, record_id, False, 0, "queue full (dropped)", now)
        log.info("notify %s %s queued on %s (loop thread %.3f ms)", note.event, note.session_id,
                 ", ".join(ids) or "no channel", spent_ms)

    # -- after a restart ------------------------------------------------------------------------

    def resend_unsent(self, now: datetime) -> int:
        """Send what the last daemon queued but never delivered (it was killed first), once,
        on the channels it was queued for; a row that cannot be sent is closed as failed with
        why. Returns how many notifications went back on a queue. Runs before any decision of
        this daemon, so every ``queued`` row is its predecessor's."""
        names = self._notifier.channel_names if self._notifier is not None else ()
        resent = 0
        for rows in _by_notification(queued_notifications(self._store)):
            note = from_kept(rows[0].payload)
            why = _not_resent(note, now)
            ids: dict[str, int | None] = {}
            for row in rows:
                if why is None and row.channel in names:
                    ids[row.channel] = row.id
                else:
                    gone = why or f"channel {row.channel} no longer configured"
                    finish_notification(self._store, row.id, False, 0,
                                        f"not delivered before the daemon stopped ({gone})", now)
            if ids and note is not None:
                self._hand_over(ids, note, now)
                resent += 1
        if resent:
            log.info("notify: %d notification(s) queued again after a restart", resent)
        return resent

    def on_result(self, result: DeliveryResult, now: datetime) -> None:
        """A worker's report (through the inbox): the row becomes ``sent`` or ``failed``."""
        if result.record_id is None:
            return
        error = self._clean(result.error) if result.error else None
        record = finish_notification(self._store, result.record_id, result.ok, result.attempts,
                                     error, result.delivered_at)
        latency = record.latency_ms if record is not None else None
        log.info("notification #%s via %s %s after %d attempt(s), %s ms from decision%s",
                 result.record_id, result.channel, "delivered" if result.ok else "FAILED",
                 result.attempts, latency, f": {error}" if error else "")

    def _clean(self, text: str) -> str:
        return scrub(text, self.config.secrets())


def _by_notification(rows: Iterable[NotificationRecord]) -> list[list[NotificationRecord]]:
    """Rows grouped by the notification they carry (one row per channel, written together)."""
    groups: dict[tuple[object, ...], list[NotificationRecord]] = {}
    for row in rows:
        key = (row.at, row.session_id, row.turn_id, row.event, row.decision_id, row.payload)
        groups.setdefault(key, []).append(row)
    return list(groups.values())


def _not_resent(note: Notification | None, now: datetime) -> str | None:
    """Why a notification its daemon never delivered is not sent now, or None to send it."""
    if note is None:
        return "kept without its text by an older release"
    if now - note.time > RESEND_WITHIN:
        return "more than a day old at the restart"
    return None
