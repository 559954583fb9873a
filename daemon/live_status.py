"""``autoretry status --watch`` (issue 24): the status redrawn in place until Ctrl-C.

On a terminal, rich's live display redraws one view every interval; anywhere else (a pipe, a
file, a CI log) the same view is printed once per interval as plain text, with no cursor
movement. The view is built by ``render_watch`` from ``control.status_report``'s mapping, so
it shows what ``status`` shows, and its whole text goes through ``terminal_text.visible``
before rich sees it (ids, titles and reasons come from the store; rich's ``Text`` does not
read markup, so brackets in them are printed as they are).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from datetime import datetime, tzinfo
from typing import IO, Any

from opencode_autoretry.daemon.control import local_time
from opencode_autoretry.terminal_text import visible

#: Seconds between two redraws, unless ``--interval`` says otherwise.
DEFAULT_INTERVAL_S = 2.0
#: How many of the newest decisions the view lists.
WATCH_DECISIONS = 8

#: Reads a fresh report for ``now`` (the store is re-opened each time: the daemon writes it).
ReportReader = Callable[[datetime], Mapping[str, Any]]


def countdown(due_iso: str | None, now: datetime) -> str:
    """When a pending continuation is due, relative to ``now``: "in 12 s", "due now",
    "overdue 3 s" (a daemon that is down leaves its intents overdue)."""
    if not due_iso:
        return "no due time"
    seconds = round((datetime.fromisoformat(due_iso) - now).total_seconds())
    if seconds > 0:
        return f"in {_duration(seconds)}"
    if seconds == 0:
        return "due now"
    return f"overdue {_duration(-seconds)}"


def _duration(seconds: int) -> str:
    if seconds < 120:
        return f"{seconds} s"
    minutes, rest = divmod(seconds, 60)
    if minutes < 120:
        return f"{minutes} min {rest:02d} s"
    return f"{minutes // 60} h {minutes % 60:02d} min"


def _daemon_line(report: Mapping[str, Any], now: datetime, zone: tzinfo | None) -> str:
    daemon = report["daemon"]
    state = (f"daemon running (pid {daemon['pid']}, heartbeat {daemon['heartbeat_age_s']} s ago)"
             if daemon["running"] else "daemon NOT running")
    switch = "on" if report["enabled"] else "OFF"
    return (f"autoretry {switch} · {state} · {len(report['bridges'])} bridge(s) · "
            f"{local_time(now.isoformat(), zone)}")


def _waits_on(session_id: str, entry: Mapping[str, Any], report: Mapping[str, Any],
              now: datetime) -> str:
    """What the session waits on: the user (a permission or a question: autoretry never
    continues it then), else a continuation of autoretry's, else nothing."""
    waiting = entry.get("waiting")
    if isinstance(waiting, list) and waiting:
        return f"waiting on the user: {', '.join(str(w) for w in waiting)}"
    mine = [p for p in report["pending"] if p["session_id"] == session_id]
    if mine:
        first = mine[0]
        when = ("sent" if first["state"] == "sent" else countdown(first["due"], now))
        return f"waiting on autoretry: continuation #{first['id']} ({when})"
    return "waiting on nothing"


def _session_lines(report: Mapping[str, Any], now: datetime) -> list[str]:
    sessions: Mapping[str, Mapping[str, Any]] = report["sessions"]
    lines = [f"sessions ({len(sessions)}):"]
    for session_id, entry in sessions.items():
        waits = _waits_on(session_id, entry, report, now)
        lines.append(f"  {session_id}  {entry.get('status') or '?'}  {waits}")
    if not sessions:
        lines.append("  none (no OpenCode window with the bridge is open)")
    if report["no_owner"]:
        lines.append("  no live owner (never continued): " + ", ".join(report["no_owner"]))
    return lines


def _pending_lines(report: Mapping[str, Any], now: datetime, zone: tzinfo | None) -> list[str]:
    pending: list[Mapping[str, Any]] = report["pending"]
    lines = [f"pending continuations ({len(pending)}):"]
    for entry in pending:
        when = ("sent, waiting for OpenCode to confirm" if entry["state"] == "sent"
                else f"due {local_time(entry['due'], zone)} ({countdown(entry['due'], now)})")
        lines.append(f"  #{entry['id']} {entry['session_id']}  {when}")
    if not pending:
        lines.append("  none")
    return lines


def _decision_lines(report: Mapping[str, Any], zone: tzinfo | None) -> list[str]:
    decisions: list[Mapping[str, Any]] = report["decisions"][-WATCH_DECISIONS:]
    lines = ["last decisions:"]
    for entry in reversed(decisions):  # newest first: the top of the view is what changed
        lines.append(f"  {local_time(entry['at'], zone)} {entry['session_id']} "
                     f"{entry['kind'] or '-'} -> {entry['action']}: {entry['reason']}")
    if not decisions:
        lines.append("  none on record")
    return lines


def render_watch(report: Mapping[str, Any], now: datetime, zone: tzinfo | None = None) -> str:
    """The live view's text: the daemon, the sessions and what each waits on, the pending
    continuations with their countdown, the newest decisions. Already made safe for a
    terminal (``visible``)."""
    lines = [_daemon_line(report, now, zone), *_session_lines(report, now),
             *_pending_lines(report, now, zone), *_decision_lines(report, zone)]
    return visible("\n".join(lines))


def watch_plain(read: ReportReader, clock: Callable[[], datetime], interval: float,
                out: IO[str]) -> None:
    """Not a terminal: the view printed once per interval, each followed by a blank line;
    forever (Ctrl-C, SIGPIPE or the reader ends it)."""
    while True:
        now = clock()
        out.write(render_watch(read(now), now) + "\n\n")
        out.flush()
        time.sleep(interval)


def watch_live(read: ReportReader, clock: Callable[[], datetime], interval: float) -> None:
    """A terminal: rich's live display, redrawn in place every interval, forever."""
    from rich.console import Console
    from rich.live import Live
    from rich.text import Text

    def view() -> Text:
        now = clock()
        text = Text(render_watch(read(now), now))
        text.stylize("bold", 0, text.plain.find("\n"))
        text.append(f"\n\nevery {interval:g} s · Ctrl-C to quit", style="dim")
        return text

    console = Console()
    with Live(view(), console=console, auto_refresh=False, transient=False) as live:
        while True:
            time.sleep(interval)
            live.update(view(), refresh=True)
