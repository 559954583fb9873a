"""What leaves for the bridges: each request routed to its session's owner (the bridge
connection whose events mention the session), with an id, and the toasts and log lines that
tell the user in the session's own OpenCode.

``Actions`` decides what to send and guards it (``Actions.gate``); this module knows where it
goes and remembers which request ids wait for an acknowledgement.
"""

from __future__ import annotations

import itertools
import logging
from typing import Any, Protocol

from opencode_autoretry.daemon.sessions import Sessions
from opencode_autoretry.decisions.observed import OBSERVE_TITLE
from opencode_autoretry.plugin_bridge.protocol import Log, Toast

log = logging.getLogger(__name__)


class BridgeSender(Protocol):
    def send(self, conn_id: str, request: Any) -> bool: ...


class Outbox:
    """Requests to the bridges, addressed by session owner."""

    def __init__(self, bridge: BridgeSender, sessions: Sessions, *,
                 observe: bool = False) -> None:
        #: Every toast's title; in observe mode it says so (issue 23).
        self.title = OBSERVE_TITLE if observe else "autoretry"
        self._bridge = bridge
        self._sessions = sessions
        self._request_ids = itertools.count(1)
        self._requests: dict[str, tuple[str, int | None]] = {}  # request id -> (type, injection)

    def owner_of(self, session_id: str) -> str | None:
        view = self._sessions.get(session_id)
        return view.owner if view is not None else None

    def send(self, owner: str, request: Any) -> bool:
        return self._bridge.send(owner, request)

    def next_id(self, kind: str, injection_id: int | None) -> str:
        """A fresh request id; a prompt's or an abort's is remembered until its ack."""
        request_id = f"r-{next(self._request_ids)}"
        if kind in ("prompt", "abort"):
            self._requests[request_id] = (kind, injection_id)
        return request_id

    def acked(self, request_id: str) -> tuple[str, int | None]:
        """The (type, injection) of an acknowledged request; ("", None) if not remembered."""
        return self._requests.pop(request_id, ("", None))

    # -- telling the user -------------------------------------------------------------------

    def notify(self, session_id: str, message: str, variant: str) -> bool:
        """A toast in the session's OpenCode plus a log line there; nothing if no owner."""
        owner = self.owner_of(session_id)
        if owner is None:
            log.info("no owner to notify for %s: %s", session_id, message)
            return False
        toast = Toast(message=message, id=self.next_id("toast", None), title=self.title,
                      variant=variant, duration=5000)
        self._bridge.send(owner, toast)
        self.log_line(session_id, message)
        return True

    def log_line(self, session_id: str, message: str) -> None:
        owner = self.owner_of(session_id)
        if owner is not None:
            line = Log(level="info", message=message, id=self.next_id("log", None),
                       extra={"service": "autoretry", "sessionID": session_id})
            self._bridge.send(owner, line)
