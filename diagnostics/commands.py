"""The report commands: resolve settings, build, render. ``cli.py`` attaches ``COMMANDS``.

Exit codes: 0 ok; 1 unknown or ambiguous session (with the closest matches); 2 OpenCode's DB
missing, unsupported, corrupt or locked, or the store unreadable (one line, no traceback).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

import click

from opencode_autoretry.cli import process_end
from opencode_autoretry.cli.args import DAYS, days_or_none, utf8_text
from opencode_autoretry.clock import SystemClock
from opencode_autoretry.config import paths
from opencode_autoretry.terminal_text import visible

# Each report imports what it runs, when it runs: `autoretry --help` lists these commands and
# must not load the classifier, the store (sqlite-utils) or the other reports to do so.
if TYPE_CHECKING:
    from opencode_autoretry.cli.context import AppContext
    from opencode_autoretry.config.settings import Settings
    from opencode_autoretry.diagnostics.index.report_index import IndexedReports
    from opencode_autoretry.diagnostics.records import DaemonRecords
    from opencode_autoretry.models import Session
    from opencode_autoretry.opencode.db import OpenCodeDB
    from opencode_autoretry.store.database import Heartbeat

JSON_OPTION = click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")


class ReportError(click.ClickException):
    """A one-line failure (the DB or the store cannot be read): exit 2."""

    exit_code = 2


@contextmanager
def opened(db_path: Path, reader: type[OpenCodeDB] | None = None) -> Iterator[OpenCodeDB]:
    """OpenCode's DB, read-only; every failure becomes one line and exit 2."""
    from opencode_autoretry.opencode.db import DbError, OpenCodeDB

    try:
        db = (reader or OpenCodeDB).open(db_path)
        try:
            yield db
        finally:
            db.close()
    except DbError as exc:
        raise ReportError(str(exc)) from exc


def records_from(
    store: Path, session_id: str | None = None, since: datetime | None = None
) -> DaemonRecords:
    from opencode_autoretry.diagnostics.records import load_records
    from opencode_autoretry.store.database import StoreError

    try:
        return load_records(store, session_id, since)
    except StoreError as exc:
        raise ReportError(str(exc)) from exc


def with_children(
    records: DaemonRecords, store: Path, db: OpenCodeDB, session_id: str,
    since: datetime | None = None,
) -> DaemonRecords:
    """A session's records plus the aborts of its hung subagents (issue 9)."""
    from opencode_autoretry.diagnostics.subagent_view import with_child_aborts
    from opencode_autoretry.store.database import StoreError

    try:
        return with_child_aborts(records, store, db, session_id, since)
    except StoreError as exc:
        raise ReportError(str(exc)) from exc


def resolve_session(db: OpenCodeDB, ref: str) -> Session:
    """An id, unique id prefix or slug; otherwise exit 1 naming the closest sessions."""
    found = db.find_sessions(ref)
    if len(found) == 1:
        return found[0]
    if found:
        listed = ", ".join(f"{s.id} ({s.slug})" for s in found[:10])
        raise click.ClickException(f"{ref!r} matches {len(found)} sessions: {listed}")
    closest = db.closest_sessions(ref)
    hint = ", ".join(f"{s.id} ({s.slug})" for s in closest) or "the database has no sessions"
    raise click.ClickException(f"no session {ref!r}; closest: {hint}")


def bridge_path() -> Path:
    return paths.opencode_config_dir() / "plugins" / "autoretry.js"


def index_options(command: Callable[..., None]) -> Callable[..., None]:
    """``--rebuild-index`` / ``--no-index`` (the report index: docs/reports.md)."""
    command = click.option(
        "--no-index",
        is_flag=True,
        help="Scan OpenCode's DB without the report index (slower, the same output).",
    )(command)
    return click.option(
        "--rebuild-index",
        is_flag=True,
        help="Rebuild the report index from scratch first (it rebuilds by itself when "
        "OpenCode's DB is replaced, vacuumed or loses rows).",
    )(command)


def prepared_index(settings: Settings, rebuild: bool, skip: bool) -> IndexedReports | None:
    """The report index of OpenCode's DB, up to date (a progress bar while it is built)."""
    if skip:
        return None
    if not rebuild and _scanned_first(settings):
        return None
    from opencode_autoretry.diagnostics.index.report_index import prepare
    from opencode_autoretry.diagnostics.progress import scan_progress

    with scan_progress() as progress:
        return prepare(
            settings.opencode_db, settings.store.parent, progress=progress, rebuild=rebuild
        )


def _scanned_first(settings: Settings) -> bool:
    """A large database without a usable index: this report scans (as fast as ever) and the
    index is built in the background once the report is out (index/background.py)."""
    from opencode_autoretry.diagnostics.index.background import scan_instead, start_build

    why = scan_instead(settings.opencode_db, settings.store.parent)
    if why is None:
        return False
    if why == "building":
        click.echo("autoretry: the report index is being built in the background; "
                   "scanning the database this time", err=True)
        return True
    click.echo("autoretry: no report index of this database yet: scanning it this time; "
               "the index is built in the background for the next reports", err=True)
    click.get_current_context().call_on_close(
        lambda: start_build(settings.opencode_db, settings.store.parent, settings.runaway_steps)
    )
    return True


@click.command("diagnose")
@click.argument("days", type=DAYS, default=7)
@click.option("--limit", type=click.IntRange(min=0), default=20, help="Rows per kind (0 = all).")
@JSON_OPTION
@index_options
@click.pass_obj
def diagnose(
    app: AppContext, days: int, limit: int, as_json: bool, rebuild_index: bool, no_index: bool
) -> None:
    """Health check plus every abnormal step of the last DAYS days (0 = all)."""
    process_end.end_without_teardown()  # a read-only report: nothing to tear down
    from opencode_autoretry.diagnostics.diagnose import (
        build_diagnose,
        diagnose_json,
        render_diagnose,
    )
    from opencode_autoretry.diagnostics.index.report_index import save
    from opencode_autoretry.diagnostics.progress import scan_progress
    from opencode_autoretry.diagnostics.render import Style, for_terminal
    from opencode_autoretry.diagnostics.window import window_start

    settings, now = app.settings(), SystemClock().now()
    records = records_from(settings.store, since=window_start(now, days))
    index = prepared_index(settings, rebuild_index, no_index)
    reader = index.reader if index else None
    with opened(settings.opencode_db, reader) as db, scan_progress() as progress:
        report = build_diagnose(
            db,
            records,
            now=now,
            days=days,
            bridge_path=bridge_path(),
            runaway_steps=settings.runaway_steps,
            progress=progress,
            memo=index.memo if index else None,
        )
    process_end.leave(report)
    save(index)
    style = Style.for_stream()
    if not as_json:  # issue 11: doctor's summary line first (--json has no use for it)
        click.echo(visible(doctor_line(app, settings, records.heartbeat)))
    click.echo(diagnose_json(report, limit) if as_json
               else for_terminal(render_diagnose(report, style, limit), style))


def doctor_line(app: AppContext, settings: Settings, beat: Heartbeat | None) -> str:
    """The line the live daemon recorded with its heartbeat while it still holds, or the one
    the last report kept on the same terms; else the checks run now (they load the whole
    config and more: issue 21)."""
    from opencode_autoretry.diagnostics.doctor.recorded import (
        keep_summary,
        kept_summary,
        recorded_summary,
    )

    opencode_config, now = paths.opencode_config_dir().expanduser(), SystemClock().now()
    recorded = recorded_summary(beat, settings, opencode_config, now) or kept_summary(
        settings, opencode_config, beat, now
    )
    if recorded is not None:
        return recorded
    from opencode_autoretry.diagnostics.doctor.report import quick_summary

    line = quick_summary(app)
    keep_summary(line, settings, opencode_config, beat, now)
    return line


@click.command("timeline")
@click.argument("session", callback=utf8_text)
@JSON_OPTION
@click.option(
    "--html",
    "html_file",
    type=click.Path(dir_okay=False, writable=True, allow_dash=True, path_type=Path),
    help="Write the session as one self-contained HTML page (a time axis, details on "
    "hover) to FILE ('-': standard output).",
)
@click.pass_obj
def timeline(app: AppContext, session: str, as_json: bool, html_file: Path | None) -> None:
    """One session's steps, parts and the daemon's decisions (id, id prefix or slug)."""
    process_end.end_without_teardown()
    if as_json and html_file is not None:
        raise click.UsageError("--json and --html are exclusive")

    from opencode_autoretry.diagnostics.render import Style, for_terminal
    from opencode_autoretry.diagnostics.timeline.report import (
        build_timeline,
        render_timeline,
        timeline_json,
    )

    settings, now = app.settings(), SystemClock().now()
    with opened(settings.opencode_db) as db:
        found = resolve_session(db, session)
        records = with_children(records_from(settings.store, found.id), settings.store, db,
                                found.id)
        report = build_timeline(db, found, records, now=now)
        process_end.leave(report)
        if html_file is not None:
            from opencode_autoretry.diagnostics.timeline.page import timeline_html

            write_page(html_file, timeline_html(db, report, records, now=now))
            return
    style = Style.for_stream()
    click.echo(timeline_json(report) if as_json
               else for_terminal(render_timeline(report, style), style))


def write_page(target: Path, page: str) -> None:
    page = visible(page)  # `--html -` prints it: no control of a title may reach the terminal
    if str(target) == "-":
        click.echo(page, nl=False)
        return
    try:
        target.write_text(page, encoding="utf-8")
    except OSError as exc:
        raise ReportError(f"cannot write {target}: {exc.strerror or exc}") from exc
    click.echo(f"wrote {target}", err=True)


@click.command("errors")
@click.argument("keyword", required=False, callback=utf8_text)
@JSON_OPTION
@click.pass_obj
def errors(app: AppContext, keyword: str | None, as_json: bool) -> None:
    """The 10 newest errored steps, or at most 5 whose error contains KEYWORD."""
    process_end.end_without_teardown()
    from opencode_autoretry.diagnostics.errors import build_errors, errors_json, render_errors
    from opencode_autoretry.diagnostics.render import Style, for_terminal

    settings, now = app.settings(), SystemClock().now()
    with opened(settings.opencode_db) as db:
        report = build_errors(db, keyword, now=now)
    process_end.leave(report)
    style = Style.for_stream()
    click.echo(errors_json(report) if as_json
               else for_terminal(render_errors(report, style), style))


@click.command("trace")
@click.argument("scope", default="7", metavar="[DAYS|SESSION]", callback=utf8_text)
@JSON_OPTION
@index_options
@click.pass_obj
def trace(app: AppContext, scope: str, as_json: bool, rebuild_index: bool, no_index: bool) -> None:
    """Each continuation with its trigger and outcome, and the decisions not to act."""
    process_end.end_without_teardown()
    from opencode_autoretry.diagnostics.index.report_index import save
    from opencode_autoretry.diagnostics.render import Style, for_terminal
    from opencode_autoretry.diagnostics.trace.report import build_trace, render_trace, trace_json
    from opencode_autoretry.diagnostics.window import window_start

    settings, now = app.settings(), SystemClock().now()
    days = days_or_none(scope)
    index = prepared_index(settings, rebuild_index, no_index or days is None)
    with opened(settings.opencode_db, index.reader if index else None) as db:
        sid = None if days is not None else resolve_session(db, scope).id
        since = window_start(now, days) if days is not None else None
        records = records_from(settings.store, sid, since)
        if sid is not None:
            records = with_children(records, settings.store, db, sid, since)
        memo = index.memo if index else None
        report = build_trace(
            db, records, now=now, since=since, days=days, session_id=sid, memo=memo,
            rendered=True,  # the index's kept continuations, for the text and --json
        )
    process_end.leave(report)
    save(index)
    style = Style.for_stream()
    click.echo(trace_json(report) if as_json else for_terminal(render_trace(report, style), style))


COMMANDS: list[click.Command] = [diagnose, timeline, errors, trace]
