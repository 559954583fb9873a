"""The soak's interruptions that are not faults of the provider (issue 11).

- ``SocketProxy``: a byte-for-byte Unix socket relay between one OpenCode's bridge and the
  daemon. ``cut()`` makes the next chunk in either direction go through only in part — cut
  inside a line — and then closes both ends, as a dying connection would: the daemon sees a
  partial line, the bridge a closed socket, and it reconnects with its own backoff.
  ``swallow(needle)`` loses the whole daemon-to-bridge line holding ``needle`` and closes both
  ends (the daemon's write succeeded, the bridge never read it); ``refuse()`` turns new
  connections away until ``admit()``, as a daemon that is down would.
- ``Gate``: lets the soak restart one OpenCode process between turns: ``hold()`` waits until
  no turn of that process is in flight and keeps new ones out until ``release()``.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

CHUNK = 65536


def _cut_point(chunk: bytes) -> int | None:
    """Where to cut ``chunk`` so that the part sent ends inside a line (None: cannot)."""
    for k in range(max(1, len(chunk) // 2), len(chunk)):
        if chunk[k - 1 : k] != b"\n":
            return k
    return None


class SocketProxy:
    def __init__(self, listen: Path, upstream: Path) -> None:
        self.listen, self.upstream = listen, upstream
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(str(listen))
        self._server.listen(16)
        self._armed = threading.Event()
        self._cond = threading.Condition()
        self.cuts = 0
        self.swallowed = 0
        self.connections = 0
        self._needle: bytes | None = None
        self._refusing = False
        self._closed = False

    def start(self) -> SocketProxy:
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self._server.close()

    def cut(self, timeout: float) -> bool:
        """Arm a cut and wait until it happened (False: no bytes moved within ``timeout``)."""
        with self._cond:
            before = self.cuts
            self._armed.set()
            return self._cond.wait_for(lambda: self.cuts > before, timeout)

    def swallow(self, needle: bytes) -> None:
        """Arm: the next daemon-to-bridge line holding ``needle`` is lost and both ends close."""
        with self._cond:
            self._needle = needle

    def wait_swallowed(self, count: int, timeout: float) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: self.swallowed >= count, timeout)

    def refuse(self) -> None:
        self._refusing = True

    def admit(self) -> None:
        self._refusing = False

    def _accept(self) -> None:
        while not self._closed:
            try:
                down, _ = self._server.accept()
            except OSError:
                return
            up = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                if self._refusing:
                    raise ConnectionRefusedError
                up.connect(str(self.upstream))
            except OSError:  # the daemon is down: refuse, as its own socket would
                down.close()
                up.close()
                continue
            self.connections += 1
            for src, dst, to_bridge in ((down, up, False), (up, down, True)):
                threading.Thread(target=self._pump, args=(src, dst, (down, up), to_bridge),
                                 daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket,
              pair: tuple[socket.socket, ...], to_bridge: bool) -> None:
        try:
            while chunk := src.recv(CHUNK):
                if self._armed.is_set() and self._cut(chunk, dst, pair):
                    return
                if to_bridge and self._needle is not None and self._swallow(chunk, dst, pair):
                    return
                dst.sendall(chunk)
        except OSError:
            pass
        self._close(pair)

    def _cut(self, chunk: bytes, dst: socket.socket, pair: tuple[socket.socket, ...]) -> bool:
        at = _cut_point(chunk)
        with self._cond:  # both directions may race for one armed cut
            if at is None or not self._armed.is_set():
                return False
            self._armed.clear()
        with contextlib.suppress(OSError):
            dst.sendall(chunk[:at])
        self._close(pair)
        with self._cond:
            self.cuts += 1
            self._cond.notify_all()
        return True

    def _swallow(self, chunk: bytes, dst: socket.socket, pair: tuple[socket.socket, ...]) -> bool:
        with self._cond:
            at = chunk.find(self._needle) if self._needle is not None else -1
            if at < 0:
                return False
            self._needle = None
        with contextlib.suppress(OSError):  # the lines before it arrive; it and the rest do not
            dst.sendall(chunk[: chunk.rfind(b"\n", 0, at) + 1])
        self._close(pair)
        with self._cond:
            self.swallowed += 1
            self._cond.notify_all()
        return True

    @staticmethod
    def _close(pair: tuple[socket.socket, ...]) -> None:
        for sock in pair:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                sock.close()


class Gate:
    """Turns of one OpenCode process pass while it is open; ``hold`` drains and closes it."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._active = 0
        self._held = False

    @contextlib.contextmanager
    def turn(self) -> Iterator[None]:
        with self._cond:
            self._cond.wait_for(lambda: not self._held)
            self._active += 1
        try:
            yield
        finally:
            with self._cond:
                self._active -= 1
                self._cond.notify_all()

    def hold(self, timeout: float) -> bool:
        with self._cond:
            self._held = True
            return self._cond.wait_for(lambda: self._active == 0, timeout)

    def release(self) -> None:
        with self._cond:
            self._held = False
            self._cond.notify_all()
