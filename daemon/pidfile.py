"""The daemon's pid file, ``$STATE_DIR/daemon.pid`` (issue 24): how ``autoretry stop`` and
install.sh find a daemon that no service manager runs, never by a process-name pattern.

``autoretry run`` writes it at start and removes it on a clean exit; install.sh writes the
same file for the daemon it starts detached. A pid is only believed when that process is an
``autoretry run`` started before the file was written: a daemon killed with -9 leaves its file
behind, and its pid may by now belong to anything else.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import psutil

from opencode_autoretry.config import paths

PID_FILE = "daemon.pid"
#: Slack between a process's start time and its pid file's mtime (clock granularity).
START_SLACK_S = 2.0
#: The module ``python -m`` runs for the ``autoretry`` command.
CLI_MODULE = "opencode_autoretry.cli"


def pid_file_path() -> Path:
    return paths.state_dir() / PID_FILE


def write_pid_file(path: Path, pid: int) -> None:
    """Write ``pid`` (private, replaced atomically: a reader never sees half a number)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    partial = path.with_name(f".{path.name}.{pid}")
    partial.write_text(f"{pid}\n", encoding="ascii")
    partial.chmod(0o600)
    partial.replace(path)


def remove_pid_file(path: Path, pid: int) -> None:
    """Remove the file if it still names ``pid`` (a newer daemon's file is left alone)."""
    if read_pid(path) == pid:
        path.unlink(missing_ok=True)


def read_pid(path: Path) -> int | None:
    try:
        text = path.read_text(encoding="ascii").split("\n", 1)[0].strip()
    except (OSError, UnicodeDecodeError):
        return None
    return int(text) if text.isdigit() and 0 < int(text) < 2**31 else None


def is_autoretry_run(cmdline: Sequence[str]) -> bool:
    """PURE: ``cmdline`` is ``[python] .../autoretry [options] run ...`` or
    ``python -m opencode_autoretry.cli [options] run ...``."""
    for index, arg in enumerate(cmdline):
        program = Path(arg).name == "autoretry"
        module = arg == CLI_MODULE and index > 0 and cmdline[index - 1] == "-m"
        if program or module:
            return "run" in cmdline[index + 1:]
    return False


def daemon_pid(path: Path) -> int | None:
    """The pid in the pid file when that process is the daemon that wrote it (or install.sh
    wrote it for), else None: a stale file is ignored."""
    pid = read_pid(path)
    if pid is None:
        return None
    try:
        written = path.stat().st_mtime
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return None
        if process.create_time() > written + START_SLACK_S:
            return None  # the pid was reused after the file was written
        return pid if is_autoretry_run(process.cmdline()) else None
    except (OSError, psutil.Error):
        return None


def is_alive(pid: int) -> bool:
    """``pid`` runs (a zombie, exited but not yet reaped, does not)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False

