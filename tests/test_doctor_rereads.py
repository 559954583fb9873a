"""What the daemon's doctor line reads again every run (issue 21): the process table from
/proc, each process looked at once and then only its ``stat``; the version read again only
when its metadata folder changed. Same answers as doctor's own reads."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from opencode_autoretry.diagnostics.doctor.machine import ProcessInfo, own_opencode_processes
from opencode_autoretry.diagnostics.doctor.rereads import (
    ProcessWalk,
    VersionReader,
    repeated_machine,
)

UID = 1000


class FakeProc:
    """A /proc of a few processes in a tmp dir; ``reads`` counts the command lines read."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def add(self, pid: int, name: str, argv: list[str], *, ppid: int = 1, uid: int = UID,
            start: int = 100) -> None:
        folder = self.root / str(pid)
        folder.mkdir(exist_ok=True)
        # a name with a space and a parenthesis, as a process may call itself
        (folder / "stat").write_bytes(
            f"{pid} ({name}) S {ppid} 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 {start} 1 1\n".encode())
        (folder / "cmdline").write_bytes("".join(f"{arg}\0" for arg in argv).encode())
        (folder / "status").write_bytes(f"Name:\t{name}\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n"
                                        .encode())

    def remove(self, pid: int) -> None:
        shutil.rmtree(self.root / str(pid))

    def hide_cmdline(self, pid: int) -> None:
        """A command line that cannot be read: a process looked at again is skipped."""
        (self.root / str(pid) / "cmdline").unlink()


@pytest.fixture()
def proc(tmp_path: Path) -> FakeProc:
    return FakeProc(tmp_path)


def walk(proc: FakeProc) -> ProcessWalk:
    def no_whole_walk() -> list[ProcessInfo]:
        raise AssertionError("the /proc walk fell back to psutil")

    return ProcessWalk(proc.root, UID, no_whole_walk)


def test_only_this_users_opencode_processes_that_load_plugins_are_listed(
    proc: FakeProc,
) -> None:
    proc.add(10, "opencode", ["/usr/bin/opencode", "serve"])
    proc.add(11, "opencode", ["opencode"], uid=UID + 1)  # another user's
    proc.add(12, "opencode", ["opencode", "models"])  # never loads plugins
    proc.add(13, "opencode", ["opencode", "worker"], ppid=10)  # a worker of pid 10
    proc.add(14, "node", ["node", "/srv/app.js"])
    proc.add(15, "x (odd) name", ["/opt/bin/opencode"])  # argv[0] names it
    proc.add(16, "bash", [])
    (proc.root / "self").mkdir()
    assert walk(proc)() == [ProcessInfo(10, 1, ("/usr/bin/opencode", "serve")),
                            ProcessInfo(15, 1, ("/opt/bin/opencode",))]


def test_a_process_is_looked_at_once_until_its_pid_or_name_changes(proc: FakeProc) -> None:
    proc.add(20, "opencode", ["opencode"])
    proc.add(21, "sh", ["sh", "wrapper"])
    proc.add(22, "opencode", ["opencode", "run"])
    walker = walk(proc)
    assert [p.pid for p in walker()] == [20, 22]
    for pid in (20, 21, 22):
        proc.hide_cmdline(pid)
    assert [p.pid for p in walker()] == [20, 22]  # kept: not read again
    proc.add(21, "opencode", ["opencode"])  # the wrapper exec'd OpenCode: renamed
    proc.add(22, "opencode", ["opencode", "models"], start=200)  # pid 22 reused
    assert [p.pid for p in walker()] == [20, 21]
    proc.add(20, "opencode", ["opencode"], ppid=21)  # its parent ended; reparented, kept
    proc.hide_cmdline(20)
    assert walker() == [ProcessInfo(21, 1, ("opencode",))]  # now a child of 21: a worker


def test_a_process_amid_its_exec_is_looked_at_again(proc: FakeProc) -> None:
    """The kernel names a process before its command line is readable: such a process is
    neither listed nor kept (its command line empty for good once read would hide what it
    runs, e.g. ``opencode models``, for its whole life)."""
    proc.add(50, "opencode", [])
    walker = walk(proc)
    assert walker() == []
    proc.add(50, "opencode", ["opencode", "models"])  # the same process, its exec done
    assert walker() == []
    proc.add(51, "opencode", [])
    assert walker() == []
    proc.add(51, "opencode", ["opencode", "serve"])
    assert walker() == [ProcessInfo(51, 1, ("opencode", "serve"))]


def test_an_ended_process_is_forgotten(proc: FakeProc) -> None:
    proc.add(30, "opencode", ["opencode"])
    walker = walk(proc)
    assert [p.pid for p in walker()] == [30]
    proc.remove(30)
    assert walker() == []
    proc.add(30, "opencode", ["opencode", "models"])  # same pid and stat: looked at anew
    assert walker() == []


def test_without_proc_the_whole_walk_runs(tmp_path: Path) -> None:
    listed = [ProcessInfo(40, 1, ("opencode",))]
    assert ProcessWalk(tmp_path / "none", UID, lambda: listed)() == listed


def _wait_for_command_line(pid: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not Path(f"/proc/{pid}/cmdline").read_bytes():
        assert time.monotonic() < deadline, f"pid {pid}: no command line within {timeout} s"
        time.sleep(0.005)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
def test_a_real_opencode_process_is_found_as_psutil_finds_it(tmp_path: Path) -> None:
    fake = tmp_path / "opencode"
    fake.symlink_to(shutil.which("sleep") or "/bin/sleep")
    walker = ProcessWalk()
    assert all(p.argv != (str(fake), "60") for p in walker())
    child = subprocess.Popen([str(fake), "60"])
    try:
        _wait_for_command_line(child.pid)  # Popen returns once the exec began, not ended
        mine = [p for p in walker() if p.pid == child.pid]
        assert mine == [ProcessInfo(child.pid, os.getpid(), (str(fake), "60"))]
        assert mine == [p for p in own_opencode_processes() if p.pid == child.pid]
    finally:
        child.kill()
        child.wait()
    assert all(p.pid != child.pid for p in walker())


def test_the_version_is_read_again_only_when_its_folder_changed(tmp_path: Path) -> None:
    reads: list[str] = []

    def read() -> str:
        reads.append(f"1.{len(reads)}")
        return reads[-1]

    an_hour_ago = time.time_ns() - 3600 * 10**9
    os.utime(tmp_path, ns=(an_hour_ago, an_hour_ago))
    version = VersionReader(read, lambda: tmp_path)
    assert [version(), version()] == ["1.0", "1.0"]
    (tmp_path / "opencode_autoretry-1.1.dist-info").mkdir()  # pip installed another version
    assert [version(), version()] == ["1.1", "1.2"]  # just changed: may change again unseen
    os.utime(tmp_path, ns=(an_hour_ago + 1, an_hour_ago + 1))
    assert [version(), version()] == ["1.3", "1.3"]
    unfound = VersionReader(read, lambda: None)
    assert [unfound(), unfound()] == ["1.4", "1.5"]  # no folder to watch: read every time


def test_the_installed_version_is_read_as_package_version() -> None:
    from opencode_autoretry import package_version

    machine = repeated_machine(VersionReader(), ProcessWalk())
    assert machine.version == package_version()
    assert not machine.run_binary
    assert sys.platform != "linux" or isinstance(machine.processes, ProcessWalk)
