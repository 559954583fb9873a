"""Runs goal checks (issue 22): the user's shell command, in the session's directory, never on
the loop thread.

``run_check`` is the one way a check runs (the daemon's workers and ``autoretry exec
--until``): ``$SHELL -c COMMAND`` in its own process group, stdin closed, stdout and stderr
read into a bounded tail (``OUTPUT_CAP_BYTES``); at its timeout the whole group is killed.
``CheckRunner`` gives each check a worker thread and posts its ``GoalCheckDone`` into the
daemon's inbox, at most one check per session at a time; the loop only starts the thread and
reads the result.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO

from opencode_autoretry.goals.check import CheckResult
from opencode_autoretry.goals.config import OUTPUT_CAP_BYTES

log = logging.getLogger(__name__)

#: After the check ended, how long its output may still be read (a background job it left
#: holding the pipe must not hold the worker).
READ_GRACE_S = 2.0
READ_CHUNK = 65536


def user_shell() -> str:
    shell = os.environ.get("SHELL") or ""
    return shell if os.path.isabs(shell) and os.access(shell, os.X_OK) else "/bin/sh"


class _Tail:
    """The last ``cap`` bytes of a stream."""

    def __init__(self, cap: int) -> None:
        self._cap = cap
        self._data = bytearray()

    def drain(self, stream: IO[bytes]) -> None:
        with contextlib.suppress(OSError, ValueError):
            while chunk := stream.read1(READ_CHUNK):  # type: ignore[attr-defined]
                self._data += chunk
                if len(self._data) > self._cap:
                    del self._data[: len(self._data) - self._cap]

    def text(self) -> str:
        return bytes(self._data).decode("utf-8", errors="replace")


def kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def run_check(
    command: str, directory: str | None, timeout: float, *,
    on_start: Callable[[int], None] | None = None, cap: int = OUTPUT_CAP_BYTES,
) -> CheckResult:
    """Run one check to its end or its timeout (blocking: call it from a worker)."""
    began = time.monotonic()
    try:
        process = subprocess.Popen(
            [user_shell(), "-c", command], cwd=directory or None, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
        )
    except OSError as exc:  # a directory that is gone, a shell that is not there
        return CheckResult(command, None, 0.0, "", error=f"{type(exc).__name__}: {exc}"[:300])
    if on_start is not None:
        on_start(process.pid)
    tail = _Tail(cap)
    assert process.stdout is not None
    reader = threading.Thread(target=tail.drain, args=(process.stdout,), daemon=True,
                              name="goal-check-output")
    reader.start()
    timed_out = False
    try:
        code: int | None = process.wait(timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        kill_group(process.pid)  # the whole group: a test runner's workers too
        process.wait()
        code = None
    duration = time.monotonic() - began
    reader.join(READ_GRACE_S)
    return CheckResult(command, code, duration, tail.text(), timed_out=timed_out)


@dataclass(frozen=True)
class GoalCheckDone:
    """Inbox item: a goal's check ended (posted by its worker thread)."""

    session_id: str
    goal_id: int
    reply_id: str
    result: CheckResult
    worker: int  # the thread it ran on (never the loop's)


class CheckRunner:
    """At most one running check per session; results go to ``post`` (the daemon's inbox)."""

    def __init__(self, post: Callable[[object], None], timeout: float,
                 run: Callable[..., CheckResult] = run_check) -> None:
        self._post = post
        self._timeout = timeout
        self._run = run
        self._running: dict[str, threading.Thread] = {}
        self._groups: dict[str, int] = {}  # session -> the check's process group
        self._lock = threading.Lock()
        #: Loop-thread time of the last starts, in ms (the note's figure; the check itself: 0).
        self.start_ms: list[float] = []

    def busy(self, session_id: str) -> bool:
        thread = self._running.get(session_id)
        return thread is not None and thread.is_alive()

    def start(self, session_id: str, goal_id: int, reply_id: str, command: str,
              directory: str | None) -> bool:
        began = time.perf_counter()
        if self.busy(session_id):
            return False
        thread = threading.Thread(
            target=self._work, args=(session_id, goal_id, reply_id, command, directory),
            daemon=True, name=f"goal-check-{session_id[-8:]}",
        )
        self._running[session_id] = thread
        thread.start()
        self.start_ms = [*self.start_ms[-49:], (time.perf_counter() - began) * 1000.0]
        return True

    def finished(self, session_id: str) -> None:
        self._running.pop(session_id, None)

    def _work(self, session_id: str, goal_id: int, reply_id: str, command: str,
              directory: str | None) -> None:
        def started(pgid: int) -> None:
            with self._lock:
                self._groups[session_id] = pgid

        try:
            result = self._run(command, directory, self._timeout, on_start=started)
        except Exception as exc:  # a worker must always report, or the session waits forever
            log.exception("goal check of %s failed to run", session_id)
            result = CheckResult(command, None, 0.0, "", error=f"{type(exc).__name__}: {exc}")
        with self._lock:
            self._groups.pop(session_id, None)
        self._post(GoalCheckDone(session_id, goal_id, reply_id, result,
                                 threading.get_ident()))

    def stop(self) -> None:
        """The daemon stops: no check outlives it (a restarted daemon runs it again)."""
        with self._lock:
            groups = list(self._groups.values())
        for pgid in groups:
            kill_group(pgid)
