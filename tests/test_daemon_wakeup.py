"""inotify through libc (event parsing, EINTR) and the Wakeup the tailer's thread sleeps on."""

from __future__ import annotations

import ctypes
import errno
import os
import struct
import time

import pytest
from watch_helpers import WAIT_S, Sleeper, fds_to

from opencode_autoretry.daemon.intake import inotify
from opencode_autoretry.daemon.intake.inotify import (
    IN_DELETE_SELF,
    IN_MODIFY,
    InotifyEvent,
    parse_events,
)
from opencode_autoretry.daemon.intake.wakeup import Wakeup


def raw_event(wd: int, mask: int, name: bytes, padded_to: int) -> bytes:
    field = name.ljust(padded_to, b"\0") if padded_to else b""
    return struct.pack("iIII", wd, mask, 0, len(field)) + field


# -- parsing -------------------------------------------------------------------------------


def test_parse_events_of_variable_length_names():
    buffer = (raw_event(1, IN_MODIFY, b"opencode.db-wal", 16)  # 15 bytes + one NUL
              + raw_event(1, IN_MODIFY, b"a", 16)  # padded to 16
              + raw_event(2, IN_DELETE_SELF, b"", 0)  # about the directory: no name
              + raw_event(1, IN_MODIFY, "é" .encode() * 100, 208))
    assert parse_events(buffer) == [
        InotifyEvent(1, IN_MODIFY, b"opencode.db-wal"),
        InotifyEvent(1, IN_MODIFY, b"a"),
        InotifyEvent(2, IN_DELETE_SELF, b""),
        InotifyEvent(1, IN_MODIFY, "é".encode() * 100),
    ]


def test_parse_events_ignores_a_cut_header():
    assert parse_events(raw_event(3, IN_MODIFY, b"x", 16) + b"\1\0\0") == [
        InotifyEvent(3, IN_MODIFY, b"x")]
    assert parse_events(b"") == []


# -- libc calls ----------------------------------------------------------------------------


def failing_then(result: int, *errnos: int):
    pending = list(errnos)

    def call() -> int:
        if pending:
            ctypes.set_errno(pending.pop(0))
            return -1
        return result
    return call


def test_a_libc_call_is_retried_on_eintr():
    assert inotify._checked(failing_then(7, errno.EINTR, errno.EINTR)) == 7


def test_a_libc_call_failing_raises_its_errno():
    with pytest.raises(OSError) as raised:
        inotify._checked(failing_then(7, errno.ENOSPC))
    assert raised.value.errno == errno.ENOSPC


# -- Wakeup ----------------------------------------------------------------------------------


def test_wakeup_wake_before_wait_returns_at_once_and_coalesces():
    wakeup = Wakeup()
    try:
        wakeup.wake()
        wakeup.wake()
        started = time.monotonic()
        wakeup.wait(WAIT_S)
        assert time.monotonic() - started < 1.0
        started = time.monotonic()
        wakeup.wait(0.2)  # both wakes answered by one return
        assert time.monotonic() - started >= 0.19
    finally:
        wakeup.close()


def test_wakeup_wakes_a_sleeping_thread_and_close_ends_waits():
    wakeup = Wakeup()
    sleeper = Sleeper(wakeup, WAIT_S * 6)
    wakeup.wake()
    assert sleeper.returned.wait(WAIT_S)
    sleeper = Sleeper(wakeup, WAIT_S * 6)
    wakeup.close()
    assert sleeper.returned.wait(WAIT_S), "close() did not end a wait"
    started = time.monotonic()
    wakeup.wait(WAIT_S)
    wakeup.wake()  # after close: nothing to write to, no error
    assert time.monotonic() - started < 1.0


def test_wakeup_close_closes_its_pipe():
    before = fds_to("pipe:")
    wakeup = Wakeup()
    wakeup.wake()
    assert len(fds_to("pipe:") - before) == 2
    wakeup.close()
    assert fds_to("pipe:") - before == set()


class RetryingSource:
    """A readable fd whose owner asks for a retry instead (the commit gate waiting)."""

    def __init__(self, retry: float | None) -> None:
        self.read_end, self.write_end = os.pipe()
        os.write(self.write_end, b"queued events")
        self.retry = retry
        self.readable_calls = 0
        self.timeout_calls = 0

    def fileno(self) -> int:
        return self.read_end

    def on_readable(self) -> bool:
        self.readable_calls += 1
        return True

    def retry_in(self) -> float | None:
        return self.retry

    def on_timeout(self) -> bool:
        self.timeout_calls += 1
        return True

    def close(self) -> None:
        os.close(self.read_end)
        os.close(self.write_end)


def test_a_source_waiting_to_retry_is_not_polled_until_its_retry():
    wakeup = Wakeup()
    source = RetryingSource(0.05)
    wakeup.attach(source)
    try:
        started = time.monotonic()
        wakeup.wait(WAIT_S)
        took = time.monotonic() - started
        assert source.readable_calls == 0 and source.timeout_calls == 1
        assert 0.045 <= took < 1.0
        source.retry = None  # not waiting: its readable fd answers at once
        started = time.monotonic()
        wakeup.wait(WAIT_S)
        assert source.readable_calls == 1 and time.monotonic() - started < 1.0
    finally:
        assert wakeup.detach(source)
        source.close()
        wakeup.close()
