"""Producers (tailer, -wal watcher, timers) only enqueue; the CLI commands; a clean shutdown."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner
from daemon_fakes import Harness, drain
from opencode_rows import OpenCodeRows

from opencode_autoretry.cli.main import main
from opencode_autoretry.daemon.inbox import DbRows, Shutdown, TimerDue
from opencode_autoretry.daemon.intake.bridges import BridgeMessage
from opencode_autoretry.daemon.intake.sources import DbTailer
from opencode_autoretry.daemon.intake.wakeup import Wakeup
from opencode_autoretry.daemon.intake.watch import WalWatcher
from opencode_autoretry.daemon.scheduler import RetryScheduler
from opencode_autoretry.opencode.db import OpenCodeDB
from opencode_autoretry.plugin_bridge import protocol
from opencode_autoretry.store.database import Store

WAIT_S = 10.0


class CountingDB:
    """The real reader, counting how many rows each tail query returned."""

    def __init__(self, path: Path) -> None:
        self.db = OpenCodeDB.open(path)
        self.returned = 0

    def __getattr__(self, name: str):
        return getattr(self.db, name)

    def events_after(self, rowid: int, limit: int):
        raise AssertionError("the tailer read OpenCode's event table: the loop has no use for it")

    def messages_after(self, message_id, limit: int):
        rows = self.db.messages_after(message_id, limit)
        self.returned += len(rows)
        return rows


def test_tailer_reads_only_what_is_new(tmp_path):
    rows = OpenCodeRows(tmp_path / "opencode.db")
    sid = rows.session("old-history")
    for _ in range(50):
        rows.assistant(sid, rows.user(sid))
        rows.event(sid, "message.updated.1", {"sessionID": sid, "info": {}})
    rows.commit()
    reader = CountingDB(tmp_path / "opencode.db")
    inbox: queue.Queue[object] = queue.Queue()
    tailer = DbTailer(lambda: reader, inbox, poll_interval=60, batch=3)
    assert tailer.prime()
    assert tailer.read_new() is None and reader.returned == 0  # history is not re-read

    user = rows.user(sid, "new")
    rows.assistant(sid, user)
    rows.event(sid, "message.updated.1", {"sessionID": sid, "info": {"id": user}})
    rows.commit()
    item = tailer.read_new()
    assert isinstance(item, DbRows)
    assert [m.id for m in item.messages][0] == user and len(item.messages) == 2
    assert reader.returned == 2  # exactly the new rows (the event table is not read)
    assert drain(inbox) == [item]
    assert tailer.read_new() is None


def test_a_new_event_row_alone_enqueues_nothing(tmp_path):
    """The loop acts on new messages only: an event row (OpenCode's durable events) must not
    wake it with an empty item, and a message after it is still read."""
    rows = OpenCodeRows(tmp_path / "opencode.db")
    sid = rows.session("events")
    rows.commit()
    inbox: queue.Queue[object] = queue.Queue()
    tailer = DbTailer(lambda: OpenCodeDB.open(tmp_path / "opencode.db"), inbox, poll_interval=60)
    assert tailer.prime()
    rows.event(sid, "session.updated.1", {"sessionID": sid, "info": {}})
    rows.commit()
    assert tailer.read_new() is None and drain(inbox) == []
    user = rows.user(sid, "after the event")
    rows.commit()
    item = tailer.read_new()
    assert isinstance(item, DbRows) and [m.id for m in item.messages] == [user]


def test_tailer_waits_for_a_missing_db(tmp_path):
    inbox: queue.Queue[object] = queue.Queue()
    tailer = DbTailer(lambda: OpenCodeDB.open(tmp_path / "none.db"), inbox, poll_interval=60)
    assert not tailer.prime()
    assert tailer.read_new() is None


def test_wal_watcher_wakes_on_writes(tmp_path):
    rows = OpenCodeRows(tmp_path / "opencode.db")
    rows.commit()
    wakeup = Wakeup()
    watcher = WalWatcher(tmp_path / "opencode.db", wakeup)
    assert watcher.start()
    woke = threading.Event()
    sleeper = threading.Thread(target=lambda: (wakeup.wait(WAIT_S * 6), woke.set()), daemon=True)
    sleeper.start()
    try:
        rows.user(rows.session("x"))
        rows.commit()
        assert woke.wait(WAIT_S), "no wake-up within 10 s of a WAL write"
    finally:
        watcher.stop()
        wakeup.close()
        rows.close()


def test_wal_watcher_on_a_missing_directory(tmp_path):
    assert not WalWatcher(tmp_path / "nope" / "opencode.db", Wakeup()).start()


def test_tailer_thread_enqueues_after_a_wake(tmp_path):
    rows = OpenCodeRows(tmp_path / "opencode.db")
    rows.commit()
    inbox: queue.Queue[object] = queue.Queue()
    tailer = DbTailer(lambda: OpenCodeDB.open(tmp_path / "opencode.db"), inbox, 60)
    tailer.prime()
    tailer.start()
    try:
        rows.user(rows.session("y"))
        rows.commit()
        tailer.wake()
        item = inbox.get(timeout=WAIT_S)
        assert isinstance(item, DbRows) and len(item.messages) == 1
    finally:
        tailer.stop()


def test_scheduler_jobs_only_enqueue_timer_due():
    inbox: queue.Queue[object] = queue.Queue()
    timers = RetryScheduler(inbox)
    timers.start()
    try:
        now = datetime.now(tz=UTC)
        timers.arm(7, now + timedelta(milliseconds=50))
        timers.arm(8, now + timedelta(hours=1))
        timers.cancel(8)
        timers.cancel(99)  # unknown ids are fine
        assert inbox.get(timeout=WAIT_S) == TimerDue(7)
        timers.cancel(7)  # already fired: harmless
        assert drain(inbox) == []
    finally:
        timers.shutdown()


def test_loop_run_stops_on_shutdown_and_writes_a_last_heartbeat(tmp_path):
    h = Harness(tmp_path)
    inbox: queue.Queue[object] = queue.Queue()
    inbox.put(Shutdown("test"))
    h.loop.run(inbox)
    beat = h.store.heartbeat()
    assert beat is not None and beat.info["stopping"] is True


class ScriptedInbox(queue.Queue):
    """The items put in it, then a shutdown: ``run`` ends when the script is played."""

    def get(self, block=True, timeout=None):
        try:
            return super().get(block=False)
        except queue.Empty:
            if not block:
                raise
            return Shutdown("end of the script")


def test_a_tick_first_handles_what_is_queued_so_a_held_up_loop_sees_no_stall(tmp_path):
    """The loop was held up past stall_timeout while the session's progress sat in the
    inbox: the stall check must see that progress (soak, issue 11: a truncated turn once got
    a stall decision beside a second e2e worker)."""
    h = Harness(tmp_path)
    h.hello()
    sid, user = h.busy_turn()
    h.rows.assistant(sid, user, finish=None, text="", completed=False)
    h.rows.commit()
    h.clock.advance(h.settings.stall_timeout + 5)
    moved = protocol.Event(t=0, event={"type": "message.part.updated",
                                       "properties": {"sessionID": sid, "part": {}}})
    inbox = ScriptedInbox()
    inbox.put(TimerDue(999))  # handled first; then the tick is due, with the event still queued
    inbox.put(BridgeMessage("b1", moved, h.clock.now()))
    h.loop.run(inbox)
    assert h.bridge.of(protocol.Abort) == [] and h.store.decisions(sid) == []
    h.advance(h.settings.stall_timeout + 1)  # and a real stall is still one
    assert len(h.bridge.of(protocol.Abort)) == 1


def cli(tmp_path, *args):
    env = {"AUTORETRY_HOME": str(tmp_path), "OPENCODE_DB": str(tmp_path / "opencode.db"),
           "AUTORETRY_CONFIG": str(tmp_path / "none.toml")}
    return CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)


def test_on_off_and_status_commands(tmp_path):
    assert "autoretry off for all sessions" in cli(tmp_path, "off").output
    assert "autoretry off for session ses_a" in cli(tmp_path, "off", "--session", "ses_a").output
    report = json.loads(cli(tmp_path, "status", "--json").output)
    assert report["enabled"] is False and report["daemon"]["running"] is False
    assert report["switches"] == {"*": False, "ses_a": False}
    cli(tmp_path, "on")
    text = cli(tmp_path, "status").output
    assert text.startswith("autoretry is on\ndaemon: not running")
    assert "off for sessions: ses_a" in text


def test_status_shows_a_live_daemon(tmp_path):
    store = Store.open(tmp_path / "autoretry.db")
    store.beat(datetime.now(tz=UTC), 321, {"bridges": [{"pid": 5, "directory": "/p"}],
                                           "sessions": {"ses_a": {"status": "busy"}},
                                           "no_owner": ["ses_b"]})
    store.close()
    text = cli(tmp_path, "status").output
    assert "daemon: running (pid 321" in text
    assert "pid 5  /p" in text and "ses_a  busy" in text
    assert "no live owner (never injected): ses_b" in text


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_run_exits_0_on_signal(tmp_path, signum):
    env = {**os.environ, "AUTORETRY_HOME": str(tmp_path), "AUTORETRY_SOCKET":
           str(tmp_path / "d.sock"), "OPENCODE_DB": str(tmp_path / "opencode.db"),
           "AUTORETRY_CONFIG": str(tmp_path / "none.toml"), "AUTORETRY_TICK_INTERVAL": "0.1"}
    command = [sys.executable, "-m", "opencode_autoretry.cli", "run", "--foreground"]
    with subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True) as proc:
        try:
            for line in proc.stderr:  # bounded by the daemon's start-up line
                if "autoretry daemon" in line:
                    break
            proc.send_signal(signum)
            assert proc.wait(timeout=WAIT_S) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
    assert (tmp_path / "log" / "daemon.log").exists()
    assert not (tmp_path / "d.sock").exists()


def test_status_reads_a_store_whose_path_holds_uri_characters(tmp_path):
    # Issue 20: the unquoted URI cut the path at "?" / "#": status failed, a stray file appeared.
    home = tmp_path / "st?ate#dir"
    home.mkdir()
    store = Store.open(home / "autoretry.db")
    store.beat(datetime.now(tz=UTC), 321, {"bridges": [], "sessions": {}, "no_owner": []})
    store.close()
    before = sorted(p.name for p in tmp_path.iterdir())
    result = cli(home, "status")
    assert result.exit_code == 0, result.output
    assert "daemon: running (pid 321" in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no stray file
