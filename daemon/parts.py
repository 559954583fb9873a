"""The health of the parts the daemon depends on: OpenCode's DB, its own store, its socket.

A part that fails is said once (one warning line with what is wrong and since when) and shown
by ``autoretry status`` (the heartbeat carries ``report()``); when it works again that is said
once too. Callers keep going without the part and retry it by themselves; this module only
remembers and tells. Thread-safe: the bridge server's accept thread reports the socket.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from datetime import datetime
from typing import Any

log = logging.getLogger(__name__)

OPENCODE_DB = "opencode_db"
STORE = "store"
SOCKET = "socket"

_WHAT = {
    OPENCODE_DB: "OpenCode's DB",
    STORE: "the autoretry store",
    SOCKET: "the bridge socket",
}


@dataclass(frozen=True)
class Problem:
    part: str
    reason: str
    since: datetime


class PartHealth:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._down: dict[str, Problem] = {}
        self.failures = 0  # parts that went down (tests, status)
        self.recoveries = 0

    def fail(self, part: str, reason: str, now: datetime) -> bool:
        """Record that ``part`` does not work; True when this is news (it was up)."""
        with self._lock:
            before = self._down.get(part)
            if before is not None and before.reason == reason:
                return False
            self._down[part] = Problem(part, reason, before.since if before else now)
            if before is None:
                self.failures += 1
        what = _WHAT.get(part, part)
        log.warning("%s is not usable: %s (autoretry keeps running and retries it)", what, reason)
        return before is None

    def ok(self, part: str, now: datetime) -> Problem | None:
        """Record that ``part`` works; returns the problem it had, if it had one."""
        with self._lock:
            problem = self._down.pop(part, None)
            if problem is not None:
                self.recoveries += 1
        if problem is not None:
            seconds = (now - problem.since).total_seconds()
            log.warning("%s is back after %.0f s (was: %s)", _WHAT.get(part, part), seconds,
                        problem.reason)
        return problem

    def down(self, part: str) -> Problem | None:
        with self._lock:
            return self._down.get(part)

    def report(self) -> dict[str, Any]:
        """For the heartbeat: every part that is down, with why and since when."""
        with self._lock:
            problems = list(self._down.values())
        return {p.part: {"problem": p.reason, "since": p.since.isoformat()} for p in problems}


def describe(report: dict[str, Any]) -> list[str]:
    """``autoretry status`` lines for the parts in a heartbeat's report."""
    return [f"problem: {_WHAT.get(part, part)}: {entry.get('problem')} (since {entry.get('since')})"
            for part, entry in sorted(report.items()) if isinstance(entry, dict)]
