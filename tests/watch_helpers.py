"""Helpers of the -wal watch's tests: a sleeping thread, this process's fds, a writer process."""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from opencode_autoretry.daemon.inbox import DbRows
from opencode_autoretry.daemon.intake.wakeup import Wakeup

WAIT_S = 10.0  # the bound for what must happen (it takes milliseconds)
QUIET_S = 0.4  # how long nothing must happen

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify is Linux's")


def fds_to(target_prefix: str) -> set[int]:
    """This process's open fds whose /proc link starts with ``target_prefix``."""
    found = set()
    for entry in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{entry}").startswith(target_prefix):
                found.add(int(entry))
        except OSError:  # the listing's own fd, gone by now
            continue
    return found


class Sleeper:
    """A thread in ``wakeup.wait``: when (if) it returned."""

    def __init__(self, wakeup: Wakeup, timeout: float) -> None:
        self.returned = threading.Event()
        self.took = 0.0
        self._thread = threading.Thread(target=self._run, args=(wakeup, timeout), daemon=True)
        self._thread.start()
        time.sleep(0.05)  # inside its poll by now (a write before it is also seen: the fd)

    def _run(self, wakeup: Wakeup, timeout: float) -> None:
        started = time.monotonic()
        wakeup.wait(timeout)
        self.took = time.monotonic() - started
        self.returned.set()

    def join(self) -> None:
        self._thread.join(WAIT_S)


WRITER = """
import sys
from pathlib import Path
from opencode_rows import OpenCodeRows
rows = OpenCodeRows(Path(sys.argv[1]))
rows.commit()
rows.conn.execute("PRAGMA synchronous = " + sys.argv[2])
session = rows.session("w")
rows.commit()
print("ready", flush=True)
for command in sys.stdin:
    if command == "user\\n":
        print(rows.user(session), flush=True)
        rows.commit()
    elif command == "begin\\n":
        rows.conn.execute("BEGIN IMMEDIATE")
        print(rows.user(session), flush=True)
    elif command == "commit\\n":
        rows.commit()
        print("committed", flush=True)
"""


class Writer:
    """OpenCode's part: another process writing the DB (its own timing). ``FULL``: an fsync
    between the last frame's write and the commit's publication, which widens the window a
    read must not fall into."""

    def __init__(self, db: Path, synchronous: str = "NORMAL") -> None:
        tests = Path(__file__).resolve().parent  # for opencode_rows
        self.process = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(db), synchronous],
            env={**os.environ, "PYTHONPATH": str(tests)},
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.line() == "ready"

    def line(self) -> str:
        assert self.process.stdout is not None
        return self.process.stdout.readline().strip()

    def send(self, command: str) -> str:
        assert self.process.stdin is not None
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()
        return self.line()

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(WAIT_S)


def read_ids(inbox: queue.Queue[object], wanted: str) -> set[str]:
    """The message ids the tailer enqueued until ``wanted`` was among them."""
    found: set[str] = set()
    while wanted not in found:
        item = inbox.get(timeout=WAIT_S)
        assert isinstance(item, DbRows)
        found.update(message.id for message in item.messages)
    return found
