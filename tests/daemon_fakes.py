"""Fakes for the daemon's unit tests: clock, bridge, timers, and a loop on a real OpenCode DB.

Imported by tests/test_daemon_*.py as a plain module (pyproject's pytest ``pythonpath``).
"""

from __future__ import annotations

import queue
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from opencode_rows import BASE_MS, OpenCodeRows, api_error, tokens

from opencode_autoretry.config.load import parse_config
from opencode_autoretry.config.settings import Settings
from opencode_autoretry.daemon.intake.bridges import BridgeClosed, BridgeConnected, BridgeMessage
from opencode_autoretry.daemon.loop import Loop
from opencode_autoretry.decisions.policy import load_policy
from opencode_autoretry.models import from_epoch_ms
from opencode_autoretry.opencode.db import OpenCodeDB
from opencode_autoretry.plugin_bridge import protocol
from opencode_autoretry.store.database import Store

START = from_epoch_ms(BASE_MS) or datetime(2026, 11, 30, tzinfo=UTC)
CONN = "b1"
PID = 4242


class FakeClock:
    def __init__(self, start: datetime = START) -> None:
        self.value = start

    def now(self) -> datetime:
        return self.value

    def advance(self, seconds: float) -> datetime:
        self.value += timedelta(seconds=seconds)
        return self.value


@dataclass
class FakeBridge:
    alive: set[str] = field(default_factory=lambda: {CONN})
    sent: list[tuple[str, Any]] = field(default_factory=list)

    def send(self, conn_id: str, message: Any) -> bool:
        if conn_id not in self.alive:
            return False
        self.sent.append((conn_id, message))
        return True

    def of(self, kind: type) -> list[Any]:
        return [m for _, m in self.sent if isinstance(m, kind)]


@dataclass
class FakeTimers:
    armed: dict[int, datetime] = field(default_factory=dict)

    def arm(self, injection_id: int, due: datetime) -> None:
        self.armed[injection_id] = due

    def cancel(self, injection_id: int) -> None:
        self.armed.pop(injection_id, None)


class Harness:
    """A Loop wired to fakes, a real store and a real (row-written) OpenCode DB."""

    def __init__(self, tmp: Path, policy: dict | None = None, **settings: Any) -> None:
        self.tmp = tmp
        self.rows = OpenCodeRows(tmp / "opencode.db")
        self.rows.commit()
        self.settings = replace(
            Settings(), opencode_db=tmp / "opencode.db", store=tmp / "store.db",
            socket=tmp / "s.sock", log_dir=tmp / "log", policy=policy or {}, **settings,
        )
        self.config = parse_config(self.settings)
        self.policy = load_policy(policy or {})
        self.clock = FakeClock(from_epoch_ms(self.rows.clock) or START)
        self.bridge = FakeBridge()
        self.timers = FakeTimers()
        self.store = Store.open(self.settings.store)
        self.loop = self.new_loop()

    def new_loop(self) -> Loop:
        loop = Loop(
            self.config, self.store, self.bridge,
            lambda: OpenCodeDB.open(self.settings.opencode_db), self.timers, self.clock,
            rand=lambda: 0.0, pid=999,
        )
        loop.start(self.clock.now())
        return loop

    def sigkill(self) -> None:
        """SIGKILL: the daemon's memory is gone; only what it stored (its last heartbeat
        included) survives. What happened since the last beat is not in the store."""
        self.bridge.sent.clear()
        self.timers.armed.clear()
        self.loop = None  # type: ignore[assignment]

    def revive(self, seconds: float = 1.0) -> None:
        """The restarted daemon, ``seconds`` after the kill, on the same store and DB."""
        self.clock.advance(seconds)
        self.rows.clock = int(self.clock.now().timestamp() * 1000)
        self.loop = self.new_loop()

    # -- bridge traffic -----------------------------------------------------------------------

    def hello(self, conn: str = CONN, pid: int = PID) -> None:
        hello = protocol.Hello(pid=pid, directory="/work/project", server_url=None)
        self.loop.handle(BridgeConnected(conn, hello, self.clock.now()))

    def closed(self, conn: str = CONN) -> None:
        self.loop.handle(BridgeClosed(conn, None, "eof", self.clock.now()))

    def send(self, message: Any, conn: str = CONN) -> None:
        self.loop.handle(BridgeMessage(conn, message, self.clock.now()))

    def event(self, kind: str, conn: str = CONN, **props: Any) -> None:
        self.send(protocol.Event(t=0, event={"type": kind, "properties": props}), conn)

    def status(self, session_id: str, kind: str, **extra: Any) -> None:
        self.event("session.status", sessionID=session_id, status={"type": kind, **extra})

    def idle(self, session_id: str) -> None:
        """OpenCode's idle pair: status idle then session.idle."""
        self.status(session_id, "idle")
        self.event("session.idle", sessionID=session_id)

    def error_then_idle(self, session_id: str, error: dict) -> None:
        """The error path of reference §3.4: error, idle, idle (the idles are duplicated)."""
        self.event("session.error", sessionID=session_id, error=error)
        self.idle(session_id)
        self.idle(session_id)

    def chat(self, session_id: str, message_id: str | None, text: str = "do it", *,
             marker: dict | None = None) -> None:
        self.send(protocol.ChatMessage(t=0, session_id=session_id, message_id=message_id,
                                       agent="build", marker=marker, text=text))

    def command(self, session_id: str, arguments: str) -> protocol.Reply:
        self.send(protocol.Command(id="c-1", name="autoretry", session_id=session_id,
                                   arguments=arguments))
        return self.bridge.of(protocol.Reply)[-1]

    # -- OpenCode rows ------------------------------------------------------------------------

    def session(self, parent_id: str | None = None) -> str:
        sid = self.rows.session("swift-planet", parent_id=parent_id)
        self.rows.commit()
        self.event("session.created", sessionID=sid,
                   info={"id": sid, **({"parentID": parent_id} if parent_id else {})})
        return sid

    def user(self, session_id: str, text: str = "Say hello") -> str:
        mid = self.rows.user(session_id, text)
        self.rows.commit()
        return mid

    def busy_turn(self) -> tuple[str, str]:
        """A root session whose user turn OpenCode is working on: (session id, user message)."""
        sid = self.session()
        user = self.user(sid)
        self.chat(sid, user)
        self.status(sid, "busy")
        return sid, user

    def failed_turn(self, error: dict | None = None) -> tuple[str, str, str]:
        """A busy turn whose assistant step failed with ``error`` (a disconnect by default):
        (session id, user message, failed step); no error event sent yet."""
        sid, user = self.busy_turn()
        return sid, user, self.failed_step(sid, user, error)

    def failed_step(self, session_id: str, parent: str, error: dict | None = None) -> str:
        mid = self.rows.assistant(session_id, parent, finish=None, text="",
                                  error=error or disconnect())
        self.rows.commit()
        return mid

    def blank_step(self, session_id: str, parent: str) -> str:
        mid = self.rows.assistant(session_id, parent, finish="stop", toks=tokens(100, 0),
                                  text=None)
        self.rows.commit()
        return mid

    def good_step(self, session_id: str, parent: str) -> str:
        mid = self.rows.assistant(session_id, parent)
        self.rows.commit()
        return mid

    def injected_row(self, session_id: str, prompt: protocol.Prompt) -> str:
        marker = prompt.marker or {}
        mid = self.rows.injected(session_id, decision=int(marker["decision"]),
                                 kind=str(marker["kind"]), injection=int(marker["injection"]),
                                 text=prompt.text)
        self.rows.commit()
        return mid

    # -- time ---------------------------------------------------------------------------------

    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)
        self.rows.clock = int(self.clock.now().timestamp() * 1000)
        self.loop.tick()

    def prompts(self) -> list[protocol.Prompt]:
        return self.bridge.of(protocol.Prompt)

    def toasts(self) -> list[str]:
        return [t.message for t in self.bridge.of(protocol.Toast)]


def disconnect() -> dict:
    """OpenCode's final error after its own retries of a reset stream (reference §2.6)."""
    return api_error("Connection reset by server", code="ECONNRESET")


def drain(inbox: queue.Queue[object]) -> list[object]:
    items = []
    while True:
        try:
            items.append(inbox.get_nowait())
        except queue.Empty:
            return items
