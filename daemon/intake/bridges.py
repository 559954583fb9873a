"""Unix-socket server for plugin bridges: reader threads only enqueue into the daemon's inbox.

Inbox items (all frozen, all carry the connection id and the time they were read):

- ``BridgeConnected(conn_id, hello, at)``: a bridge said hello (the server answers ``welcome``);
- ``BridgeMessage(conn_id, message, at)``: any later line, parsed into a protocol dataclass
  (``Event``, ``ChatMessage``, ``Command``, ``Ack``, ``Stats``, ``Unknown``);
- ``BridgeClosed(conn_id, hello, reason, at)``: the connection ended (``hello`` may be None).

Writes are serialized per connection (``send``); a bridge that stops reading is dropped after
``write_timeout`` seconds instead of blocking the daemon. Bad lines never end a connection.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import socket
import stat
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from itertools import count
from pathlib import Path
from typing import Any

from opencode_autoretry import package_version
from opencode_autoretry.clock import Clock, SystemClock
from opencode_autoretry.daemon.intake.batch_queue import BatchQueue
from opencode_autoretry.daemon.intake.hardening import PeerCheck, owned_private_dir, same_user
from opencode_autoretry.daemon.parts import SOCKET, PartHealth
from opencode_autoretry.opencode.versions import untested_warning
from opencode_autoretry.plugin_bridge import protocol
from opencode_autoretry.plugin_bridge.protocol import (
    MAX_LINE_BYTES,
    BridgeInbound,
    Hello,
    ProtocolError,
    Unknown,
    Welcome,
)

log = logging.getLogger(__name__)
#: Open bridge connections at most (one reader thread each): one OpenCode process is one
#: connection, so more is a leak or an attack; beyond it a connection is closed unread.
MAX_CONNECTIONS = 64
#: Items waiting in the inbox before a reader thread stops reading (back-pressure: its bridge
#: queues, then drops and counts, as when the daemon is away), so a flood cannot grow the
#: daemon's memory without bound (issue 20).
MAX_PENDING = 2048
#: How long the accept loop blocks before it looks whether its socket file was removed.
ACCEPT_TIMEOUT_S = 1.0


class SocketBusyError(RuntimeError):
    """Another daemon is live on the socket path."""


@dataclass(frozen=True)
class BridgeConnected:
    conn_id: str
    hello: Hello
    at: datetime


@dataclass(frozen=True)
class BridgeMessage:
    conn_id: str
    message: BridgeInbound
    at: datetime


@dataclass(frozen=True)
class BridgeClosed:
    conn_id: str
    hello: Hello | None
    reason: str
    at: datetime


BridgeItem = BridgeConnected | BridgeMessage | BridgeClosed


@dataclass(frozen=True)
class BridgeCounters:
    lines: int = 0
    garbage: int = 0  # not JSON / not a valid v1 message
    oversize: int = 0  # longer than MAX_LINE_BYTES
    unknown: int = 0  # valid but of a type we do not know
    partial: int = 0  # bytes left without a newline when a connection closed
    rejected: int = 0  # connections from another user (or unverifiable): closed unread
    over_cap: int = 0  # connections beyond MAX_CONNECTIONS: closed unread


@dataclass
class _Conn:
    conn_id: str
    sock: socket.socket
    connected_at: datetime
    write_lock: threading.Lock = field(default_factory=threading.Lock)
    hello: Hello | None = None


class LineSplitter:
    """Cuts a byte stream into lines; lines over ``max_line`` are dropped and counted."""

    def __init__(self, max_line: int) -> None:
        self.max_line = max_line
        self._buffer = b""
        self._skipping = False  # inside an oversized line: drop bytes up to its newline

    def feed(self, chunk: bytes) -> tuple[list[bytes], int]:
        """Returns the complete non-blank lines and how many oversized lines were dropped."""
        *complete, self._buffer = (self._buffer + chunk).split(b"\n")
        lines: list[bytes] = []
        oversize = 0
        for line in complete:
            if self._skipping:
                self._skipping = False
            elif len(line) > self.max_line:
                oversize += 1
            elif line.strip():
                lines.append(line)
        if len(self._buffer) > self.max_line:
            oversize += 0 if self._skipping else 1
            self._skipping, self._buffer = True, b""
        return lines, oversize

    @property
    def leftover(self) -> int:
        """Bytes of an unfinished line (not counting an oversized one being skipped)."""
        return 0 if self._skipping else len(self._buffer.strip())


def _prepare_path(path: Path) -> None:
    """Directory 0700; remove a stale socket; refuse when a live daemon answers on it."""
    owned_private_dir(path.parent)
    if not path.exists() and not path.is_symlink():
        return
    if not stat.S_ISSOCK(path.lstat().st_mode):
        raise SocketBusyError(f"{path} exists and is not a socket; remove it first")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1.0)
    try:
        probe.connect(str(path))
    except OSError:
        path.unlink(missing_ok=True)  # nobody listens: stale
        return
    finally:
        probe.close()
    raise SocketBusyError(f"another autoretry daemon is already listening on {path}")


class BridgeServer:
    """Accepts bridge connections on ``path`` and feeds ``inbox``; see the module doc."""

    def __init__(
        self,
        path: Path,
        inbox: queue.Queue[Any],
        clock: Clock | None = None,
        max_line: int = MAX_LINE_BYTES,
        write_timeout: float = 5.0,
        daemon_version: str | None = None,
        parts: PartHealth | None = None,
        peer_check: PeerCheck = same_user,
        max_connections: int = MAX_CONNECTIONS,
        max_pending: int = MAX_PENDING,
    ) -> None:
        self.path = path
        self._inbox = inbox
        self._clock = clock or SystemClock()
        self._max_line = max_line
        self._write_timeout = write_timeout
        self._daemon_version = daemon_version or package_version()
        self._conns: dict[str, _Conn] = {}
        self._lock = threading.Lock()
        self._ids = count(1)
        self._counters: dict[str, int] = dict.fromkeys(BridgeCounters.__dataclass_fields__, 0)
        self._stop = threading.Event()
        self._listener: socket.socket | None = None
        self._threads: list[threading.Thread] = []
        self._inode: int | None = None
        self._parts = parts or PartHealth()
        self._peer_check = peer_check
        self._max_connections = max_connections
        self._max_pending = max_pending
        self._untested: set[str | None] = set()  # OpenCode versions already warned about

    # ------------------------------------------------------------ lifecycle

    def start(self) -> BridgeServer:
        self._listener = self._listen()
        self._spawn(self._accept_loop, "bridge-accept")
        return self

    def _listen(self) -> socket.socket:
        _prepare_path(self.path)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(self.path))
        os.chmod(self.path, 0o600)
        listener.listen(16)
        # Lets the accept loop notice a removed socket (stop() wakes it at once). Each timeout
        # is a wake-up of an idle daemon, so not much shorter (issue 21: CPU while streaming).
        listener.settimeout(ACCEPT_TIMEOUT_S)
        self._inode = self.path.stat().st_ino
        return listener

    def _relisten_if_removed(self) -> None:
        """The socket file (or its directory) was removed while running: bridges could not
        reach us any more, so bind a new one (connected bridges keep their connections)."""
        if self.path.exists() or self.path.is_symlink() or self._stop.is_set():
            return
        self._parts.fail(SOCKET, f"{self.path} was removed while running", self._clock.now())
        try:
            listener = self._listen()
        except (OSError, SocketBusyError) as exc:
            self._parts.fail(SOCKET, f"cannot listen on {self.path} again: {exc}",
                             self._clock.now())
            return
        old, self._listener = self._listener, listener
        if old is not None:
            old.close()
        self._parts.ok(SOCKET, self._clock.now())

    def stop(self) -> None:
        self._stop.set()
        if self._listener is not None:
            with contextlib.suppress(OSError):  # wakes a blocked accept() on Linux
                self._listener.shutdown(socket.SHUT_RDWR)
            self._listener.close()
        with self._lock:
            conns = list(self._conns.values())
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.sock.shutdown(socket.SHUT_RDWR)
        for thread in self._threads:
            thread.join(timeout=5.0)
        self._remove_own_socket()

    def __enter__(self) -> BridgeServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _remove_own_socket(self) -> None:
        # Only unlink the file we bound: a successor daemon may already own the path.
        with contextlib.suppress(OSError):
            if self._inode is not None and self.path.stat().st_ino == self._inode:
                self.path.unlink()

    def _spawn(self, target: Any, name: str, *args: object) -> None:
        thread = threading.Thread(target=target, args=args, name=name, daemon=True)
        # finished readers are let go: the list kept one per connection ever made (issue 20)
        self._threads = [t for t in self._threads if t.is_alive()]
        self._threads.append(thread)
        thread.start()

    @property
    def threads(self) -> int:
        """Threads kept for ``stop`` to join (the accept loop and the live readers)."""
        return len(self._threads)

    # ------------------------------------------------------------ public API

    def send(self, conn_id: str, message: Any) -> bool:
        """Write one protocol message to one bridge; False when it is gone or too slow."""
        with self._lock:
            conn = self._conns.get(conn_id)
        if conn is None:
            return False
        try:
            data = protocol.encode(message)
        except ProtocolError:
            log.warning("bridge %s: refusing an oversized %s", conn_id, type(message).__name__)
            return False
        try:
            with conn.write_lock:
                conn.sock.sendall(data)
        except OSError as exc:
            log.info("bridge %s: write failed (%s); closing", conn_id, exc)
            with contextlib.suppress(OSError):
                conn.sock.shutdown(socket.SHUT_RDWR)
            return False
        return True

    def counters(self) -> BridgeCounters:
        with self._lock:
            return BridgeCounters(**self._counters)

    # ------------------------------------------------------------ threads

    def _accept_loop(self) -> None:
        assert self._listener is not None
        while not self._stop.is_set():
            try:
                sock, _ = self._listener.accept()
            except TimeoutError:
                self._relisten_if_removed()
                continue
            except OSError:
                return  # listener closed by stop()
            refusal = self._peer_check(sock)
            if refusal:
                self._count("rejected")
                log.warning("bridge connection refused: %s", refusal)
                sock.close()
                continue
            with self._lock:
                full = len(self._conns) >= self._max_connections
            if full:
                self._count("over_cap")
                log.warning("bridge connection refused: %d connections are open, the most "
                            "allowed", self._max_connections)
                sock.close()
                continue
            sock.settimeout(self._write_timeout)
            conn = _Conn(f"b{next(self._ids)}", sock, self._clock.now())
            with self._lock:
                self._conns[conn.conn_id] = conn
            self._spawn(self._read_loop, f"bridge-{conn.conn_id}", conn)

    def _read_loop(self, conn: _Conn) -> None:
        reason = "eof"
        try:
            for lines in self._chunks(conn):
                self._handle_lines(conn, lines)
        except OSError as exc:
            reason = f"error: {exc}"
        finally:
            with self._lock:
                self._conns.pop(conn.conn_id, None)
            with contextlib.suppress(OSError):
                conn.sock.close()
            self._inbox.put(BridgeClosed(conn.conn_id, conn.hello, reason, self._clock.now()))

    def _chunks(self, conn: _Conn) -> Iterator[list[bytes]]:
        """The complete lines of each ``recv``: a bridge writes what it queued in one tick
        (e.g. the coalesced deltas of every streaming session) in one write, so the per-line
        costs that do not depend on the line (clock, counters, lock) are paid once a chunk."""
        splitter = LineSplitter(self._max_line)
        while not self._stop.is_set():
            try:
                chunk = conn.sock.recv(65536)
            except TimeoutError:
                continue
            except ConnectionResetError:
                break  # the bridge went away without a clean close: same as EOF
            if not chunk:
                break
            lines, oversize = splitter.feed(chunk)
            for _ in range(oversize):
                self._count("oversize")
                log.warning("bridge %s: line over %d bytes dropped", conn.conn_id, self._max_line)
            if lines:
                yield lines
        if splitter.leftover:
            self._count("partial")
            log.info(
                "bridge %s: %d bytes without newline at close", conn.conn_id, splitter.leftover
            )

    def _handle_lines(self, conn: _Conn, lines: list[bytes]) -> None:
        """Lines read together: one clock read (they arrived at the same moment), one check
        for room in the inbox, and one ``put_all`` (one lock round trip, one wake-up of the
        loop) for their messages; a hello among them is handled where it stands."""
        self._count("lines", len(lines))
        now = self._clock.now()
        batch: list[object] = []
        for line in lines:
            message = self._decode(conn, line)
            if message is None:
                continue
            if isinstance(message, Hello):
                self._put(conn, batch)
                batch = []
                conn.hello = message
                self._warn_untested(message.opencode)
                self._inbox.put(BridgeConnected(conn.conn_id, message, now))
                self.send(conn.conn_id, Welcome(daemon=self._daemon_version))
                continue
            batch.append(BridgeMessage(conn.conn_id, message, now))
        self._put(conn, batch)

    def _decode(self, conn: _Conn, line: bytes) -> BridgeInbound | None:
        """The line's message; None (counted and logged) for a line that is no message."""
        try:
            message = protocol.decode_from_bridge(line)
        except ProtocolError as exc:
            self._count("oversize" if exc.reason == "too_long" else "garbage")
            log.warning("bridge %s: bad line dropped (%s)", conn.conn_id, exc)
            return None
        if isinstance(message, Unknown):
            self._count("unknown")
        return message

    def _put(self, conn: _Conn, items: list[object]) -> None:
        if not items:
            return
        self._wait_for_room(conn)
        if isinstance(self._inbox, BatchQueue):
            self._inbox.put_all(items)
            return
        for item in items:  # a plain queue (tests): the same items, one by one
            self._inbox.put(item)

    def _wait_for_room(self, conn: _Conn) -> None:
        """Back-pressure: while the inbox holds ``max_pending`` items this reader stops
        reading, so its bridge's writes wait in the socket and then in the bridge's own
        bounded queue (which drops and counts, shown by status)."""
        if self._inbox.qsize() < self._max_pending:
            return
        log.info("bridge %s: inbox full (%d items); reading paused", conn.conn_id,
                 self._max_pending)
        while self._inbox.qsize() >= self._max_pending and not self._stop.wait(0.01):
            pass

    def _warn_untested(self, version: str | None) -> None:
        """Once per OpenCode version outside the tested range (issue 11)."""
        warning = untested_warning(version)
        if warning and version not in self._untested:
            self._untested.add(version)
            log.warning("%s", warning)

    def _count(self, name: str, n: int = 1) -> None:
        with self._lock:
            self._counters[name] += n
