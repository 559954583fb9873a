"""What ``autoretry doctor`` reads from the machine, behind one seam (tests pass a fake).

Everything here is read-only: a PATH lookup, ``opencode --version``, the process table,
``systemctl --user is-active`` / ``launchctl list``, and the file system's modes and owners.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from opencode_autoretry import package_version

#: Executable names of OpenCode (the npm package links ``opencode.exe`` to the native binary).
OPENCODE_NAMES = frozenset({"opencode", "opencode.exe"})
#: Sub-commands that never load plugins: such a process needs no bridge.
NO_PLUGIN_COMMANDS = frozenset(
    {"--version", "-v", "--help", "-h", "auth", "db", "debug", "models", "upgrade", "uninstall",
     "completion", "stats", "export", "import", "github", "mcp", "agent"}
)


@dataclass(frozen=True)
class ProcessInfo:
    pid: int
    ppid: int
    argv: tuple[str, ...]


def run_command(argv: list[str], timeout: float) -> tuple[int, str]:
    """Exit code and stdout+stderr of a short command; (127, why) when it cannot run."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return 127, str(exc)
    return done.returncode, (done.stdout + done.stderr).strip()


def is_opencode(argv: tuple[str, ...], name: str) -> bool:
    """An OpenCode process that loads plugins (TUI, ``serve``, ``run``, ``web``, ...)."""
    first = Path(argv[0]).name if argv else ""
    if name not in OPENCODE_NAMES and first not in OPENCODE_NAMES:
        return False
    return not (len(argv) > 1 and argv[1] in NO_PLUGIN_COMMANDS)


def own_opencode_processes() -> list[ProcessInfo]:
    """This user's OpenCode processes; a child of another one (a worker) is not listed."""
    import psutil  # only with a live daemon to compare with: diagnose's line mostly skips it

    uid = os.getuid()
    found: list[ProcessInfo] = []
    for proc in psutil.process_iter(["pid", "ppid", "name", "uids", "cmdline"]):
        info = proc.info
        uids = info.get("uids")
        if uids is None or uids.real != uid:
            continue
        argv = tuple(info.get("cmdline") or ())
        if argv and is_opencode(argv, info.get("name") or ""):  # none: amid exec, or a zombie
            found.append(ProcessInfo(info["pid"], info.get("ppid") or 0, argv))
    pids = {p.pid for p in found}
    return [p for p in found if p.ppid not in pids]


def pid_exists(pid: int) -> bool:
    import psutil

    return psutil.pid_exists(pid)


def _now() -> datetime:
    return datetime.now(tz=UTC)


def module_found(name: str) -> bool:
    """``name`` can be imported (found without running it; its parent packages are loaded)."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


@dataclass(frozen=True)
class Machine:
    """The seams: tests replace any of them."""

    which: Callable[[str], str | None] = shutil.which
    run: Callable[[list[str], float], tuple[int, str]] = run_command
    processes: Callable[[], list[ProcessInfo]] = own_opencode_processes
    pid_alive: Callable[[int], bool] = pid_exists
    now: Callable[[], datetime] = _now
    uid: int = field(default_factory=os.getuid)
    platform: str = sys.platform
    version: str = field(default_factory=package_version)
    run_binary: bool = True  # False in diagnose's summary: no ``opencode --version`` call
    module_found: Callable[[str], bool] = module_found  # the optional [telemetry] packages
