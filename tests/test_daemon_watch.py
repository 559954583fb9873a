"""The -wal watch: inotify polled by the tailer's own thread, and the watchdog fallback."""

from __future__ import annotations

import ctypes
import errno
import os
import queue
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from watch_helpers import QUIET_S, WAIT_S, Sleeper, Writer, fds_to, linux, read_ids

from opencode_autoretry.daemon.intake import inotify, watch_fallback
from opencode_autoretry.daemon.intake.commit_gate import CommitProbe
from opencode_autoretry.daemon.intake.inotify import (
    IN_IGNORED,
    IN_MODIFY,
    IN_Q_OVERFLOW,
    Inotify,
    InotifyEvent,
)
from opencode_autoretry.daemon.intake.sources import DbTailer
from opencode_autoretry.daemon.intake.wakeup import Wakeup
from opencode_autoretry.daemon.intake.watch import InotifySource, WalWatcher
from opencode_autoretry.opencode.db import OpenCodeDB

# -- inotify, real, in a tmp dir -----------------------------------------------------------


@pytest.fixture
def watched(tmp_path: Path) -> Iterator[tuple[WalWatcher, Wakeup]]:
    """A started watch on ``tmp_path / "x.db"`` and the wakeup its writes wake."""
    wakeup = Wakeup()
    watcher = WalWatcher(tmp_path / "x.db", wakeup)
    assert watcher.start()
    try:
        yield watcher, wakeup
    finally:
        watcher.stop()
        wakeup.close()


@linux
def test_a_write_to_the_wal_wakes_the_sleeper(tmp_path, watched):
    watcher, wakeup = watched
    assert watcher.kind == "inotify"
    sleeper = Sleeper(wakeup, WAIT_S * 6)
    (tmp_path / "x.db-wal").write_bytes(b"frame")
    assert sleeper.returned.wait(WAIT_S), "no wake-up within 10 s of a -wal write"
    sleeper = Sleeper(wakeup, WAIT_S * 6)
    with (tmp_path / "x.db").open("ab") as db:  # the DB itself (a checkpoint)
        db.write(b"page")
    assert sleeper.returned.wait(WAIT_S), "no wake-up within 10 s of a DB write"


@linux
def test_a_write_to_another_file_does_not_wake_it(tmp_path, watched):
    _, wakeup = watched
    sleeper = Sleeper(wakeup, QUIET_S)
    for name in ("x.db-shm", "x.db-journal", "other.db-wal", "x.dbx"):
        (tmp_path / name).write_bytes(b"not ours")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "x.db-wal").write_bytes(b"not this directory")
    assert sleeper.returned.wait(WAIT_S)
    assert sleeper.took >= QUIET_S - 0.01, "woken by a write of another name"
    sleeper = Sleeper(wakeup, WAIT_S * 6)
    (tmp_path / "x.db-wal").write_bytes(b"frame")  # the watch still answers its names
    assert sleeper.returned.wait(WAIT_S)


@linux
def test_a_wal_renamed_into_place_wakes_it(tmp_path, watched):
    _, wakeup = watched
    (tmp_path / "new").write_bytes(b"a replaced DB")
    sleeper = Sleeper(wakeup, WAIT_S * 6)
    os.replace(tmp_path / "new", tmp_path / "x.db")
    assert sleeper.returned.wait(WAIT_S)


@linux
def test_every_commit_is_read_without_a_later_write(tmp_path):
    db = tmp_path / "opencode.db"
    writer = Writer(db, synchronous="FULL")
    inbox: queue.Queue[object] = queue.Queue()
    tailer = DbTailer(lambda: OpenCodeDB.open(db), inbox, 60)
    watcher = WalWatcher(db, tailer.wakeup)
    threads = threading.active_count()
    tailer.prime()
    assert watcher.start()
    tailer.start()
    try:
        assert threading.active_count() == threads + 1  # the tailer's; no watcher thread
        for _ in range(15):  # each one read before the next is written (the poll is 60 s)
            read_ids(inbox, writer.send("user"))
        shm_fds, wal_fds = fds_to(f"{db}-shm"), fds_to(f"{db}-wal")  # SQLite's, the probe's
        watcher.stop()
        assert len(shm_fds - fds_to(f"{db}-shm")) == 1
        assert len(wal_fds - fds_to(f"{db}-wal")) == 1
    finally:
        watcher.stop()
        tailer.stop()
        writer.close()


@linux
def test_a_read_waits_for_the_writer_to_finish(tmp_path):
    db = tmp_path / "opencode.db"
    writer = Writer(db)
    inbox: queue.Queue[object] = queue.Queue()
    tailer = DbTailer(lambda: OpenCodeDB.open(db), inbox, 60)
    watcher = WalWatcher(db, tailer.wakeup)
    tailer.prime()
    assert watcher.start()
    tailer.start()
    try:
        held = writer.send("begin")  # a transaction under way: its rows are not readable
        time.sleep(0.2)
        assert writer.send("commit") == "committed"
        assert held in read_ids(inbox, held)
    finally:
        watcher.stop()
        tailer.stop()
        writer.close()


@linux
def test_stop_returns_promptly_and_closes_every_fd(tmp_path):
    before_inotify, before_pipes = fds_to("anon_inode:inotify"), fds_to("pipe:")
    inbox: queue.Queue[object] = queue.Queue()
    tailer = DbTailer(lambda: OpenCodeDB.open(tmp_path / "none.db"), inbox, 60)
    watcher = WalWatcher(tmp_path / "opencode.db", tailer.wakeup)
    tailer.start()
    assert watcher.start()
    time.sleep(0.1)  # the tailer's thread in its poll, on the inotify fd
    assert len(fds_to("anon_inode:inotify") - before_inotify) == 1
    assert len(fds_to("pipe:") - before_pipes) == 2
    started = time.monotonic()
    watcher.stop()
    assert time.monotonic() - started < 1.0
    assert fds_to("anon_inode:inotify") - before_inotify == set()
    started = time.monotonic()
    tailer.stop()
    assert time.monotonic() - started < 1.0
    assert fds_to("pipe:") - before_pipes == set()


@linux
def test_a_removed_directory_is_polled_then_watched_again(tmp_path):
    directory = tmp_path / "opencode"
    directory.mkdir()
    wakeup = Wakeup()
    source = InotifySource.open(directory / "x.db", CommitProbe(directory / "x.db"))
    assert source is not None and source.armed
    wakeup.attach(source)
    try:
        sleeper = Sleeper(wakeup, WAIT_S * 6)
        shutil.rmtree(directory)
        assert sleeper.returned.wait(WAIT_S), "the directory's removal did not wake it"
        assert not source.armed
        wakeup.wait(0.05)  # a timeout while the directory is missing: still unarmed
        assert not source.armed
        directory.mkdir()
        wakeup.wait(0.05)  # the poll's timeout re-arms
        assert source.armed
        sleeper = Sleeper(wakeup, WAIT_S * 6)
        (directory / "x.db-wal").write_bytes(b"frame")
        assert sleeper.returned.wait(WAIT_S), "not watched again after the directory came back"
    finally:
        assert wakeup.detach(source)
        source.close()
        wakeup.close()


@linux
def test_a_moved_directory_gives_up_its_watch(tmp_path):
    directory = tmp_path / "opencode"
    directory.mkdir()
    wakeup = Wakeup()
    source = InotifySource.open(directory / "x.db", CommitProbe(directory / "x.db"))
    assert source is not None
    wakeup.attach(source)
    try:
        sleeper = Sleeper(wakeup, WAIT_S * 6)
        directory.rename(tmp_path / "moved")
        assert sleeper.returned.wait(WAIT_S)
        assert not source.armed
        sleeper = Sleeper(wakeup, QUIET_S)
        (tmp_path / "moved" / "x.db-wal").write_bytes(b"not the DB's directory any more")
        sleeper.join()
        assert sleeper.took >= QUIET_S - 0.01
    finally:
        assert wakeup.detach(source)
        source.close()
        wakeup.close()


class FakeInotify:
    """Queued events for ``InotifySource``'s filter, without a kernel."""

    def __init__(self, events: list[InotifyEvent]) -> None:
        self.events = events

    def add_watch(self, path: bytes, mask: int) -> int:
        return 1

    def read_events(self) -> list[InotifyEvent]:
        events, self.events = self.events, []
        return events


def test_a_queue_overflow_calls_for_a_read_and_a_stale_watch_does_not(tmp_path):
    fake = FakeInotify([InotifyEvent(9, IN_MODIFY, b"x.db-wal"), InotifyEvent(9, IN_IGNORED, b"")])
    probe = CommitProbe(tmp_path / "x.db")  # no -shm file: nothing in flight
    source = InotifySource(fake, tmp_path / "x.db", probe)  # type: ignore[arg-type]
    source.arm()
    assert not source.on_readable()  # wd 9 is not ours (1)
    fake.events = [InotifyEvent(-1, IN_Q_OVERFLOW, b"")]
    assert source.on_readable()
    fake.events = [InotifyEvent(1, IN_MODIFY, b"x.db-wal"), InotifyEvent(1, IN_MODIFY, b"y")]
    assert source.on_readable()


# -- where inotify is not available ------------------------------------------------------------


def test_no_inotify_falls_back_to_watchdog(tmp_path, monkeypatch):
    monkeypatch.setattr(inotify, "_load_libc", lambda: None)
    wakeup = Wakeup()
    watcher = WalWatcher(tmp_path / "x.db", wakeup)
    assert watcher.start()
    assert watcher.kind == "watchdog"
    try:
        sleeper = Sleeper(wakeup, WAIT_S * 6)
        (tmp_path / "x.db-wal").write_bytes(b"frame")
        assert sleeper.returned.wait(WAIT_S), "watchdog's handler did not wake it"
    finally:
        watcher.stop()
        wakeup.close()
    assert watcher.kind is None


class FailingLibc:
    """inotify_init1 failing as at the per-user limit of instances."""

    def inotify_init1(self, flags: int) -> int:
        ctypes.set_errno(errno.EMFILE)
        return -1


@linux
def test_inotify_init_failing_falls_back_to_watchdog(tmp_path, monkeypatch):
    monkeypatch.setattr(inotify, "_load_libc", FailingLibc)
    assert Inotify.open() is None
    watcher = WalWatcher(tmp_path / "x.db", Wakeup())
    assert watcher.start()
    try:
        assert watcher.kind == "watchdog"
    finally:
        watcher.stop()


def test_no_watch_at_all_leaves_the_poll(tmp_path, monkeypatch):
    monkeypatch.setattr(inotify, "_load_libc", lambda: None)

    def refused(self) -> None:
        raise OSError(errno.EMFILE, "inotify instance limit reached")
    monkeypatch.setattr(watch_fallback.Observer, "start", refused)
    watcher = WalWatcher(tmp_path / "x.db", Wakeup())
    assert not watcher.start()
    assert watcher.kind is None
    watcher.stop()


def test_a_missing_directory_is_not_watched(tmp_path):
    watcher = WalWatcher(tmp_path / "nope" / "x.db", Wakeup())
    assert not watcher.start()
    assert watcher.kind is None


@linux
def test_a_new_shm_file_is_read_in_place_of_the_old_one(tmp_path):
    shm = tmp_path / "x.db-shm"
    shm.write_bytes(b"\0" * 128)
    (tmp_path / "x.db-wal").write_bytes(b"")
    probe = CommitProbe(tmp_path / "x.db")
    wakeup = Wakeup()
    source = InotifySource.open(tmp_path / "x.db", probe)
    assert source is not None
    wakeup.attach(source)
    try:
        assert not probe.look()[1]
        assert len(fds_to(str(shm))) == 1
        (tmp_path / "new").write_bytes(b"\0" * 128)
        os.replace(tmp_path / "new", shm)
        wakeup.wait(QUIET_S)  # the tailer's wait: the events are read (no read is due)
        assert fds_to(str(shm)) == set()  # the old file's fd let go
        assert not probe.look()[1]
        assert len(fds_to(str(shm))) == 1
    finally:
        assert wakeup.detach(source)
        source.close()
        probe.close()
        wakeup.close()
