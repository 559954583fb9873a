"""What doctor's checks read from the machine, for a caller that runs them again and again.

The daemon runs doctor's checks every ``RECORD_EVERY_S`` for ``diagnose``'s first line
(``daemon/health.py``, issue 21). Two of the machine's reads cost most of it and rarely change
between two runs: the process table (psutil reads three files per process: ~180 us each here,
so ~50 ms a run on a desktop with 300 processes) and the installed version (finding the
distribution on ``sys.path`` and parsing its metadata, a quarter of the line's CPU in the
daemon). ``repeated_machine`` gives doctor's ``Machine`` with both read only as far as they
changed since the last run; the checks and what they conclude are the same.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from opencode_autoretry import package_version
from opencode_autoretry.diagnostics.doctor.machine import (
    Machine,
    ProcessInfo,
    is_opencode,
    own_opencode_processes,
)

PROC = Path("/proc")
SETTLED_NS = 1_000_000_000


def _folder_time(folder: Path | None) -> int | None:
    if folder is None:
        return None
    try:
        return folder.stat().st_mtime_ns
    except OSError:
        return None


def _metadata_folder() -> Path | None:
    """The folder holding the installed distribution's metadata (``site-packages``)."""
    from importlib import metadata

    try:
        return Path(str(metadata.distribution("opencode-autoretry").locate_file(""))).resolve()
    except (metadata.PackageNotFoundError, OSError, TypeError, ValueError):
        return None


class VersionReader:
    """``package_version``, read again only when the folder holding its metadata changed:
    pip removes and adds a ``*.dist-info`` folder there on every install, so the folder's time
    moves with the installed version (an upgrade while the daemon runs is still seen)."""

    def __init__(
        self,
        read: Callable[[], str] = package_version,
        folder: Callable[[], Path | None] = _metadata_folder,
    ) -> None:
        self._read = read
        self._find_folder = folder
        self._folder: Path | None = None
        self._found = False
        self._stamp: int | None = None
        self._version = ""

    def __call__(self) -> str:
        if not self._found:  # found on the first call, not at construction: no cost until used
            self._folder, self._found = self._find_folder(), True
        stamp = _folder_time(self._folder)  # taken before the read: a change during it is seen
        if stamp is None or stamp != self._stamp:
            self._version = self._read()
            # A folder changed within the last second may change again within the same tick
            # of the file system's clock, unseen (as git's racy entries): read it again then.
            settled = stamp is not None and time.time_ns() - stamp > SETTLED_NS
            self._stamp = stamp if settled else None
        return self._version


@dataclass(frozen=True)
class _Seen:
    #: /proc/PID/stat's start time and name: another process under the same pid, or an exec
    #: (which renames the process), changes it and the process is looked at again
    key: tuple[bytes, bytes]
    argv: tuple[str, ...] | None  # this user's OpenCode process, else None


def _read(path: str) -> bytes:
    """A /proc file whole (they are small; no Python file object: this runs per process)."""
    handle = os.open(path, os.O_RDONLY)
    try:
        chunks = [os.read(handle, 1 << 16)]
        while chunks[-1]:  # a command line can be longer than one read
            chunks.append(os.read(handle, 1 << 16))
        return b"".join(chunks)
    finally:
        os.close(handle)


def _head(stat: bytes) -> tuple[int, tuple[bytes, bytes]] | None:
    """(ppid, key) from /proc/PID/stat; the name sits in parentheses and may hold any byte."""
    name_end = stat.rfind(b")")
    fields = stat[name_end + 2:].split()
    if name_end < 0 or len(fields) < 20:
        return None
    return int(fields[1]), (fields[19], stat[stat.find(b"(") + 1:name_end])


def _argv(raw: bytes) -> tuple[str, ...]:
    """/proc/PID/cmdline as psutil splits it (a process that rewrote its title with spaces
    included)."""
    text = raw.decode("utf-8", "surrogateescape")
    if not text:
        return ()
    sep = "\x00" if text.endswith("\x00") else " "
    argv = text.removesuffix(sep).split(sep)
    if sep == "\x00" and len(argv) == 1 and " " in argv[0]:
        argv = argv[0].split(" ")
    return tuple(argv)


def _real_uid(status: bytes) -> int | None:
    for line in status.splitlines():
        if line.startswith(b"Uid:"):
            return int(line.split()[1])
    return None


class ProcessWalk:
    """``own_opencode_processes`` from /proc, where each process is looked at once (its
    command line and owner) and then only its ``stat`` is read again, to see it is the same
    process under the same name. Not on Linux (no /proc): psutil's whole walk every time.

    What a kept answer misses: a process that changes its command line without an exec (a
    title rewrite) is seen as it was first; OpenCode does not."""

    def __init__(
        self,
        proc: Path = PROC,
        uid: int | None = None,
        whole_walk: Callable[[], list[ProcessInfo]] = own_opencode_processes,
    ) -> None:
        self._proc = proc
        self._uid = os.getuid() if uid is None else uid
        self._whole_walk = whole_walk
        self._seen: dict[int, _Seen] = {}

    def __call__(self) -> list[ProcessInfo]:
        try:
            names = os.listdir(self._proc)
        except OSError:
            return self._whole_walk()
        seen: dict[int, _Seen] = {}
        found: list[ProcessInfo] = []
        for pid in sorted(int(name) for name in names if name.isdigit()):  # as psutil: by pid
            self._look(pid, seen, found)
        self._seen = seen  # gone processes are forgotten
        pids = {p.pid for p in found}
        return [p for p in found if p.ppid not in pids]

    def _look(self, pid: int, seen: dict[int, _Seen], found: list[ProcessInfo]) -> None:
        folder = f"{self._proc}/{pid}"  # strings, not Paths: this runs for every process
        try:
            head = _head(_read(f"{folder}/stat"))
            if head is None:
                return
            ppid, key = head
            kept = self._seen.get(pid)
            if kept is None or kept.key != key:
                kept = _Seen(key, self._opencode_argv(folder, key[1]))
        except (OSError, ValueError):  # ended meanwhile, or not ours to read: as psutil skips
            return
        if kept.argv == ():  # named OpenCode but no command line: amid its exec (the kernel
            return  # names it first) or a zombie; not listed, and looked at again next time
        seen[pid] = kept
        if kept.argv is not None:
            found.append(ProcessInfo(pid, ppid, kept.argv))  # the ppid as it is now

    def _opencode_argv(self, folder: str, name: bytes) -> tuple[str, ...] | None:
        argv = _argv(_read(f"{folder}/cmdline"))
        if not is_opencode(argv, name.decode("utf-8", "surrogateescape")):
            return None
        return argv if _real_uid(_read(f"{folder}/status")) == self._uid else None


def repeated_machine(version: VersionReader, processes: ProcessWalk) -> Machine:
    """Doctor's ``Machine`` as ``diagnose``'s line uses it (no ``opencode --version``), with
    the version and the process table read as far as they changed (kept by the caller)."""
    return Machine(run_binary=False, version=version(), processes=processes)
