"""The daemon's heartbeat in the store: written every ``HEARTBEAT_EVERY`` from the loop's tick,
and at the next tick when the owners of sessions changed (a restarted daemon re-adopts
sessions by the pids it reads back) or at once when a retry waits on them."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any

from opencode_autoretry.store.database import Store

HEARTBEAT_EVERY = timedelta(seconds=5)


class Heartbeat:
    def __init__(
        self, store: Store, pid: int, info: Callable[[bool], Mapping[str, Any]]
    ) -> None:
        self._store = store
        self._pid = pid
        self._info = info  # what the beat carries (``control.heartbeat_info``), given stopping
        self._last: datetime | None = None

    def beat(self, now: datetime, *, stopping: bool = False) -> None:
        self._last = now
        self._store.beat(now, self._pid, self._info(stopping))

    def soon(self) -> None:
        """The owners changed: the next tick writes them, whenever the last beat was."""
        self._last = None

    def tick(self, now: datetime) -> None:
        if self._last is None or now - self._last >= HEARTBEAT_EVERY:
            self.beat(now)
