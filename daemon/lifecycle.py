"""``autoretry start | stop | restart | logs`` (issue 24): the daemon's lifecycle from the shell.

Where ``autoretry setup`` (or install.sh) made a systemd user unit or a launchd agent, the
service manager starts and stops the daemon; otherwise (``AUTORETRY_SERVICE=none``, containers,
WSL) ``start`` runs ``autoretry run`` detached and ``stop`` signals the pid in the daemon's pid
file, checked to be an ``autoretry run`` (``daemon.pidfile``) — never a process-name pattern.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import deque
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import click

from opencode_autoretry.config import paths
from opencode_autoretry.terminal_text import visible

if TYPE_CHECKING:
    from opencode_autoretry.cli.context import AppContext
    from opencode_autoretry.config.settings import Settings

#: As setup names them; a unit or agent counts only when setup (or install.sh) wrote it.
SYSTEMD_SERVICE = "opencode-autoretry.service"
LAUNCHD_LABEL = "com.github.opencode-autoretry"
#: ``autoretry setup`` writes "written by opencode-autoretry setup"; install.sh before it wrote
#: "... install.sh": both are ours.
WRITTEN_BY = "written by opencode-autoretry"
#: Seconds to wait for the first heartbeat, and for the daemon to end after SIGTERM.
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 30.0
POLL_S = 0.2
#: The detached daemon's stdout and stderr, in the log dir (what it said before logging).
STDERR_FILE = "daemon.stderr"
ERROR_LINES = 20

ServiceKind = Literal["systemd", "launchd", "none"]


class LifecycleError(click.ClickException):
    """The daemon did not start or stop: what happened (and its own words), exit 1."""


def systemd_unit() -> Path:
    return paths.config_home() / "systemd" / "user" / SYSTEMD_SERVICE


def launchd_plist() -> Path:
    return Path.home() / "Library" / "LaunchAgents" / f"{LAUNCHD_LABEL}.plist"


def _written_by_install(path: Path) -> bool:
    try:
        return WRITTEN_BY in path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False


def service_kind() -> ServiceKind:
    """``AUTORETRY_SERVICE`` (auto, systemd, launchd, none) as install.sh reads it; auto is the
    unit or agent install.sh wrote, when its manager is there, else none."""
    wanted = os.environ.get("AUTORETRY_SERVICE") or "auto"
    if wanted in ("systemd", "launchd", "none"):
        return wanted  # type: ignore[return-value]
    if wanted != "auto":
        raise click.BadParameter(f"AUTORETRY_SERVICE={wanted} is not one of auto, systemd, "
                                 "launchd, none")
    if shutil.which("systemctl") and _written_by_install(systemd_unit()):
        return "systemd"
    if shutil.which("launchctl") and _written_by_install(launchd_plist()):
        return "launchd"
    return "none"


def _service(*command: str) -> None:
    """Run a service manager's command; its own error, and exit 1, when it fails."""
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        said = visible((done.stderr or done.stdout).strip()[-2000:])
        raise LifecycleError(f"{' '.join(command)} failed (exit {done.returncode}): {said}")


def _through_service(kind: ServiceKind, verb: str) -> None:
    if kind == "systemd":
        _service("systemctl", "--user", verb, SYSTEMD_SERVICE)
        click.echo(f"{verb}: systemd user service {SYSTEMD_SERVICE} "
                   f"(journalctl --user -u {SYSTEMD_SERVICE})")
        return
    target = f"gui/{os.getuid()}/{LAUNCHD_LABEL}"
    if verb == "stop":
        _service("launchctl", "stop", LAUNCHD_LABEL)
    else:  # loaded at login by install.sh; kickstart -k restarts a running one
        _service("launchctl", "kickstart", *(["-k"] if verb == "restart" else []), target)
    click.echo(f"{verb}: launchd agent {LAUNCHD_LABEL}")


# -- the pid-file path ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Running:
    pid: int
    how: str  # "pid file" or "heartbeat"


def running_daemon(settings: Settings, heartbeat: bool = True) -> Running | None:
    """This state dir's daemon: the pid file's, else (``heartbeat``) the store's fresh
    heartbeat's (a daemon from before pid files), each checked to be a live ``autoretry run``."""
    from opencode_autoretry.daemon.control import status_report
    from opencode_autoretry.daemon.pidfile import daemon_pid, is_autoretry_run, pid_file_path
    from opencode_autoretry.store.database import StoreError, StoreView

    pid = daemon_pid(pid_file_path())
    if pid is not None:
        return Running(pid, "pid file")
    if not heartbeat:
        return None
    try:
        view = StoreView.open(settings.store)
    except StoreError:
        return None
    try:
        daemon = status_report(view, datetime.now(tz=UTC))["daemon"]
    finally:
        view.close()
    beat_pid = daemon["pid"]
    if not daemon["running"] or not isinstance(beat_pid, int):
        return None
    import psutil

    try:
        return Running(beat_pid, "heartbeat") if is_autoretry_run(
            psutil.Process(beat_pid).cmdline()) else None
    except psutil.Error:
        return None


def daemon_command() -> list[str]:
    """``autoretry run`` as install.sh starts it: this install's ``autoretry`` script, else
    this Python's ``-m opencode_autoretry.cli``."""
    script = Path(sys.executable).parent / "autoretry"
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script), "run"]
    return [sys.executable, "-m", "opencode_autoretry.cli", "run"]


def heartbeat_pid(settings: Settings) -> int | None:
    """The pid of the daemon's last heartbeat, unless it said it was stopping."""
    from opencode_autoretry.store.database import StoreError, StoreView

    try:
        view = StoreView.open(settings.store)
    except StoreError:
        return None
    try:
        beat = view.heartbeat()
    finally:
        view.close()
    return beat.pid if beat is not None and not beat.info.get("stopping") else None


def _tail(path: Path, lines: int, since: int = 0) -> list[str]:
    """The last ``lines`` lines of ``path`` from byte ``since`` (none when it is missing)."""
    try:
        with path.open("rb") as handle:
            handle.seek(since)
            data = handle.read()
    except OSError:
        return []
    text = data.decode("utf-8", errors="replace")
    return list(deque(text.splitlines(), maxlen=lines))


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _failed(what: str, stderr: Path, log: Path, log_before: int) -> LifecycleError:
    """``what`` happened, with the daemon's own words: its stderr, then its new log lines."""
    said = [f"--- the daemon said ({stderr}):", *_tail(stderr, ERROR_LINES)] if _size(
        stderr) else []
    new = _tail(log, ERROR_LINES, log_before)
    if new:
        said += [f"--- its log ({log}):", *new]
    return LifecycleError(visible("\n".join([what, *said])))


def start_detached(app: AppContext, settings: Settings,
                   timeout: float = START_TIMEOUT_S) -> int:
    """Start ``autoretry run`` in its own session and wait for its first heartbeat."""
    from opencode_autoretry.daemon.commands import LOG_FILE
    from opencode_autoretry.daemon.intake.hardening import NotPrivateError, private_state

    try:
        private_state(settings.store, settings.log_dir)
        settings.log_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    except (OSError, NotPrivateError) as exc:
        raise LifecycleError(f"cannot prepare {settings.log_dir}: {exc}") from exc
    log, stderr = settings.log_dir / LOG_FILE, settings.log_dir / STDERR_FILE
    log_before = _size(log)
    with stderr.open("wb") as out:
        process = subprocess.Popen(
            daemon_command(), stdin=subprocess.DEVNULL, stdout=out, stderr=out,
            env={**os.environ, **app.environment()}, start_new_session=True,
        )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        code = process.poll()
        if code is not None:
            raise _failed(f"the daemon exited at once (exit status {code})", stderr, log,
                          log_before)
        if heartbeat_pid(settings) == process.pid:
            return process.pid
        time.sleep(POLL_S)
    raise _failed(f"the daemon (pid {process.pid}) reported no heartbeat within "
                  f"{timeout:g} s; it may still be starting: see 'autoretry logs'",
                  stderr, log, log_before)


def stop_detached(settings: Settings, heartbeat: bool = True, quiet: bool = False) -> None:
    """SIGTERM to this state dir's daemon (``running_daemon``), then wait for it to end;
    ``quiet``: nothing said when none runs."""
    from opencode_autoretry.daemon.pidfile import is_alive

    running = running_daemon(settings, heartbeat)
    if running is None:
        if not quiet:
            click.echo("no daemon running")
        return
    try:
        os.kill(running.pid, signal.SIGTERM)
    except ProcessLookupError:
        if not quiet:
            click.echo("no daemon running")
        return
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while is_alive(running.pid):
        if time.monotonic() >= deadline:
            raise LifecycleError(f"the daemon (pid {running.pid}) did not stop within "
                                 f"{STOP_TIMEOUT_S:g} s of SIGTERM; stop it with: kill "
                                 f"{running.pid}")
        time.sleep(POLL_S)
    click.echo(f"stopped the daemon (pid {running.pid}), found by its {running.how}")


def do_start(app: AppContext) -> None:
    kind = service_kind()
    if kind != "none":
        _through_service(kind, "start")
        return
    settings = app.config().settings  # a bad config: run's own line and exit 2, before forking
    running = running_daemon(settings)
    if running is not None:
        click.echo(f"the daemon is already running (pid {running.pid})")
        return
    pid = start_detached(app, settings)
    from opencode_autoretry.daemon.commands import LOG_FILE

    click.echo(visible(f"started the daemon (pid {pid}); log: {settings.log_dir / LOG_FILE}"))


def do_stop(app: AppContext) -> None:
    kind = service_kind()
    if kind != "none":
        _through_service(kind, "stop")
        return
    stop_detached(app.settings())


@click.command("start")
@click.pass_obj
def start_command(app: AppContext) -> None:
    """Start the daemon: through the systemd user service or launchd agent setup made,
    else `autoretry run` in the background (waits for its first heartbeat; exit 1 with the
    daemon's own error when it does not start). AUTORETRY_SERVICE=none skips the service."""
    do_start(app)


@click.command("stop")
@click.pass_obj
def stop_command(app: AppContext) -> None:
    """Stop the daemon (SIGTERM, waits for it to end); exit 0 when none runs."""
    do_stop(app)


@click.command("restart")
@click.pass_obj
def restart_command(app: AppContext) -> None:
    """Stop the daemon, then start it (as `stop` and `start`)."""
    kind = service_kind()
    if kind != "none":
        _through_service(kind, "restart")
        return
    do_stop(app)
    do_start(app)


# -- logs -----------------------------------------------------------------------------------------


def log_settings(app: AppContext) -> Settings:
    """The settings naming the log dir; with a bad config, the defaults (its log is where a
    refused start was written) and a warning."""
    from opencode_autoretry.cli.context import BadConfig
    from opencode_autoretry.config.settings import Settings

    try:
        return app.settings()
    except BadConfig as exc:
        click.echo(f"warning: {exc.format_message()}; showing the default log", err=True)
        return Settings()


def follow(path: Path, offset: int) -> None:
    """Print what is appended to ``path`` from ``offset`` until Ctrl-C (a rotated or new file
    is read from its start)."""
    partial = b""
    while True:
        size = _size(path)
        if size < offset:  # rotated: daemon.log was renamed and a new one began
            offset, partial = 0, b""
        if size > offset:
            with path.open("rb") as handle:
                handle.seek(offset)
                data = partial + handle.read()
            offset += len(data) - len(partial)
            *lines, partial = data.split(b"\n")
            for line in lines:
                click.echo(visible(line.decode("utf-8", errors="replace")))
        time.sleep(POLL_S)


@click.command("logs")
@click.option("-f", "--follow", "following", is_flag=True,
              help="Keep printing new lines until Ctrl-C.")
@click.option("-n", "--lines", default=50, show_default=True, type=click.IntRange(min=0),
              help="How many of the last lines to print.")
@click.pass_obj
def logs_command(app: AppContext, following: bool, lines: int) -> None:
    """Print the end of the daemon's log (control characters shown as escapes)."""
    from opencode_autoretry.daemon.commands import LOG_FILE

    path = log_settings(app).log_dir / LOG_FILE
    if not paths.file_exists(path) and not following:
        click.echo(visible(f"no log yet: {path}"), err=True)
        return
    size = _size(path)
    for line in _tail(path, lines) if lines else []:
        click.echo(visible(line))
    if following:
        with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C is how -f ends
            follow(path, size)


COMMANDS: list[click.Command] = [start_command, stop_command, restart_command, logs_command]
