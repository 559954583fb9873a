"""Doctor's line as the daemon records it for ``diagnose`` (issue 21): printed only while the
daemon is live, the record fresh and what the checks read unchanged; kept fresh on a thread of
the daemon's own; carried by the heartbeat. ``tests/diagnostics/test_report_imports.py`` runs
``diagnose`` on such a heartbeat in a fresh interpreter (no check imported)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from daemon_fakes import Harness

from opencode_autoretry.config.settings import Settings
from opencode_autoretry.daemon import control
from opencode_autoretry.daemon.health import DoctorLine
from opencode_autoretry.daemon.heartbeat import HEARTBEAT_EVERY
from opencode_autoretry.diagnostics.doctor.recorded import (
    FRESH,
    RECORD_EVERY_S,
    RECORD_KEY,
    inputs_digest,
    keep_summary,
    kept_summary,
    make_record,
    recorded_summary,
)
from opencode_autoretry.store.database import Heartbeat

NOW = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)
LINE = "autoretry doctor: 1 problem (bridge); run `autoretry doctor`"


def dead_pid() -> int:
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    done.wait()
    return done.pid


@pytest.fixture()
def world(tmp_path: Path) -> tuple[Settings, Path]:
    settings = replace(Settings(), opencode_db=tmp_path / "opencode.db",
                       store=tmp_path / "state" / "autoretry.db",
                       socket=tmp_path / "state" / "daemon.sock", log_dir=tmp_path / "log")
    return settings, tmp_path / "opencode-config"


def beat_with_record(
    settings: Settings, config: Path, *, pid: int | None = None, stopping: bool = False,
    beat_at: datetime = NOW, record_at: datetime = NOW,
) -> Heartbeat:
    pid = os.getpid() if pid is None else pid
    info = {"started": NOW.isoformat(), "stopping": stopping, "bridges": [], "lines": {}}
    seen = Heartbeat(beat_at, pid, info)
    record = make_record(LINE, record_at, inputs_digest(settings, config, seen))
    return Heartbeat(beat_at, pid, {**info, RECORD_KEY: record})


def test_the_recorded_line_is_printed_only_while_it_holds(world: tuple[Settings, Path]) -> None:
    settings, config = world
    assert recorded_summary(beat_with_record(settings, config), settings, config, NOW) == LINE
    later = NOW + timedelta(seconds=20)
    assert recorded_summary(beat_with_record(settings, config), settings, config, later) == LINE
    refused = {
        "no heartbeat": recorded_summary(None, settings, config, NOW),
        "stopping": recorded_summary(beat_with_record(settings, config, stopping=True),
                                     settings, config, NOW),
        "dead pid": recorded_summary(beat_with_record(settings, config, pid=dead_pid()),
                                     settings, config, NOW),
        "stale beat": recorded_summary(
            beat_with_record(settings, config, beat_at=NOW - timedelta(seconds=31)),
            settings, config, NOW),
        "old record": recorded_summary(
            beat_with_record(settings, config, record_at=NOW - timedelta(seconds=46)),
            settings, config, NOW),
        "other settings": recorded_summary(beat_with_record(settings, config),
                                           replace(settings, enabled=False), config, NOW),
        "other OpenCode config": recorded_summary(beat_with_record(settings, config), settings,
                                                  config.parent / "elsewhere", NOW),
    }
    assert refused == dict.fromkeys(refused)


def test_a_changed_file_the_checks_read_voids_the_record(world: tuple[Settings, Path]) -> None:
    settings, config = world
    beat = beat_with_record(settings, config)
    assert recorded_summary(beat, settings, config, NOW) == LINE
    (config / "plugins").mkdir(parents=True)
    (config / "plugins" / "autoretry.js").write_text("// installed since\n")
    assert recorded_summary(beat, settings, config, NOW) is None
    settings.store.parent.mkdir(mode=0o700, parents=True)
    beat = beat_with_record(settings, config)
    assert recorded_summary(beat, settings, config, NOW) == LINE
    settings.store.parent.chmod(0o755)  # doctor's "state files" check reads the modes
    assert recorded_summary(beat, settings, config, NOW) is None


def test_the_daemon_keeps_the_line_fresh_on_its_own_thread() -> None:
    computed = threading.Event()
    threads: list[str] = []

    def compute() -> dict[str, str]:
        threads.append(threading.current_thread().name)
        if len(threads) == 3:
            computed.set()
        return make_record(LINE, NOW + timedelta(seconds=len(threads)), "digest")

    line = DoctorLine(compute, every=0.01)
    assert line.latest() is None
    line.start()
    try:
        assert computed.wait(10), "the doctor line was not computed again and again"
    finally:
        line.stop()
    assert line.latest() == make_record(LINE, NOW + timedelta(seconds=len(threads)), "digest")
    assert len(threads) >= 3 and set(threads) == {"doctor-line"}


def test_the_daemons_record_is_renewed_before_diagnose_finds_it_old() -> None:
    """The oldest record diagnose can read from a live daemon: the next one is due, plus the
    heartbeat that carries it and a tick (the loop writes the heartbeat), plus a margin for a
    slow run of the checks on a busy machine."""
    slowest_run = 5.0
    oldest = (RECORD_EVERY_S + HEARTBEAT_EVERY.total_seconds() + Settings().tick_interval
              + slowest_run)
    assert oldest <= FRESH.total_seconds()
    assert DoctorLine(dict).every == RECORD_EVERY_S


def test_a_failing_check_run_leaves_no_record_and_logs_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken() -> dict[str, str]:
        raise OSError("no process table")

    line = DoctorLine(broken)
    with caplog.at_level(logging.WARNING):
        line.refresh()
        line.refresh()
    assert line.latest() is None
    assert [r.message for r in caplog.records] == [
        "doctor's line for diagnose could not be computed"]


def test_the_heartbeat_carries_the_latest_line(tmp_path: Path) -> None:
    harness = Harness(tmp_path)
    assert RECORD_KEY not in control.heartbeat_info(harness.loop)
    record = make_record(LINE, NOW, "digest")
    harness.loop.doctor_line = lambda: record
    assert control.heartbeat_info(harness.loop)[RECORD_KEY] == record


def test_a_report_keeps_its_line_on_the_same_terms(world: tuple[Settings, Path]) -> None:
    settings, config = world
    assert kept_summary(settings, config, None, NOW) is None  # nothing kept yet
    keep_summary(LINE, settings, config, None, NOW)
    kept = settings.store.parent / "doctor-line.json"
    assert kept.is_file() and kept.stat().st_mode & 0o077 == 0  # private, as the state dir
    assert kept_summary(settings, config, None, NOW + timedelta(seconds=44)) == LINE
    assert kept_summary(settings, config, None, NOW + timedelta(seconds=46)) is None
    assert kept_summary(replace(settings, enabled=False), config, None, NOW) is None
    (config / "plugins").mkdir(parents=True)
    (config / "plugins" / "autoretry.js").write_text("// installed since\n")
    assert kept_summary(settings, config, None, NOW) is None
    kept.write_text("{not json")
    assert kept_summary(settings, config, None, NOW) is None
