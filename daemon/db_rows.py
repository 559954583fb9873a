"""Rows the DB tailer found, for the loop: a marked message confirms its continuation, and a
session no bridge reports is judged from the DB alone (``UnownedWatch``: once its turn ends)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Protocol

from opencode_autoretry.daemon.inbox import DbRows
from opencode_autoretry.daemon.intake.sources import MessageReader, UnownedWatch


class Confirmer(Protocol):
    """The part of ``Actions`` that closes a continuation seen in OpenCode."""

    def confirm(self, injection_id: int, message_id: str | None, now: datetime) -> bool: ...


class DbRowsIntake:
    def __init__(
        self,
        actions: Confirmer,
        owned_now: Callable[[str], bool],
        judge_unowned: Callable[[str, datetime], object],
    ) -> None:
        self._actions = actions
        self._owned_now = owned_now
        self._judge_unowned = judge_unowned  # judges one session settled (``Loop.evaluate``)
        self.unowned = UnownedWatch()

    def on_rows(self, rows: DbRows, now: datetime) -> None:
        for message in rows.messages:
            marker = message.marker
            if marker is not None and str(marker.get("injection", "")).isdigit():
                self._actions.confirm(int(marker["injection"]), message.id, now)
        self._judge(self.unowned.on_rows(rows, self._owned_now), now)

    def recheck(self, reader: MessageReader | None, now: datetime) -> None:
        """The tick: sessions still waiting on an unowned turn to end, read again."""
        if reader is not None and len(self.unowned):
            self._judge(self.unowned.recheck(reader, self._owned_now), now)

    def _judge(self, session_ids: set[str], now: datetime) -> None:
        for session_id in sorted(session_ids):  # no bridge reports these: the DB is all we have
            self._judge_unowned(session_id, now)
