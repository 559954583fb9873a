"""`autoretry status --watch` (issue 24 item 5): the live view, its plain-text form off a
terminal, and Ctrl-C ending it with exit 0 and no traceback."""

from __future__ import annotations

import io
import os
import pty
import re
import select
import signal
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from opencode_autoretry.causes import Cause, Facts
from opencode_autoretry.cli.main import main
from opencode_autoretry.daemon import live_status
from opencode_autoretry.daemon.live_status import countdown, render_watch, watch_plain
from opencode_autoretry.models import Action, Decision, Kind
from opencode_autoretry.store.database import Store

NOW = datetime(2026, 11, 30, 15, 30, tzinfo=UTC)
#: A waiting bound only: the first view is printed as soon as the CLI has started.
FIRST_VIEW_TIMEOUT_S = 120


def fixture_report() -> dict[str, Any]:
    """What `status_report` returns for a daemon with two sessions, one pending continuation
    and two decisions (one reason carrying an escape sequence, as a model may write it)."""
    return {
        "enabled": True,
        "switches": {},
        "daemon": {"running": True, "pid": 321, "heartbeat_age_s": 1.5,
                   "started": "2026-11-30T12:00:00+00:00"},
        "bridges": [{"conn": "b1", "pid": 77}],
        "bridge_lines": {},
        "sessions": {"ses_busy": {"status": "busy", "owner": "b1",
                                  "waiting": ["permission"]},
                     "ses_idle": {"status": "idle", "owner": "b1"}},
        "no_owner": ["ses_lost"],
        "problems": {},
        "turns": [],
        "pending": [{"id": 4, "session_id": "ses_idle", "state": "intent", "text": "Continue.",
                     "due": (NOW + timedelta(seconds=12)).isoformat()},
                    {"id": 5, "session_id": "ses_busy", "state": "sent", "text": "Continue.",
                     "due": NOW.isoformat()}],
        "decisions": [
            {"id": 1, "at": (NOW - timedelta(minutes=2)).isoformat(), "session_id": "ses_idle",
             "kind": "disconnect", "action": "inject_at", "reason": "stream cut"},
            {"id": 2, "at": (NOW - timedelta(seconds=30)).isoformat(), "session_id": "ses_busy",
             "kind": None, "action": "skip", "reason": "waits \x1b]0;owned\x07 on the user"},
        ],
        "notifications": {},
    }


def test_the_view_shows_sessions_waits_countdowns_and_decisions_newest_first() -> None:
    text = render_watch(fixture_report(), NOW, UTC)
    lines = text.splitlines()
    assert lines[0] == ("autoretry on · daemon running (pid 321, heartbeat 1.5 s ago) · "
                        "1 bridge(s) · 2026-11-30 15:30:00")
    assert "  ses_busy  busy  waiting on the user: permission" in lines
    assert "  ses_idle  idle  waiting on autoretry: continuation #4 (in 12 s)" in lines
    assert "  no live owner (never continued): ses_lost" in lines
    assert "pending continuations (2):" in lines
    assert "  #4 ses_idle  due 2026-11-30 15:30:12 (in 12 s)" in lines
    assert "  #5 ses_busy  sent, waiting for OpenCode to confirm" in lines
    newest = lines.index("last decisions:") + 1
    assert lines[newest].startswith("  2026-11-30 15:29:30 ses_busy - -> skip: waits ")
    assert lines[newest + 1] == ("  2026-11-30 15:28:00 ses_idle disconnect -> inject_at: "
                                 "stream cut")


def test_untrusted_text_is_shown_escaped_never_acted_on() -> None:
    text = render_watch(fixture_report(), NOW, UTC)
    assert "\x1b" not in text and "\x07" not in text
    assert "waits \\x1b]0;owned\\x07 on the user" in text


def test_an_empty_store_says_so_in_each_section() -> None:
    report = {**fixture_report(), "sessions": {}, "no_owner": [], "pending": [],
              "decisions": [], "bridges": [],
              "daemon": {"running": False, "pid": None, "heartbeat_age_s": None,
                         "started": None}}
    text = render_watch(report, NOW, UTC)
    assert "daemon NOT running" in text
    assert "sessions (0):\n  none (no OpenCode window" in text
    assert "pending continuations (0):\n  none" in text
    assert "last decisions:\n  none on record" in text


@pytest.mark.parametrize("offset, words", [
    (12, "in 12 s"), (0, "due now"), (-3, "overdue 3 s"), (150, "in 2 min 30 s"),
    (3 * 3600 + 60, "in 3 h 01 min"),
])
def test_countdown(offset: int, words: str) -> None:
    assert countdown((NOW + timedelta(seconds=offset)).isoformat(), NOW) == words
    assert countdown(None, NOW) == "no due time"


class Stop(Exception):
    """Ends the plain loop after a number of views (the real one ends by Ctrl-C)."""


def test_plain_output_is_one_view_per_interval_without_cursor_movement(
        monkeypatch: pytest.MonkeyPatch) -> None:
    sleeps: list[float] = []
    reads: list[datetime] = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        if len(sleeps) == 3:
            raise Stop

    def read(now: datetime) -> dict[str, Any]:
        reads.append(now)
        return fixture_report()

    clock = iter(NOW + timedelta(seconds=2 * i) for i in range(10))
    monkeypatch.setattr(live_status.time, "sleep", sleep)
    out = io.StringIO()
    with pytest.raises(Stop):
        watch_plain(read, lambda: next(clock), 2.0, out)
    views = out.getvalue().split("\n\n")
    assert views[-1] == ""  # each view ends with a blank line
    assert len(views[:-1]) == 3 and sleeps == [2.0, 2.0, 2.0] and len(reads) == 3
    assert "(in 12 s)" in views[0] and "(in 10 s)" in views[1] and "(in 8 s)" in views[2]
    assert "\x1b" not in out.getvalue()


def seeded_home(home: Path) -> dict[str, str]:
    store = Store.open(home / "autoretry.db")
    try:
        now = datetime.now(tz=UTC)
        store.beat(now, os.getpid(), {"started": now.isoformat(),
                                      "sessions": {"ses_a": {"status": "busy", "owner": "b1"}}})
        decision = Decision(Action.INJECT_AT, Cause.RETRY, "ses_a", "msg_1",
                            kind=Kind.DISCONNECT, due=now + timedelta(hours=1),
                            facts=Facts(note="stream cut"))
        did = store.record_decision(decision, now)
        store.record_intent(did, "ses_a", "msg_1", "Continue.", decision.due, now)
    finally:
        store.close()
    return {**os.environ, "AUTORETRY_HOME": str(home),
            "OPENCODE_DB": str(home / "opencode.db"), "AUTORETRY_CONFIG": str(home / "none.toml")}


def test_watch_and_json_together_is_a_usage_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["status", "--watch", "--json"],
                                env=seeded_home(tmp_path))
    assert result.exit_code == 2 and "--watch and --json" in result.output


WATCH = [sys.executable, "-m", "opencode_autoretry.cli", "status", "--watch", "--interval", "0.2"]


def _read_until(fd: int, marker: bytes, process: subprocess.Popen[bytes]) -> bytes:
    """What ``fd`` gives until ``marker`` shows up (the first view is drawn)."""
    seen = b""
    while marker not in seen:
        ready, _, _ = select.select([fd], [], [], FIRST_VIEW_TIMEOUT_S)
        assert ready, f"no view within {FIRST_VIEW_TIMEOUT_S} s; so far: {seen!r}"
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # a pty reads EIO once the child is gone
            chunk = b""
        assert chunk, f"the watch ended before drawing a view (exit {process.poll()}): {seen!r}"
        seen += chunk
    return seen


def _interrupted(process: subprocess.Popen[bytes]) -> int:
    process.send_signal(signal.SIGINT)
    return process.wait(timeout=FIRST_VIEW_TIMEOUT_S)


def test_ctrl_c_ends_the_plain_watch_with_exit_0_and_no_traceback(tmp_path: Path) -> None:
    process = subprocess.Popen(WATCH, env=seeded_home(tmp_path), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    try:
        assert process.stdout is not None and process.stderr is not None
        seen = _read_until(process.stdout.fileno(), b"last decisions:", process)
        seen += _read_until(process.stdout.fileno(), b"\n\n", process)
        code = _interrupted(process)
        stderr = process.stderr.read().decode()
    finally:
        process.kill()
        process.wait()
    assert code == 0, stderr
    assert "Traceback" not in stderr and "Aborted" not in stderr, stderr
    text = seen.decode()
    assert "ses_a  busy  waiting on autoretry: continuation #1 (in " in text
    assert re.search(r"\(in (59|60) min \d\d s\)", text), text
    assert "\x1b[" not in text, "cursor or colour codes in the plain output"


def test_ctrl_c_ends_the_live_view_on_a_terminal_with_exit_0(tmp_path: Path) -> None:
    controller, terminal = pty.openpty()
    process = subprocess.Popen(WATCH, env={**seeded_home(tmp_path), "TERM": "xterm",
                                           "COLUMNS": "120", "LINES": "40"},
                               stdout=terminal, stderr=terminal, stdin=subprocess.DEVNULL)
    os.close(terminal)
    try:
        seen = _read_until(controller, b"Ctrl-C to quit", process)
        code = _interrupted(process)
        # What it printed on the way out (a traceback would show here).
        ready, _, _ = select.select([controller], [], [], 0)
        while ready:
            try:
                chunk = os.read(controller, 65536)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
            ready, _, _ = select.select([controller], [], [], 0)
    finally:
        process.kill()
        process.wait()
        os.close(controller)
    text = seen.decode(errors="replace")
    assert code == 0, text
    assert "Traceback" not in text and "Aborted" not in text, text
    assert "ses_a  busy  waiting on autoretry: continuation #1" in text
    assert "pending continuations (1):" in text
