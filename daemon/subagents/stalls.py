"""Hung subagents (issue 9), the daemon's half: which stall is a child's, and its ledger scope.

The loop's stall check asks ``verdict`` first: a stalled session that OpenCode's DB (read
fresh) shows with a ``parent_id`` gets a ``subagent_stall`` verdict instead of a ``stall``.
The decision core then decides ABORT or SKIP (``decisions.subagents``), counted once
per child per parent turn: ``scope`` names that ledger and combines the parent's on/off switch
with the child's. ``note_waiting`` logs, once per stall period, a busy session past
``stall_timeout`` that is left alone because it waits on a permission or a question (the e2e
suite waits for that line instead of sleeping).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from typing import Protocol

from opencode_autoretry.daemon.sessions import BUSY, SessionView
from opencode_autoretry.decisions.subagents import subagent_stall_verdict
from opencode_autoretry.models import Session, Turn, Verdict

log = logging.getLogger(__name__)


class ParentReader(Protocol):
    def session(self, session_id: str) -> Session | None: ...
    def last_turn(self, session_id: str) -> Turn | None: ...


class SwitchReader(Protocol):
    def is_enabled(self, session_id: str | None = None) -> bool: ...


class SubagentStalls:
    def __init__(
        self, db: Callable[[], ParentReader | None], switches: SwitchReader, timeout_s: float
    ) -> None:
        self._db = db
        self._switches = switches
        self._timeout_s = timeout_s
        self._noted: dict[str, datetime] = {}  # session -> when "left alone" was last logged

    def verdict(self, view: SessionView, turn: Turn | None, now: datetime) -> Verdict | None:
        """A ``subagent_stall`` verdict when the stalled session is a child, else None (then
        the root stall path applies; an unreadable session fails closed there)."""
        db = self._db()
        session = db.session(view.session_id) if db is not None else None
        if session is None or session.parent_id is None:
            return None
        idle_s = (now - view.last_activity).total_seconds() if view.last_activity else 0.0
        step = turn.last_step if turn is not None else None
        return subagent_stall_verdict(idle_s, step.id if step else None)

    def scope(self, child: Session | None, turn: Turn, enabled: bool) -> tuple[str, bool]:
        """(ledger turn id, enabled): the parent's current turn, and off if the parent's
        session is switched off too (``/autoretry off here`` is typed in the parent's window)."""
        parent_id = child.parent_id if child is not None else None
        if parent_id is None:
            return turn.id, enabled
        db = self._db()
        parent_turn = db.last_turn(parent_id) if db is not None else None
        key = parent_turn.id if parent_turn is not None else f"child-turn:{turn.id}"
        return key, enabled and self._switches.is_enabled(parent_id)

    def note_waiting(self, view: SessionView, now: datetime) -> None:
        """Log a busy session past the stall timeout that waits on the user: left alone."""
        if view.status != BUSY or view.last_activity is None:
            return
        waiting = "a permission" if view.permissions else "a question" if view.questions else None
        if waiting is None:
            return
        idle_s = (now - view.last_activity).total_seconds()
        last = self._noted.get(view.session_id)
        if idle_s < self._timeout_s or (last is not None and
                                        (now - last).total_seconds() < self._timeout_s):
            return
        self._noted[view.session_id] = now
        kind = "subagent" if view.parent_id else "session"
        log.info("stall check: %s %s busy %.0f s, waiting on %s: left alone", kind,
                 view.session_id, idle_s, waiting)
