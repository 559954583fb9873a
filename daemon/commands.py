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
from datetime import UTC, datetime
from types import FrameType
from typing import TYPE_CHECKING

import click

from opencode_autoretry.cli.args import utf8_text

# The rest is imported by the functions that run it: `autoretry --help` lists these commands
# and must not load the daemon, APScheduler, watchdog or sqlite-utils to do so.
if TYPE_CHECKING:
    from opencode_autoretry.cli.context import AppContext
    from opencode_autoretry.config.load import Config
    from opencode_autoretry.config.settings import Settings

log = logging.getLogger("opencode_autoretry.daemon")
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
#: A locked OpenCode DB holds the loop at most this long per read (then it is marked down).
LOOP_DB_TIMEOUT_S = 1.0


def setup_logging(settings: Settings, foreground: bool) -> None:
    import logging.handlers

    from opencode_autoretry.daemon.intake.hardening import RedactingFilter

    settings.log_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    handlers: list[logging.Handler] = [logging.handlers.RotatingFileHandler(
        settings.log_dir / "daemon.log", maxBytes=5_000_000, backupCount=3, encoding="utf-8")]
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


def serve(config: Config) -> int:
    """Run the daemon until a signal; 0 on a clean stop (``config`` validated beforehand)."""
    from opencode_autoretry.clock import SystemClock
    from opencode_autoretry.daemon.inbox import Shutdown
    from opencode_autoretry.daemon.intake.bridges import BridgeServer
    from opencode_autoretry.daemon.intake.sources import DbTailer
    from opencode_autoretry.daemon.intake.watch import WalWatcher
    from opencode_autoretry.daemon.loop import Loop
    from opencode_autoretry.daemon.notifications.notifier import start_notifier
    from opencode_autoretry.daemon.parts import PartHealth
    from opencode_autoretry.daemon.scheduler import RetryScheduler
    from opencode_autoretry.diagnostics.index.keeper import IndexKeeper
    from opencode_autoretry.opencode.db import OpenCodeDB
    from opencode_autoretry.store.database import Store

    settings = config.settings
    store = Store.open(settings.store)
    inbox: queue.Queue[object] = queue.Queue()
    parts = PartHealth()  # what is broken: logged once, shown by `autoretry status`
    notifier = start_notifier(config.notify, inbox.put)  # workers post their results to the inbox
    bridges = BridgeServer(settings.socket, inbox, parts=parts)
    timers = RetryScheduler(inbox)
    tailer = DbTailer(lambda: OpenCodeDB.open(settings.opencode_db), inbox, settings.poll_interval)
    watcher = WalWatcher(settings.opencode_db, tailer.wake)
    loop = Loop(config, store, bridges,
                lambda: OpenCodeDB.open(settings.opencode_db, timeout=LOOP_DB_TIMEOUT_S), timers,
                SystemClock(), parts=parts, notifier=notifier)

    def stop(signum: int, _frame: FrameType | None) -> None:
        inbox.put(Shutdown(signal.Signals(signum).name))

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    # The report index (issue 12): kept current in its own thread, its own file and writer.
    keeper = IndexKeeper(settings.opencode_db, settings.store.parent, SystemClock().now,
                         settings.runaway_steps)
    bridges.start()
    try:
        keeper.start()
        timers.start()
        tailer.prime()
        tailer.start()
        watching = watcher.start()
        log.info("autoretry daemon %s: socket %s, OpenCode DB %s (%s)", os.getpid(),
                 settings.socket, settings.opencode_db, "watched" if watching else "polled")
        loop.run(inbox)
    finally:
        keeper.stop()
        watcher.stop()
        tailer.stop()
        timers.shutdown()
        bridges.stop()
        if notifier is not None:
            notifier.stop()
        store.close()
    log.info("autoretry daemon stopped")
    return 0


@click.command("run")
@click.option("-v", "--verbose", is_flag=True, help="Log every event and decision (debug).")
@click.option("--foreground", is_flag=True, help="Also log to stderr.")
@click.pass_obj
def run_command(app: AppContext, verbose: bool, foreground: bool) -> None:
    """Run the daemon: watch OpenCode, classify failed turns, continue them within budget."""
    from opencode_autoretry.cli.context import BadConfig
    from opencode_autoretry.daemon.intake.bridges import SocketBusyError
    from opencode_autoretry.daemon.intake.hardening import NotPrivateError, private_state
    from opencode_autoretry.store.database import StoreError

    try:  # before anything starts: a bad config starts nothing
        config = app.config(**({"verbose": True} if verbose else {}))
    except BadConfig as exc:
        log_refusal(app, exc.format_message())
        raise
    settings = config.settings
    private_state(settings.store, settings.log_dir)  # before the first file is created
    setup_logging(settings, foreground)
    try:
        sys.exit(serve(config))
    except (SocketBusyError, StoreError, NotPrivateError) as exc:
        raise click.ClickException(str(exc)) from exc


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
@click.pass_obj
def status_command(app: AppContext, as_json: bool) -> None:
    """Daemon, bridges, watched sessions, budgets, pending retries and last decisions."""
    from opencode_autoretry.daemon.control import render_status, status_report
    from opencode_autoretry.store.database import StoreError, StoreView
    from opencode_autoretry.terminal_text import visible

    try:
        view = StoreView.open(app.config().settings.store)
    except StoreError as exc:
        raise StoreUnusable(str(exc)) from exc
    try:
        report = status_report(view, datetime.now(tz=UTC))
    finally:
        view.close()
    # status shows ids, model ids and reasons straight from the store: one
    # escape of the whole plain text (it has no colour) covers them all (issue 20)
    click.echo(json.dumps(report, indent=2) if as_json else visible(render_status(report)))


COMMANDS: list[click.Command] = [run_command, on_command, off_command, status_command]
