"""``autoretry run`` (the resident daemon) and ``autoretry on|off|status``.

``serve`` is the daemon's composition root: it builds the store, the bridge server, the DB
tailer and its -wal watcher, the retry timers and the loop, wires the signals, and runs the
loop in the main thread until SIGTERM/SIGINT.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import signal
import sys
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from types import FrameType
from typing import TYPE_CHECKING, Any, NoReturn

import click

from opencode_autoretry.cli.args import utf8_text

# The rest is imported by the functions that run it: `autoretry --help` lists these commands
# and must not load the daemon, APScheduler, watchdog or sqlite-utils to do so.
if TYPE_CHECKING:
    from opencode_autoretry.cli.context import AppContext
    from opencode_autoretry.config.load import Config
    from opencode_autoretry.config.settings import Settings

log = logging.getLogger("opencode_autoretry.daemon")
#: The daemon's log, in the configured log dir (rotated: daemon.log.1 ... .3).
LOG_FILE = "daemon.log"
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
#: A locked OpenCode DB holds the loop at most this long per read (then it is marked down).
LOOP_DB_TIMEOUT_S = 1.0


def setup_logging(settings: Settings, foreground: bool) -> None:
    import logging.handlers

    from opencode_autoretry.daemon.intake.hardening import RedactingFilter

    settings.log_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    handlers: list[logging.Handler] = [logging.handlers.RotatingFileHandler(
        settings.log_dir / LOG_FILE, maxBytes=5_000_000, backupCount=3, encoding="utf-8")]
    if foreground:
        handlers.append(logging.StreamHandler(sys.stderr))
    root = logging.getLogger()
    for handler in handlers:
        handler.setFormatter(logging.Formatter(LOG_FORMAT))
        handler.addFilter(RedactingFilter())
        root.addHandler(handler)
    root.setLevel(logging.DEBUG if settings.verbose else logging.INFO)
    logging.getLogger("apscheduler").setLevel(logging.WARNING)
    logging.getLogger("watchdog").setLevel(logging.WARNING)
    # Apprise's HTTP client logs each request line (a bot token is in Telegram's path).
    logging.getLogger("urllib3").setLevel(logging.WARNING)


def serve(
    config: Config,
    reload_check: Callable[[], str | None] | None = None,
    doctor_line: Callable[[], Mapping[str, Any]] | None = None,
) -> bool:
    """Run the daemon until a signal (``config`` validated beforehand); True when it stopped to
    restart with a new configuration (SIGHUP, ``reload_check`` found it good).

    The pid file is written once the socket is ours (a second daemon, refused there, must not
    overwrite the first one's) and removed on the way out, unless the daemon restarts in place
    (the same pid goes on)."""
    from opencode_autoretry.clock import SystemClock
    from opencode_autoretry.daemon.health import DoctorLine
    from opencode_autoretry.daemon.inbox import Reload, Shutdown
    from opencode_autoretry.daemon.intake.batch_queue import BatchQueue
    from opencode_autoretry.daemon.intake.bridges import BridgeServer
    from opencode_autoretry.daemon.intake.sources import DbTailer
    from opencode_autoretry.daemon.intake.watch import WalWatcher
    from opencode_autoretry.daemon.loop import Loop
    from opencode_autoretry.daemon.notifications.notifier import start_notifier
    from opencode_autoretry.daemon.parts import PartHealth
    from opencode_autoretry.daemon.pidfile import pid_file_path, remove_pid_file, write_pid_file
    from opencode_autoretry.daemon.scheduler import RetryScheduler
    from opencode_autoretry.daemon.telemetry.recorder import start_telemetry
    from opencode_autoretry.diagnostics.index.keeper import IndexKeeper
    from opencode_autoretry.opencode.db import OpenCodeDB
    from opencode_autoretry.store.database import Store

    settings = config.settings
    store = Store.open(settings.store)
    inbox: queue.Queue[object] = BatchQueue()  # the bridge readers put a read's lines at once
    parts = PartHealth()  # what is broken: logged once, shown by `autoretry status`
    notifier = start_notifier(config.notify, inbox.put)  # workers post their results to the inbox
    # issue 24: OpenTelemetry is imported only when [telemetry] otlp_endpoint is set
    telemetry = start_telemetry(config.telemetry, store)
    bridges = BridgeServer(settings.socket, inbox, parts=parts)
    timers = RetryScheduler(inbox)
    doctor = DoctorLine(doctor_line) if doctor_line is not None else None  # issue 21
    tailer = DbTailer(lambda: OpenCodeDB.open(settings.opencode_db), inbox, settings.poll_interval)
    watcher = WalWatcher(settings.opencode_db, tailer.wakeup)
    loop = Loop(config, store, bridges,
                lambda: OpenCodeDB.open(settings.opencode_db, timeout=LOOP_DB_TIMEOUT_S), timers,
                SystemClock(), parts=parts, notifier=notifier, telemetry=telemetry,
                post=inbox.put, doctor_line=doctor.latest if doctor is not None else None)

    def stop(signum: int, _frame: FrameType | None) -> None:
        inbox.put(Shutdown(signal.Signals(signum).name))

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    if reload_check is not None:  # checked and acted on by the loop, on its own thread
        signal.signal(signal.SIGHUP, lambda _signum, _frame: inbox.put(Reload(reload_check)))
    # The report index (issue 12): kept current in its own thread, its own file and writer.
    keeper = IndexKeeper(settings.opencode_db, settings.store.parent, SystemClock().now,
                         settings.runaway_steps)
    bridges.start()
    pid_file = pid_file_path()
    try:
        write_pid_file(pid_file, os.getpid())
        keeper.start()
        if doctor is not None:
            doctor.start()
        timers.start()
        tailer.prime()
        tailer.start()
        watching = watcher.start()
        log.info("autoretry daemon %s: socket %s, OpenCode DB %s (%s), store %s, log %s, "
                 "pid file %s", os.getpid(), settings.socket, settings.opencode_db,
                 "watched" if watching else "polled", settings.store, settings.log_dir, pid_file)
        if settings.observing:
            log.warning("OBSERVE MODE: every decision is recorded as what autoretry would "
                        "do; nothing is sent, aborted or switched (mode = \"observe\")")
        loop.run(inbox)
    finally:
        keeper.stop()
        if doctor is not None:
            doctor.stop()
        watcher.stop()
        tailer.stop()
        timers.shutdown()
        bridges.stop()
        if notifier is not None:
            notifier.stop()
        if telemetry is not None:  # the last spans and counters, within a bound
            telemetry.shutdown()
        store.close()
        if not loop.reload_requested:
            remove_pid_file(pid_file, os.getpid())
    if loop.reload_requested:
        return True
    log.info("autoretry daemon stopped")
    return False


def restart_in_place() -> NoReturn:
    """Run this daemon's own command line again in this process (SIGHUP's reload): every part
    is rebuilt from the new configuration, and the pid, which services and the pid file
    know, stays the same."""
    logging.shutdown()  # flushed: the new process appends to the log
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, *sys.orig_argv[1:]])


@click.command("run")
@click.option("-v", "--verbose", is_flag=True, help="Log every event and decision (debug).")
@click.option("--foreground", is_flag=True, help="Also log to stderr.")
@click.option("--observe", is_flag=True,
              help="Observe mode: judge and record what would be done; send, abort and "
                   "switch nothing (as mode = \"observe\").")
@click.pass_obj
def run_command(app: AppContext, verbose: bool, foreground: bool, observe: bool) -> None:
    """Run the daemon: watch OpenCode, classify failed turns, continue them within budget.

    It writes its pid to the state dir's daemon.pid, and on SIGHUP restarts in place with
    the configuration as it is then (a bad one is refused in the log; the daemon goes on)."""
    from opencode_autoretry.cli.context import BadConfig
    from opencode_autoretry.daemon.intake.bridges import SocketBusyError
    from opencode_autoretry.daemon.intake.hardening import NotPrivateError, private_state
    from opencode_autoretry.store.database import StoreError

    more: dict[str, object] = {"verbose": True} if verbose else {}
    if observe:
        more["mode"] = "observe"
    try:  # before anything starts: a bad config starts nothing
        config = app.config(**more)
    except BadConfig as exc:
        log_refusal(app, exc.format_message())
        raise
    settings = config.settings
    private_state(settings.store, settings.log_dir)  # before the first file is created
    setup_logging(settings, foreground)

    def check_new_config() -> str | None:
        try:
            app.fresh_config(**more)
        except BadConfig as exc:
            return exc.format_message()
        return None

    from opencode_autoretry.diagnostics.doctor.rereads import (
        ProcessWalk,
        VersionReader,
        repeated_machine,
    )

    # Kept from one run of the checks to the next: the version and the process table are read
    # again only as far as they changed (the two biggest parts of the line's CPU, issue 21).
    version, processes = VersionReader(), ProcessWalk()

    def doctor_line() -> dict[str, str]:  # as diagnose would run the checks, files read anew
        from opencode_autoretry.clock import SystemClock
        from opencode_autoretry.diagnostics.doctor.report import summary_record

        return summary_record(app.copy(), SystemClock().now(),
                              repeated_machine(version, processes))

    try:
        restart = serve(config, check_new_config, doctor_line)
    except (SocketBusyError, StoreError, NotPrivateError) as exc:
        raise click.ClickException(str(exc)) from exc
    if restart:
        restart_in_place()
    sys.exit(0)


def log_refusal(app: AppContext, line: str) -> None:
    """A daemon started in the background (install.sh, a service) has no terminal: the line
    saying why it refused to start goes to daemon.log too, where users look. The log dir is
    the configured one when the top level of the config is readable, else the default."""
    from opencode_autoretry.cli.context import BadConfig
    from opencode_autoretry.config.settings import Settings
    from opencode_autoretry.daemon.intake.hardening import NotPrivateError, private_state

    try:
        settings = app.settings()
    except BadConfig:
        settings = Settings()  # the default paths
    try:
        private_state(settings.store, settings.log_dir)
        setup_logging(settings, foreground=False)
    except (OSError, NotPrivateError):  # nowhere to write: the terminal line is all there is
        return
    log.error("not starting: bad configuration: %s", line)


class StoreUnusable(click.ClickException):
    """The store cannot be opened or written: one line and exit 2 (found by fuzzing: a
    traceback before)."""

    exit_code = 2


def _switch(app: AppContext, on: bool, session: str | None) -> None:
    from opencode_autoretry.store.database import Store, StoreError

    settings = app.settings()
    try:
        store = Store.open(settings.store)
    except StoreError as exc:
        raise StoreUnusable(str(exc)) from exc
    try:
        store.set_enabled(on, datetime.now(tz=UTC), session)
    finally:
        store.close()
    scope = f"session {session}" if session else "all sessions"
    note = "" if on else " (the daemon cancels pending retries within a tick)"
    click.echo(f"autoretry {'on' if on else 'off'} for {scope}{note}")


_SESSION = click.option("--session", metavar="ID", help="Only this OpenCode session.",
                        callback=utf8_text)


@click.command("on")
@_SESSION
@click.pass_obj
def on_command(app: AppContext, session: str | None) -> None:
    """Switch automatic recovery on (everywhere, or for one session)."""
    _switch(app, True, session)


@click.command("off")
@_SESSION
@click.pass_obj
def off_command(app: AppContext, session: str | None) -> None:
    """Switch automatic recovery off; pending retries are cancelled."""
    _switch(app, False, session)


@click.command("status")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("-w", "--watch", is_flag=True,
              help="Redraw the status in place until Ctrl-C (plain text, printed once per "
                   "interval, when the output is not a terminal).")
@click.option("--interval", type=click.FloatRange(min=0.2), default=2.0, show_default=True,
              metavar="SECONDS", help="With --watch: seconds between two redraws.")
@click.pass_obj
def status_command(app: AppContext, as_json: bool, watch: bool, interval: float) -> None:
    """Daemon, bridges, watched sessions, budgets, pending retries and last decisions."""
    from opencode_autoretry.daemon.control import render_status
    from opencode_autoretry.terminal_text import visible

    if watch and as_json:
        raise click.UsageError("--watch and --json do not go together")
    settings = app.config().settings
    if watch:
        watch_status(settings, interval)
        return
    report = read_status(settings, datetime.now(tz=UTC))
    report["paths"] = where_things_are(app, settings)
    # status shows ids, model ids and reasons straight from the store: one
    # escape of the whole plain text (it has no colour) covers them all (issue 20)
    text = render_status(report) + "\n" + render_paths(report["paths"])
    click.echo(json.dumps(report, indent=2) if as_json else visible(text))


def read_status(settings: Settings, now: datetime, decisions: int = 10) -> dict[str, Any]:
    """``status``'s report, read from a freshly opened view of the store."""
    from opencode_autoretry.daemon.control import status_report
    from opencode_autoretry.store.database import StoreError, StoreView

    try:
        view = StoreView.open(settings.store)
    except StoreError as exc:
        raise StoreUnusable(str(exc)) from exc
    try:
        return status_report(view, now, decisions, mode=settings.mode)
    finally:
        view.close()


def watch_status(settings: Settings, interval: float) -> None:
    """``status --watch``: rich's live display on a terminal, plain text otherwise; Ctrl-C
    (and a closed pipe) end it with exit 0."""
    from opencode_autoretry.daemon.live_status import watch_live, watch_plain

    def read(now: datetime) -> dict[str, Any]:
        return read_status(settings, now)

    def clock() -> datetime:
        return datetime.now(tz=UTC)

    try:
        if sys.stdout.isatty():
            watch_live(read, clock, interval)
        else:
            watch_plain(read, clock, interval, sys.stdout)
    except KeyboardInterrupt:  # how a watch ends: no traceback, no "Aborted!", exit 0
        return
    except BrokenPipeError:  # `status --watch | head`: the reader is gone
        # Python flushes stdout once more at exit: point it at nothing so that fails quietly.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def where_things_are(app: AppContext, settings: Settings) -> dict[str, str | bool]:
    """The files a user looks for: the config (and whether it exists), the log, the store."""
    from opencode_autoretry.config.paths import file_exists
    from opencode_autoretry.config.settings import config_file_for

    config = config_file_for(os.environ, app.config_path)
    return {"config": str(config), "config_exists": file_exists(config),
            "log": str(settings.log_dir / LOG_FILE), "store": str(settings.store)}


def render_paths(where: dict[str, str | bool]) -> str:
    missing = "" if where["config_exists"] else " (not found: the defaults apply)"
    return (f"config: {where['config']}{missing}\nlog: {where['log']}\n"
            f"store: {where['store']}")


COMMANDS: list[click.Command] = [run_command, on_command, off_command, status_command]
