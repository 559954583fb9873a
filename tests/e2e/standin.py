"""A small in-test daemon stand-in built on the real ``BridgeServer``.

It records every inbox item, answers ``command`` requests with ``reply_for(command)`` and lets a
test send requests to the bridge and wait for their acks. The real daemon loop is elsewhere.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from itertools import count
from pathlib import Path
from typing import Any

from opencode_autoretry.daemon.intake.bridges import (
    BridgeClosed,
    BridgeConnected,
    BridgeItem,
    BridgeMessage,
    BridgeServer,
)
from opencode_autoretry.plugin_bridge.protocol import Ack, Command, Reply


def default_reply(command: Command) -> Reply:
    return Reply(id=command.id, ok=True, message=f"stand-in: {command.arguments or 'status'}")


class DaemonStandIn:
    def __init__(self, path: Path, reply_for: Callable[[Command], Reply] = default_reply) -> None:
        self.path = path
        self.reply_for = reply_for
        self._items: list[BridgeItem] = []
        self._cond = threading.Condition()
        self._ids = count(1)
        self._server: BridgeServer | None = None
        self._inbox: queue.Queue[Any] = queue.Queue()
        self._thread: threading.Thread | None = None

    @property
    def server(self) -> BridgeServer:
        assert self._server is not None, "stand-in not started"
        return self._server

    def start(self) -> DaemonStandIn:
        self._inbox = queue.Queue()
        self._server = BridgeServer(self.path, self._inbox).start()
        self._thread = threading.Thread(
            target=self._respond, args=(self._inbox, self._server), daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._inbox.put(None)
            assert self._thread is not None
            self._thread.join(timeout=5)
            self._server = None

    def _respond(self, inbox: queue.Queue[Any], server: BridgeServer) -> None:
        while True:
            item = inbox.get()
            if item is None:
                return
            with self._cond:
                self._items.append(item)
                self._cond.notify_all()
            if isinstance(item, BridgeMessage) and isinstance(item.message, Command):
                server.send(item.conn_id, self.reply_for(item.message))

    # ---------------------------------------------------------------- test API

    def items(self) -> list[BridgeItem]:
        with self._cond:
            return list(self._items)

    def messages(self, kind: type | None = None) -> list[Any]:
        found = [i.message for i in self.items() if isinstance(i, BridgeMessage)]
        return [m for m in found if kind is None or isinstance(m, kind)]

    def events(self, event_type: str | None = None) -> list[Any]:
        from opencode_autoretry.plugin_bridge.protocol import Event

        return [e for e in self.messages(Event) if event_type is None or e.event_type == event_type]

    def wait_for(
        self, predicate: Callable[[BridgeItem], bool], timeout: float, what: str
    ) -> BridgeItem:
        deadline = time.monotonic() + timeout
        checked = 0  # each item is tested once: long streams must not cost O(n^2)
        with self._cond:
            while True:
                for item in self._items[checked:]:
                    checked += 1
                    if predicate(item):
                        return item
                left = deadline - time.monotonic()
                if left <= 0:
                    seen = [_describe(i) for i in self._items][-30:]
                    raise AssertionError(
                        f"stand-in: no {what} within {timeout}s; last seen: {seen}"
                    )
                self._cond.wait(left)

    def wait_connected(self, timeout: float = 30.0, after: int = 0) -> BridgeConnected:
        """The first hello (the ``after``-th one onwards, to wait for a reconnect)."""
        seen: list[BridgeConnected] = []

        def is_new_hello(item: BridgeItem) -> bool:
            if isinstance(item, BridgeConnected) and item not in seen:
                seen.append(item)
            return len(seen) > after

        self.wait_for(is_new_hello, timeout, f"bridge hello #{after + 1}")
        return seen[after]

    def live_connections(self) -> list[str]:
        """The ids of the connections that said hello and have not closed, oldest first (read
        from the inbox items, as the daemon's loop books them)."""
        items = self.items()
        closed = {i.conn_id for i in items if isinstance(i, BridgeClosed)}
        return [i.conn_id for i in items if isinstance(i, BridgeConnected)
                and i.conn_id not in closed]

    def sessions_named(self, conn_id: str) -> frozenset[str]:
        """The sessions the messages of connection ``conn_id`` named."""
        return frozenset(
            session for i in self.items() if isinstance(i, BridgeMessage) and i.conn_id == conn_id
            and (session := getattr(i.message, "session_id", None))
        )

    def request(self, message: Any, timeout: float = 15.0) -> Ack:
        """Send a request (its ``id`` must be set) to the newest bridge and wait for its ack."""
        conns = self.live_connections()
        assert conns, "stand-in: no bridge connected"
        assert self.server.send(conns[-1], message), "stand-in: send failed"
        item = self.wait_for(
            lambda i: (
                isinstance(i, BridgeMessage)
                and isinstance(i.message, Ack)
                and i.message.id == message.id
            ),
            timeout,
            f"ack for {message.id}",
        )
        assert isinstance(item, BridgeMessage) and isinstance(item.message, Ack)
        return item.message

    def next_id(self, prefix: str = "r") -> str:
        return f"{prefix}-{next(self._ids)}"


def _describe(item: BridgeItem) -> str:
    if isinstance(item, BridgeMessage):
        inner = getattr(item.message, "event_type", None) or type(item.message).__name__
        return f"{item.conn_id}:{inner}"
    if isinstance(item, BridgeClosed):
        return f"{item.conn_id}:closed({item.reason})"
    return f"{item.conn_id}:hello"
