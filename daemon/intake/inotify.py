"""Linux inotify through libc (ctypes): one non-blocking instance whose fd a thread can poll.

watchdog's observer hands every event through three threads of its own before it reaches
whoever waits for it; the DB tailer only needs to know that a name in one directory was
written, so it polls this fd itself (``wakeup.Wakeup``) and reads what is queued when it
wakes. Everything here is Linux-only; ``Inotify.open`` returns None wherever it is missing.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)

# <sys/inotify.h>
IN_MODIFY = 0x00000002
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_DELETE_SELF = 0x00000400
IN_MOVE_SELF = 0x00000800
IN_Q_OVERFLOW = 0x00004000
IN_IGNORED = 0x00008000
IN_ONLYDIR = 0x01000000
# the same values as O_NONBLOCK and O_CLOEXEC (getattr: os has neither on Windows)
IN_NONBLOCK: int = getattr(os, "O_NONBLOCK", 0o4000)
IN_CLOEXEC: int = getattr(os, "O_CLOEXEC", 0o2000000)

_HEADER = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len; then len bytes
MAX_EVENT = _HEADER.size + 256  # a header and the longest name, NUL-padded
READ_SIZE = 4096  # ~100 events of short names; more are read by the next call


@dataclass(frozen=True, slots=True)
class InotifyEvent:
    wd: int
    mask: int
    name: bytes  # b"" for an event about the watched directory itself


def parse_events(buffer: bytes) -> list[InotifyEvent]:
    """The events of one ``read``: each a fixed header, then ``len`` bytes of NUL-padded name."""
    events: list[InotifyEvent] = []
    offset = 0
    while offset + _HEADER.size <= len(buffer):
        wd, mask, _cookie, length = _HEADER.unpack_from(buffer, offset)
        start = offset + _HEADER.size
        name = buffer[start:start + length].split(b"\0", 1)[0]
        events.append(InotifyEvent(wd, mask, name))
        offset = start + length
    return events


def _load_libc() -> ctypes.CDLL | None:
    """libc with inotify, or None (not Linux, or a libc without it)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None
    if not all(hasattr(libc, name) for name in
               ("inotify_init1", "inotify_add_watch", "inotify_rm_watch")):
        return None
    libc.inotify_init1.argtypes = [ctypes.c_int]
    libc.inotify_init1.restype = ctypes.c_int
    libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
    libc.inotify_add_watch.restype = ctypes.c_int
    libc.inotify_rm_watch.argtypes = [ctypes.c_int, ctypes.c_int]
    libc.inotify_rm_watch.restype = ctypes.c_int
    return libc


def _checked(call: Callable[[], int]) -> int:
    """A libc call's result, retried on EINTR; OSError with its errno on any other failure."""
    while True:
        result = call()
        if result >= 0:
            return result
        code = ctypes.get_errno()
        if code != errno.EINTR:
            raise OSError(code, os.strerror(code))


class Inotify:
    """One inotify instance (non-blocking, close-on-exec); not thread-safe: one owner polls it."""

    def __init__(self, libc: ctypes.CDLL, fd: int) -> None:
        self._libc = libc
        self._fd = fd

    @classmethod
    def open(cls) -> Inotify | None:
        """None when inotify is not available here or ``inotify_init1`` fails (the per-user
        limit of instances, for one); the caller falls back to something else."""
        libc = _load_libc()
        if libc is None:
            return None
        try:
            fd = _checked(lambda: libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC))
        except OSError as exc:
            log.info("inotify is not available: %s", exc)
            return None
        return cls(libc, fd)

    def fileno(self) -> int:
        return self._fd

    @property
    def closed(self) -> bool:
        return self._fd < 0

    def add_watch(self, path: bytes, mask: int) -> int:
        """The watch descriptor; OSError (ENOENT, ENOTDIR with IN_ONLYDIR, ENOSPC: the
        per-user limit of watches) when it cannot be added."""
        return _checked(lambda: self._libc.inotify_add_watch(self._fd, path, mask))

    def rm_watch(self, wd: int) -> None:
        """Remove a watch; one the kernel already removed (EINVAL) is not an error."""
        try:
            _checked(lambda: self._libc.inotify_rm_watch(self._fd, wd))
        except OSError as exc:
            if exc.errno != errno.EINVAL:
                raise

    def read_events(self) -> list[InotifyEvent]:
        """Every event queued now, [] when none (the fd is non-blocking; EINTR is retried)."""
        events: list[InotifyEvent] = []
        while True:
            try:
                buffer = os.read(self._fd, READ_SIZE)
            except BlockingIOError:
                return events
            events.extend(parse_events(buffer))
            if len(buffer) <= READ_SIZE - MAX_EVENT:  # any further event would have fit: none
                return events

    def close(self) -> None:
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            os.close(fd)
