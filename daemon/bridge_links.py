"""The bridges' connections, for the loop: which are open (their hellos, their last stats),
which connection owns which session, and what a hello or a close sets going (re-adoption,
lost continuations sent again, the gap review, the repetition guard's configuration)."""

from __future__ import annotations

import logging
from datetime import datetime

from opencode_autoretry.daemon.gap import GapReview
from opencode_autoretry.daemon.heartbeat import Heartbeat
from opencode_autoretry.daemon.inbox import BridgeClosed, BridgeConnected
from opencode_autoretry.daemon.reattach import RunningTools, adopt_named
from opencode_autoretry.daemon.recovery import Recovery
from opencode_autoretry.daemon.repetition.guard import RepetitionGuard
from opencode_autoretry.daemon.sessions import Sessions, SessionView
from opencode_autoretry.plugin_bridge import protocol

log = logging.getLogger(__name__)


class BridgeLinks:
    def __init__(
        self, sessions: Sessions, recovery: Recovery, gap: GapReview,
        repetition: RepetitionGuard, heartbeat: Heartbeat, running_tools: RunningTools,
    ) -> None:
        self._running_tools = running_tools
        self._sessions = sessions
        self._recovery = recovery
        self._gap = gap
        self._repetition = repetition
        self._heartbeat = heartbeat
        self.hellos: dict[str, protocol.Hello | None] = {}
        self.stats: dict[str, protocol.Stats] = {}  # the last of each (status, doctor)

    def connected(self, item: BridgeConnected, now: datetime) -> None:
        self.hellos[item.conn_id] = item.hello
        log.info("bridge %s connected: pid %s, %s", item.conn_id, item.hello.pid,
                 item.hello.directory)
        # The sessions it names are its own again, with their live state (issue 11) ...
        named = adopt_named(self._sessions, item.conn_id, item.hello, self.hellos, now,
                            self._running_tools)
        if named:
            self._heartbeat.soon()  # owners into the heartbeat
        # What it was sent and never ran goes out again; before anything is sent to it.
        self._recovery.resend_lost(item.conn_id, protocol.ran_injections(item.hello), now)
        # ... and what ended while it was away is judged before its old retries may fire.
        self._gap.bridge_hello(item.conn_id, item.hello.pid, now, named)
        self._recovery.adopt(item.conn_id, item.hello.pid, now)
        self._repetition.on_hello(item.conn_id, now)  # config + stored trims

    def closed(self, item: BridgeClosed, now: datetime) -> None:
        known = self.hellos.pop(item.conn_id, None)
        self.stats.pop(item.conn_id, None)
        dropped = self._sessions.drop_owner(item.conn_id)
        for view in dropped:
            log.info("session %s lost its owner (bridge %s closed)", view.session_id,
                     item.conn_id)
        self._gap.bridge_closed(item.hello or known, [v.session_id for v in dropped], now)

    def on_stats(self, conn_id: str, stats: protocol.Stats) -> None:
        self.stats[conn_id] = stats
        if stats.dropped:
            log.warning("bridge %s dropped %s events", conn_id, stats.dropped)

    def owned(self, session_id: str, conn_id: str) -> SessionView:
        """The bridge whose traffic mentions a session owns it; a new owner is written with
        the next tick's heartbeat, so a restarted daemon can re-adopt it by the bridge's pid."""
        view = self._sessions.ensure(session_id)
        if view.owner != conn_id:
            view.owner = conn_id
            hello = self.hellos.get(conn_id)
            view.headless = hello is not None and bool(hello.exec)
            self._heartbeat.soon()
        return view

    def owned_now(self, session_id: str) -> bool:
        view = self._sessions.get(session_id)
        return view is not None and view.owner is not None
