""""Needs you" alerts (issue 23): a root session that has waited on a permission or a question
longer than ``[notify] waiting_after`` raises ONE ``waiting`` notification per ask.

Runs on the loop thread and never blocks it: an ask event only notes the ask (no DB read); the
tick looks at the asks that are due, reads the session's row once (the same fail-closed root
check as every send: an unreadable or child session is never announced), checks the switch and
hands the message to the notifier's queue (``Notifications.send``: a ``put_nowait``). An ask
the user answered, rejected, or that ended with the session going idle or its owner going away
is forgotten unannounced: the session view (``SessionView.permissions`` / ``questions``) says
what is still asked.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any

from opencode_autoretry.daemon.actions import SessionReader
from opencode_autoretry.daemon.notifications.actions import Notifications
from opencode_autoretry.daemon.sessions import Sessions
from opencode_autoretry.notifications.asks import PERMISSION, Ask, ask_from_event, ask_words, waited
from opencode_autoretry.notifications.events import Notification, NotifyEvent
from opencode_autoretry.store.database import Store

log = logging.getLogger(__name__)

_ANSWERED = frozenset({"permission.replied", "question.replied", "question.rejected"})


class WaitingAlerts:
    def __init__(self, sessions: Sessions, store: Store,
                 db: Callable[[], SessionReader | None], notifications: Notifications) -> None:
        self._sessions = sessions
        self._store = store
        self._db = db
        self._notifications = notifications
        self._asks: dict[tuple[str, str], Ask] = {}  # still asked, as far as events said
        self._alerted: set[tuple[str, str]] = set()
        self.alert_ms: list[float] = []  # loop-thread time of the last alerts (the figures)

    @property
    def waiting_after(self) -> timedelta:
        return timedelta(seconds=self._notifications.config.waiting_after)

    def on_event(self, session_id: str, event_type: str, props: Mapping[str, Any],
                 now: datetime) -> None:
        if event_type in ("permission.asked", "question.asked"):
            ask = ask_from_event(event_type, props, session_id, now)
            if ask is not None:
                self._asks.setdefault((session_id, ask.ask_id), ask)
        elif event_type in _ANSWERED:
            ask_id = props.get("requestID") or props.get("id")
            self._forget((session_id, str(ask_id)))

    def asked(self, session_id: str) -> list[Ask]:
        """What a session still waits on, oldest first (``status``)."""
        return sorted((a for (sid, _), a in self._asks.items()
                       if sid == session_id and self._still_asked(a)), key=lambda a: a.since)

    def _forget(self, key: tuple[str, str]) -> None:
        self._asks.pop(key, None)
        self._alerted.discard(key)

    def tick(self, now: datetime) -> None:
        for key, ask in list(self._asks.items()):
            if not self._still_asked(ask):
                self._forget(key)
            elif key not in self._alerted and ask.due(self.waiting_after, now):
                self._alerted.add(key)  # one alert per ask, whatever the checks below say
                began = time.perf_counter()
                sent = self._alert(ask, now)
                spent_ms = (time.perf_counter() - began) * 1000.0
                if sent:
                    self.alert_ms = [*self.alert_ms[-49:], spent_ms]
                    log.info("waiting alert %s %s %s (loop thread %.3f ms)", ask.session_id,
                             ask.kind, ask.ask_id, spent_ms)

    def _still_asked(self, ask: Ask) -> bool:
        view = self._sessions.get(ask.session_id)
        if view is None or view.owner is None:
            return False
        return ask.ask_id in (view.permissions if ask.kind == PERMISSION else view.questions)

    def _alert(self, ask: Ask, now: datetime) -> bool:
        if not self._notifications.active or not self._notifications.config.wants(
                str(NotifyEvent.WAITING)):
            return False
        if not self._store.is_enabled(ask.session_id):
            log.info("no waiting alert for %s: autoretry is off", ask.session_id)
            return False
        db = self._db()
        session = db.session(ask.session_id) if db is not None else None
        if session is None or session.parent_id is not None:
            log.info("no waiting alert for %s: not a readable root session", ask.session_id)
            return False
        note = Notification(
            event=NotifyEvent.WAITING, session_id=ask.session_id, time=now,
            reason=f"{ask_words(ask)} for {waited(ask, now)}", title=session.title,
            directory=session.directory, turn_id=self._store.current_turn(ask.session_id),
            detail=f"{ask_words(ask)} for {waited(ask, now)}", ask_id=ask.ask_id,
            asked=ask.what,
        )
        return self._notifications.send(note, now)
