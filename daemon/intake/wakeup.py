"""What the DB tailer's thread sleeps on: ``wake()`` from any thread, or a watched fd.

A self-pipe carries ``wake()`` (the tailer's ``stop``, the watchdog fallback's handler, tests);
a watcher may attach one more file descriptor (an inotify instance), which the sleeping thread
polls itself: a write to the DB then costs that one thread one wake-up, where a watchdog
observer passed it through three threads of its own first. The attached source is only ever
read by the sleeping thread; ``detach`` waits until that thread no longer polls it, so its
owner can then close the fd without another file taking its number under a poll.
"""

from __future__ import annotations

import contextlib
import math
import os
import select
import threading
import time
from typing import Protocol

RELEASE_S = 2.0  # how long detach/close wait for the sleeping thread to let go of an fd


class FdSource(Protocol):
    """A file descriptor whose readiness may call for a read (called in the sleeping thread)."""

    def fileno(self) -> int: ...

    def on_readable(self) -> bool:
        """Consume what is ready; True when the sleeper should return (a read is due)."""
        ...

    def retry_in(self) -> float | None:
        """Seconds until ``on_timeout`` wants to be called; None: only at the end of the wait.
        Meanwhile its fd is not polled (what it queues waits for ``on_timeout``)."""
        ...

    def on_timeout(self) -> bool:
        """A poll timed out (a retry, or the wait's end); True when a read is due now."""
        ...


class Wakeup:
    """A ``threading.Event``-like wait/wake for one sleeping thread, plus one attached fd."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._pipe: tuple[int, int] | None = None  # opened at first use, closed by close()
        self._closed = False
        self._source: FdSource | None = None
        self._waiting = False
        self._polled: FdSource | None = None  # the source the current wait polls

    def wake(self) -> None:
        """Make the current or next ``wait`` return (wake-ups before it coalesce, as an Event)."""
        with self._lock:
            self._poke()

    def attach(self, source: FdSource) -> None:
        with self._lock:
            self._source = source
            if self._waiting:  # a wait in progress polls without it: start it again
                self._poke()

    def detach(self, source: FdSource) -> bool:
        """Stop polling ``source``; once this returns True its callbacks no longer run and its
        fd may be closed. False (keep the fd open) if the sleeping thread did not let go."""
        with self._lock:
            if self._source is source:
                self._source = None
            if self._polled is source:
                self._poke()
            return self._lock.wait_for(lambda: self._polled is not source, RELEASE_S)

    def close(self) -> None:
        """Every later ``wait`` returns at once and ``wake`` does nothing; the pipe is closed
        once no wait uses it (left open if the sleeping thread does not let go in time)."""
        with self._lock:
            if self._waiting:
                self._poke()
            self._closed = True
            if not self._lock.wait_for(lambda: not self._waiting, RELEASE_S):
                return
            pipe, self._pipe = self._pipe, None
        if pipe is not None:
            os.close(pipe[0])
            os.close(pipe[1])

    def wait(self, timeout: float) -> None:
        """Until ``wake()``, the attached source asks for a read, or ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            begun = self._begin()
            if begun is None:
                return
            try:
                done = self._poll_once(begun[0], begun[1], deadline)
            finally:
                self._end()
            if done:
                return

    def _poke(self) -> None:
        """(Lock held.) One byte in the pipe; a full pipe already wakes whoever polls it."""
        if self._closed:
            return
        if self._pipe is None:
            self._pipe = _nonblocking_pipe()
        with contextlib.suppress(BlockingIOError):
            os.write(self._pipe[1], b"\0")

    def _begin(self) -> tuple[int, FdSource | None] | None:
        """The pipe's read end and the source to poll this round; None once closed."""
        with self._lock:
            if self._closed:
                return None
            if self._pipe is None:
                self._pipe = _nonblocking_pipe()
            self._waiting, self._polled = True, self._source
            return self._pipe[0], self._polled

    def _end(self) -> None:
        with self._lock:
            self._waiting, self._polled = False, None
            self._lock.notify_all()

    def _poll_once(self, pipe: int, source: FdSource | None, deadline: float) -> bool:
        """One poll; True when ``wait`` should return, False to poll again (the source's
        events called for nothing yet, or its retry came before the wait's end)."""
        span = deadline - time.monotonic()
        retry = source.retry_in() if source is not None else None
        if retry is not None:
            span = min(span, retry)
        poller = select.poll()
        poller.register(pipe, select.POLLIN)
        if source is not None and retry is None:
            poller.register(source.fileno(), select.POLLIN)
        ready = {fd for fd, _ in poller.poll(max(math.ceil(span * 1000), 0))}
        if not ready:
            due = source is not None and source.on_timeout()
            return due or time.monotonic() >= deadline
        # A byte in the pipe is a wake(), or an attach/detach that wants the poll redone: both
        # return (at worst one spare read, never a late one). The source's events are consumed
        # either way, so that those already queued are answered by this one read.
        woken = pipe in ready
        if woken:
            _drain(pipe)
        due = source is not None and source.fileno() in ready and source.on_readable()
        return woken or due


def _nonblocking_pipe() -> tuple[int, int]:
    read_end, write_end = os.pipe()  # not inherited by children (PEP 446)
    os.set_blocking(read_end, False)
    os.set_blocking(write_end, False)
    return read_end, write_end


def _drain(fd: int) -> None:
    with contextlib.suppress(BlockingIOError):
        while os.read(fd, 4096):
            pass
