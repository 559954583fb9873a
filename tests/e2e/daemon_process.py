"""Runs the real ``autoretry run`` as a subprocess for the daemon e2e scenarios.

Isolated: its own AUTORETRY_HOME (store, logs), socket and config; OPENCODE_DB points at the
e2e OpenCode's DB. Its stderr (``--foreground --verbose``) is followed so a test can wait for a
log line instead of sleeping.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from opencode_autoretry.store.database import StoreView

#: Fast budgets for most scenarios: the same shape as the defaults, shorter waits.
FAST_CONFIG = "\n".join(
    f"[budgets.{group}]\ninitial_delay = 1.0\nmax_delay = 1.0\n"
    for group in ("disconnect", "timeout", "stream", "server", "rate_limit", "unknown")
)


#: How long a daemon gets to stop on SIGTERM before the teardown SIGKILLs it and fails the
#: test: generous (a loaded 2-core machine), as a clean stop takes well under a second.
STOP_TIMEOUT = 20.0
TRACEBACK = "Traceback (most recent call last)"
LOG_TAIL_LINES = 40


def wait_until(check: Callable[[], Any], timeout: float, what: str, every: float = 0.1) -> Any:
    """Poll another process's state (the daemon's store, OpenCode's DB or API) until ``check``
    answers truthy: there is nothing in this process to wait on instead."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout}s (last: {value!r})")
        time.sleep(every)


class DaemonProcess:
    def __init__(self, home: Path, socket: Path, opencode_db: Path, config: str = "") -> None:
        self.home = home
        self.socket = socket
        self.opencode_db = opencode_db
        self.config = home / "config.toml"
        home.mkdir(parents=True, exist_ok=True)
        self.config.write_text(config)
        self.process: subprocess.Popen[str] | None = None
        self.refused_sigterm = False  # set when stop() had to SIGKILL
        self.started_line = 0  # where the log of the latest start() begins
        self._lines: list[str] = []
        self._cond = threading.Condition()

    def env(self) -> dict[str, str]:
        """The environment of this daemon, for it and for CLI calls about its store."""
        return {
            **{k: v for k, v in os.environ.items() if not k.startswith(("AUTORETRY_", "XDG_"))},
            "AUTORETRY_HOME": str(self.home),
            "AUTORETRY_SOCKET": str(self.socket),
            "AUTORETRY_CONFIG": str(self.config),
            "OPENCODE_DB": str(self.opencode_db),
            "AUTORETRY_TICK_INTERVAL": "0.2",
        }

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        """``autoretry ARGS`` on this daemon's store; a non-zero exit fails the test."""
        return subprocess.run([sys.executable, "-m", "opencode_autoretry.cli", *args],
                              env=self.env(), capture_output=True, text=True, timeout=60,
                              check=True)

    def start(self, timeout: float = 30.0) -> DaemonProcess:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "opencode_autoretry.cli", "run", "--foreground", "--verbose"],
            env=self.env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        started = self.started_line = len(self._lines)
        threading.Thread(target=self._follow, args=(self.process,), daemon=True).start()
        self.wait_log("autoretry daemon", timeout, after=started)
        return self

    def _follow(self, process: subprocess.Popen[str]) -> None:
        assert process.stderr is not None
        for line in process.stderr:
            with self._cond:
                self._lines.append(line.rstrip("\n"))
                self._cond.notify_all()

    def lines(self) -> list[str]:
        with self._cond:
            return list(self._lines)

    def wait_log(self, needle: str, timeout: float, after: int = 0) -> str:
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for line in self._lines[after:]:
                    if needle in line:
                        return line
                left = deadline - time.monotonic()
                if left <= 0:
                    tail = "\n".join(self._lines[-30:])
                    raise AssertionError(f"daemon logged no {needle!r} within {timeout}s:\n{tail}")
                self._cond.wait(left)

    def stop(self, timeout: float = STOP_TIMEOUT) -> int | None:
        """SIGTERM, then wait; a daemon still running after ``timeout`` is SIGKILLed and
        ``refused_sigterm`` says so (``teardown_faults`` turns it into a failure)."""
        if self.process is None or self.process.poll() is not None:
            return self.process.returncode if self.process else None
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.refused_sigterm = True
            self.process.kill()
            return self.process.wait(timeout=15)

    def kill(self) -> None:
        assert self.process is not None
        self.process.kill()
        self.process.wait(timeout=15)

    def teardown_faults(self) -> list[str]:
        """What the end of a test must not find: a daemon that had to be SIGKILLed because it
        did not stop on SIGTERM, or a traceback anywhere in its log (of every run of it)."""
        lines = self.lines()
        faults: list[str] = []
        if self.refused_sigterm:
            tail = "\n".join(lines[-LOG_TAIL_LINES:])
            faults.append(f"the daemon did not stop on SIGTERM within {STOP_TIMEOUT:g} s and "
                          f"was SIGKILLed; its log's last lines:\n{tail}")
        starts = [n for n, line in enumerate(lines) if TRACEBACK in line]
        if starts:
            first = starts[0]
            excerpt = "\n".join(lines[max(0, first - 3):first + LOG_TAIL_LINES])
            faults.append(f"{len(starts)} traceback(s) in the daemon's log ({self.home}); "
                          f"the first:\n{excerpt}")
        return faults

    def store(self) -> StoreView:
        return StoreView.open(self.home / "autoretry.db")
