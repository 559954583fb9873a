"""What producers put into the daemon's one inbox (frozen values; only the loop consumes them).

Producers are the bridge server's reader threads, the DB tailer, the timer jobs and the signal
handlers. None of them decides anything: they describe what happened and the loop acts.
"""

from __future__ import annotations

import queue
from collections.abc import Callable
from dataclasses import dataclass

from opencode_autoretry.daemon.intake.bridges import BridgeClosed, BridgeConnected, BridgeMessage
from opencode_autoretry.models import Message

__all__ = ["BridgeClosed", "BridgeConnected", "BridgeMessage", "DbRows", "Reload", "Shutdown",
           "TimerDue"]

Inbox = queue.Queue  # Queue[object]; one per daemon. Bridge items are defined by bridges.py.


@dataclass(frozen=True)
class DbRows:
    """New messages the tailer read from OpenCode's DB: ids after the last one seen."""

    messages: tuple[Message, ...] = ()


@dataclass(frozen=True)
class TimerDue:
    """A delayed retry's time has come (the loop re-checks everything before sending)."""

    injection_id: int


@dataclass(frozen=True)
class Shutdown:
    reason: str = "signal"


@dataclass(frozen=True)
class Reload:
    """SIGHUP: restart in place with the configuration as it is now. ``check`` loads it and
    returns its one-line error, or None when it is good; a bad one keeps the daemon running."""

    check: Callable[[], str | None]
