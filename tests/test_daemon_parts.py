"""Faults of the parts (issue 11): OpenCode's DB locked, deleted, replaced by a corrupt file or
unreadable; the daemon's store locked or full; the socket directory removed. The loop says what
is wrong once, keeps going, recovers by itself when the part is back, and never sends twice."""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import shutil
import socket
import sqlite3
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from daemon_fakes import Harness, disconnect

from opencode_autoretry.daemon import control
from opencode_autoretry.daemon.intake.bridges import BridgeConnected, BridgeServer
from opencode_autoretry.daemon.loop import Loop
from opencode_autoretry.daemon.parts import OPENCODE_DB, SOCKET, STORE
from opencode_autoretry.opencode.db import OpenCodeDB
from opencode_autoretry.opencode.dbtypes import DbUnreadable
from opencode_autoretry.store.database import Store, StoreView

WAIT = 5.0


class FlakyStore(Store):
    """The daemon's store with a switch: every write raises like a full disk while ``broken``."""

    broken: str | None = None
    broken_sent: bool = False

    def _write(self, sql: str, params: tuple) -> int:
        if self.broken:
            raise sqlite3.OperationalError(self.broken)
        return super()._write(sql, params)

    def mark_sent(self, injection_id, at) -> None:
        if self.broken_sent:
            raise sqlite3.OperationalError("database or disk is full")
        super().mark_sent(injection_id, at)


class FlakyDB(OpenCodeDB):
    """OpenCode's DB whose every read fails while ``failing`` says why: "database is locked"
    (another process holds it; in WAL mode that takes an exclusive-mode writer, which cannot
    start while other connections are open, so the error is injected at the read)."""

    failing: str | None = None

    def _rows(self, sql, params=()):
        if FlakyDB.failing:
            raise DbUnreadable(f"cannot read {self.path}: {FlakyDB.failing}")
        return super()._rows(sql, params)


class Opener:
    """OpenCode's DB opened with a short busy timeout, or failing like a read-only mount."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.read_only_fs = False

    def __call__(self) -> OpenCodeDB:
        if self.read_only_fs:
            raise DbUnreadable(f"cannot open {self.path}: attempt to write a readonly database")
        return FlakyDB.open(self.path, timeout=0.05)


@pytest.fixture(autouse=True)
def _reads_work():
    FlakyDB.failing = None
    yield
    FlakyDB.failing = None


def harness(tmp_path: Path) -> tuple[Harness, Opener]:
    h = Harness(tmp_path)
    h.store.close()
    h.store = FlakyStore.open(h.settings.store)
    opener = Opener(h.settings.opencode_db)
    h.loop = Loop(h.config, h.store, h.bridge, opener, h.timers, h.clock,
                  rand=lambda: 0.0, pid=999)
    h.loop.start(h.clock.now())
    h.hello()
    h.advance(1)  # the first tick opens OpenCode's DB
    return h, opener


def ended_blank(h: Harness) -> str:
    """A session whose reply came back blank; its idle has not reached the loop yet."""
    sid, user = h.busy_turn()
    h.blank_step(sid, user)
    return sid


@contextlib.contextmanager
def store_locked(path: Path) -> Iterator[None]:
    """Another process holds the store in a write transaction."""
    conn = sqlite3.connect(str(path), isolation_level=None)
    conn.execute("BEGIN EXCLUSIVE")
    try:
        yield
    finally:
        conn.rollback()
        conn.close()


def restore(h: Harness) -> None:
    """OpenCode writes its DB again at the same path (a fresh copy of what it holds open)."""
    fresh = h.settings.opencode_db.with_name("fresh.db")
    target = sqlite3.connect(str(fresh))
    h.rows.conn.backup(target)
    target.close()
    os.replace(fresh, h.settings.opencode_db)


def warnings(caplog: pytest.LogCaptureFixture, needle: str) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.levelno == logging.WARNING and needle in r.getMessage()]


def hold(h: Harness, seconds: int) -> None:
    for _ in range(seconds):
        h.advance(1)


def assert_recovered_once(h: Harness, sid: str) -> None:
    assert [p.session_id for p in h.prompts()] == [sid]
    h.advance(120)
    assert len(h.prompts()) == 1 and len(h.store.injections(sid)) == 1


@pytest.mark.parametrize("hold_s", [1, 10])  # the scenario is 10 s; the path is the same
def test_opencode_db_locked_is_said_once_and_recovered(tmp_path, caplog, hold_s):
    h, _ = harness(tmp_path)
    sid = ended_blank(h)
    FlakyDB.failing = "database is locked"
    try:
        h.idle(sid)  # the turn ends, but its rows cannot be read
        hold(h, hold_s)
        assert h.prompts() == []
        assert "locked" in h.loop.parts.down(OPENCODE_DB).reason
        assert "locked" in control.heartbeat_info(h.loop)["parts"][OPENCODE_DB]["problem"]
    finally:
        FlakyDB.failing = None
    h.advance(1)
    assert h.loop.parts.down(OPENCODE_DB) is None
    assert len(warnings(caplog, "is not usable")) == 1
    assert len(warnings(caplog, "is back after")) == 1
    assert_recovered_once(h, sid)


def test_opencode_db_deleted_then_written_again(tmp_path, caplog):
    h, _ = harness(tmp_path)
    sid = ended_blank(h)
    h.settings.opencode_db.unlink()  # OpenCode keeps its open file; the path is gone
    h.advance(1)
    assert "not found" in h.loop.parts.down(OPENCODE_DB).reason
    h.idle(sid)
    h.advance(3)
    assert h.prompts() == []
    restore(h)
    h.advance(1)
    assert h.loop.parts.down(OPENCODE_DB) is None
    assert_recovered_once(h, sid)


def test_opencode_db_replaced_by_a_corrupt_file(tmp_path, caplog):
    h, _ = harness(tmp_path)
    sid = ended_blank(h)
    saved = h.settings.opencode_db.with_name("saved.db")
    target = sqlite3.connect(str(saved))
    h.rows.conn.backup(target)
    target.close()
    h.rows.conn.close()  # OpenCode stopped ...
    for suffix in ("-wal", "-shm"):  # ... and a broken copy arrives without a -wal of its own
        h.settings.opencode_db.with_name(h.settings.opencode_db.name + suffix).unlink(
            missing_ok=True)
    garbage = h.settings.opencode_db.with_name("garbage.db")
    garbage.write_bytes(b"this is not a database\n" * 512)
    os.replace(garbage, h.settings.opencode_db)
    h.advance(1)
    h.idle(sid)
    h.advance(2)
    assert h.prompts() == []
    assert "not a database" in h.loop.parts.down(OPENCODE_DB).reason
    os.replace(saved, h.settings.opencode_db)
    h.advance(1)
    assert_recovered_once(h, sid)
    assert len(warnings(caplog, "is not usable")) == 1


def test_opencode_db_on_a_read_only_filesystem(tmp_path):
    h, opener = harness(tmp_path)
    sid = ended_blank(h)
    opener.read_only_fs = True
    h.settings.opencode_db.unlink()  # remounted: the open connection is gone with it
    restore(h)
    h.advance(1)
    h.idle(sid)
    h.advance(2)
    assert "readonly" in h.loop.parts.down(OPENCODE_DB).reason
    assert h.prompts() == []
    opener.read_only_fs = False
    h.advance(1)
    assert_recovered_once(h, sid)


@pytest.mark.parametrize("error", ["database or disk is full", "database is locked",
                                   "database disk image is malformed"])
def test_store_failing_is_said_once_and_recovered(tmp_path, caplog, error):
    h, _ = harness(tmp_path)
    sid = ended_blank(h)
    h.store.broken = error
    h.idle(sid)  # the decision cannot be stored: nothing may be sent
    hold(h, 3)
    assert h.prompts() == [] and h.store.decisions(sid) == []
    assert error in h.loop.parts.down(STORE).reason
    h.store.broken = None
    h.advance(1)
    assert h.loop.parts.down(STORE) is None
    assert len(warnings(caplog, "is not usable")) == 1
    assert_recovered_once(h, sid)


def test_store_locked_by_another_process(tmp_path):
    h, _ = harness(tmp_path)
    h.store._conn.execute("PRAGMA busy_timeout = 50")  # noqa: SLF001  (5 s in the daemon)
    sid = ended_blank(h)
    with store_locked(h.settings.store):
        h.idle(sid)
        hold(h, 2)
        assert h.prompts() == []
        assert "locked" in h.loop.parts.down(STORE).reason
    h.advance(1)
    assert_recovered_once(h, sid)


def test_store_failing_between_intent_and_send_never_sends_twice(tmp_path):
    h, _ = harness(tmp_path)
    sid, user = h.busy_turn()
    h.failed_step(sid, user)
    h.error_then_idle(sid, disconnect())  # a retry intent, due in 5 s
    h.store.broken_sent = True
    h.advance(6)
    assert h.prompts() == []  # not marked sent: not sent
    h.store.broken_sent = False
    h.advance(1)
    assert_recovered_once(h, sid)


def connected(path: Path, deadline: float) -> socket.socket:
    """A client connected to ``path``: the socket file exists from ``bind`` on, a moment
    before ``listen`` (a connect in between is refused, found in CI), so it tries again."""
    while True:
        client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        client.settimeout(WAIT)
        try:
            client.connect(str(path))
            return client
        except ConnectionRefusedError:
            client.close()
            assert time.monotonic() < deadline, "the re-created socket never listened"
            time.sleep(0.05)


def test_socket_directory_removed_while_running_is_listened_on_again():
    directory = Path(tempfile.mkdtemp(prefix="ar-p-", dir="/tmp"))
    inbox: queue.Queue = queue.Queue()
    server = BridgeServer(directory / "run" / "daemon.sock", inbox).start()
    try:
        shutil.rmtree(directory / "run")
        deadline = time.monotonic() + WAIT
        while not server.path.exists():  # the accept thread notices within its 0.2 s timeout
            assert time.monotonic() < deadline, "the socket was not re-created"
            time.sleep(0.05)
        assert (server.path.parent.stat().st_mode & 0o777) == 0o700
        client = connected(server.path, deadline)
        client.sendall(b'{"v": 1, "type": "hello", "pid": 7, "directory": "/p"}\n')
        item = inbox.get(timeout=WAIT)
        assert isinstance(item, BridgeConnected) and item.hello.pid == 7
        client.close()
        assert server._parts.failures == 1 and server._parts.recoveries == 1  # noqa: SLF001
        assert server._parts.down(SOCKET) is None  # noqa: SLF001
    finally:
        server.stop()
        shutil.rmtree(directory, ignore_errors=True)


def test_status_says_which_part_is_down(tmp_path):
    h, _ = harness(tmp_path)
    sid = ended_blank(h)
    FlakyDB.failing = "database is locked"
    h.idle(sid)
    h.loop.beat(h.clock.now())
    view = StoreView.open(h.settings.store)
    try:
        report = control.status_report(view, h.clock.now())
    finally:
        view.close()
    text = control.render_status(report)
    assert "problem: OpenCode's DB: cannot read" in text and "database is locked" in text
    FlakyDB.failing = None
    h.advance(1)
    h.loop.beat(h.clock.now())
    view = StoreView.open(h.settings.store)
    try:
        assert "problem:" not in control.render_status(control.status_report(view, h.clock.now()))
    finally:
        view.close()
