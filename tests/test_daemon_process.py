"""The e2e daemon harness's own teardown checks (tests/e2e/daemon_process.py): a daemon that
does not stop on SIGTERM, or that logged a traceback, fails its test."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from daemon_process import DaemonProcess

#: Stands in for a daemon: says it is ready, then ignores SIGTERM (or not) until killed.
STUBBORN = (
    "import signal, sys, time\n"
    "if sys.argv[1] == 'ignore': signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "print('ready', flush=True)\n"
    "time.sleep(120)\n"
)


def harness(tmp_path: Path, sigterm: str) -> DaemonProcess:
    daemon = DaemonProcess(tmp_path / "home", tmp_path / "d.sock", tmp_path / "opencode.db")
    daemon.process = subprocess.Popen([sys.executable, "-c", STUBBORN, sigterm],
                                      stdout=subprocess.PIPE, text=True)
    assert daemon.process.stdout is not None
    assert daemon.process.stdout.readline() == "ready\n"  # its SIGTERM handler is in place
    return daemon


def test_a_daemon_that_ignores_sigterm_is_killed_and_reported(tmp_path):
    daemon = harness(tmp_path, "ignore")
    daemon._lines += ["INFO autoretry daemon", "INFO shutting down"]
    assert daemon.stop(timeout=1.0) == -9
    [fault] = daemon.teardown_faults()
    assert "did not stop on SIGTERM" in fault and "INFO shutting down" in fault


def test_a_daemon_that_stops_on_sigterm_has_no_fault(tmp_path):
    daemon = harness(tmp_path, "obey")
    assert daemon.stop(timeout=20.0) == -15
    assert daemon.teardown_faults() == []


def test_a_traceback_in_the_log_is_reported_with_its_excerpt(tmp_path):
    daemon = DaemonProcess(tmp_path / "home", tmp_path / "d.sock", tmp_path / "opencode.db")
    daemon._lines += ["INFO tick", "ERROR judge failed", "Traceback (most recent call last):",
                      '  File "loop.py", line 1, in run', "KeyError: 'ses_a'", "INFO tick"]
    [fault] = daemon.teardown_faults()
    assert fault.startswith("1 traceback(s) in the daemon's log")
    assert "ERROR judge failed" in fault and "KeyError: 'ses_a'" in fault
    daemon._lines[2:3] = ["INFO nothing wrong"]
    assert daemon.teardown_faults() == []
