"""``autoretry diagnose`` opens with what autoretry did (issue 12): the summary, its chart and
its breakdowns, in text and under ``--json``'s ``summary``."""

from __future__ import annotations

import io
import json
from datetime import UTC, date, timedelta, timezone
from pathlib import Path

from seeded_reports import NOW

from opencode_autoretry.causes import Cause, Facts
from opencode_autoretry.diagnostics.diagnose import build_diagnose, render_diagnose
from opencode_autoretry.diagnostics.records import load_records
from opencode_autoretry.diagnostics.render import Style
from opencode_autoretry.models import Decision
from opencode_autoretry.opencode.db import OpenCodeDB
from opencode_autoretry.store.database import Store


def summary_of(invoke, *args: str) -> dict:
    result = invoke("diagnose", *args, "--json")
    assert result.exit_code == 0, result.output
    body = json.loads(result.output)
    assert body["version"] == 1  # additive: the rest of the report is unchanged
    return body["summary"]


def test_failed_turns_and_what_became_of_them(invoke) -> None:
    summary = summary_of(invoke, "0")
    assert summary["failed"] == {"steps": 15, "turns": 14, "sessions": 6}
    # the blank was continued and answered; the reset was continued, failed again (429) and
    # the rate-limit budget ran out; a silent step had no owner; the rest had no decision
    assert summary["turns"] == {
        "recovered": 1,
        "gave_up": 1,
        "left_alone": 5,
        "not_recovered": 0,
        "in_progress": 0,
        "unattended": 7,
    }
    assert summary["recovered_share"] == 1 / 14
    assert summary["left_alone"] == {
        "switched_off": 0,
        "user_abort": 1,
        "waiting": 0,
        "child": 1,  # the server error of the subagent session
        "no_owner": 2,  # the silent step (the daemon said so) and the orphan
        "not_retryable": 1,  # the 401
        "other": 0,
    }
    assert summary["continuations"] == {
        "sent": 2,
        "by_outcome": {"failed": 1, "recovered": 1},
        "success_rate": 0.5,
    }
    assert summary["loops"] == {}


def test_per_day_counts_cover_the_window(invoke) -> None:
    days = summary_of(invoke, "7")["per_day"]
    assert [d["day"] for d in days] == [
        (date(2026, 11, 24) + timedelta(days=n)).isoformat() for n in range(8)
    ]
    assert days[-2] == {"day": "2026-11-30", "failed": 14, "recovered": 1}
    assert sum(d["failed"] for d in days) == 14  # the 10-day-old blank is outside the window
    all_time = summary_of(invoke, "0")["per_day"]
    assert all_time[0] == {"day": "2026-11-20", "failed": 1, "recovered": 0}


def test_breakdowns_per_model_and_per_kind(invoke) -> None:
    summary = summary_of(invoke, "0")
    assert summary["by_model"] == [{"model": "fake/fake-model", "failed": 15, "recovered": 1}]
    kinds = {row["kind"]: row for row in summary["by_kind"]}
    assert kinds["blank"] == {
        "kind": "blank",
        "failed": 2,
        "recovered": 1,
        "continuations": 1,
        "decisions": 1,
    }
    assert kinds["rate_limit"]["decisions"] == 1 and kinds["rate_limit"]["continuations"] == 0
    assert summary["decisions"] == {
        "count": 4,
        "by_action": {
            "inject": {"blank": 1, "disconnect": 1},
            "notify": {"rate_limit": 1},
            "skip": {"silent": 1},
        },
    }


def test_a_new_decision_kind_shows_up_without_code_changes(
    fresh_seeded, run_on, tmp_path: Path
) -> None:
    """Kinds and actions are the store's strings: one added later is counted as it is."""
    store = Store.open(fresh_seeded.store)
    at = NOW - timedelta(hours=1)
    sid, turn = fresh_seeded.sessions["main"], fresh_seeded.users["hello"]
    decision = Decision("continue_todo", Cause.OTHER, sid, turn, "todo",  # type: ignore[arg-type]
                        facts=Facts(note="todos left open"))
    decision_id = store.record_decision(decision, at, message_id=fresh_seeded.steps["healthy"])
    store.record_intent(decision_id, sid, turn, "Finish the todos.", None, at=at)
    store.close()
    result = run_on(fresh_seeded.db, fresh_seeded.store, "diagnose", "--json")
    summary = json.loads(result.output)["summary"]
    assert summary["decisions"]["by_action"]["continue_todo"] == {"todo": 1}
    kinds = {row["kind"]: row for row in summary["by_kind"]}
    assert kinds["todo"] == {
        "kind": "todo",
        "failed": 0,
        "recovered": 0,
        "continuations": 1,
        "decisions": 1,
    }
    assert summary["continuations"]["by_outcome"]["pending"] == 1  # intent, never sent
    text = run_on(fresh_seeded.db, fresh_seeded.store, "diagnose").output
    assert "| todo " in text


def test_text_opens_with_the_summary_in_plain_characters(invoke) -> None:
    out = invoke("diagnose", "0").output
    assert out.index("What autoretry did") < out.index("DB:") < out.index("blank: ⚠ 2")
    assert "Failed:         15 steps in 14 turns of 6 sessions" in out
    assert "Recovered:      1 turn (7 %), continued automatically" in out
    assert "Continuations:  2 sent, success 50 % (failed 1, recovered 1)" in out
    assert "Per day: failed steps (#) and recovered (+)" in out
    assert "Mon 2026-11-30  14  " + "#" * 30 + "  1  ++" in out
    assert "█" not in out and "\x1b[" not in out  # NO_COLOR and not a terminal
    assert "| fake/fake-model |     15 |         1 |   7 % |" in out


def test_colour_draws_block_bars(seeded) -> None:
    db = OpenCodeDB.open(seeded.db)
    try:
        report = build_diagnose(
            db, load_records(seeded.store), now=NOW, days=0, bridge_path=Path("/x"), zone=UTC
        )
    finally:
        db.close()
    out = render_diagnose(report, Style(colour=True, zone=UTC))
    assert "█" * 30 in out and "\x1b[31m" in out and "#" * 30 not in out


def test_days_follow_the_given_zone(seeded) -> None:
    """A failure at 12:09 UTC on 2026-11-30 is on 12-01 at UTC+13."""
    zone = timezone(timedelta(hours=13))
    db = OpenCodeDB.open(seeded.db)
    try:
        report = build_diagnose(
            db, load_records(seeded.store), now=NOW, days=0, bridge_path=Path("/x"), zone=zone
        )
    finally:
        db.close()
    assert report.summary is not None
    days = {d.day: d.failed for d in report.summary.per_day}
    assert days[date(2026, 12, 1)] == 14 and days.get(date(2026, 11, 30), 0) == 0


def test_progress_is_told_of_every_scan_batch(seeded, monkeypatch) -> None:
    from opencode_autoretry.diagnostics import diagnose

    monkeypatch.setattr(diagnose, "SCAN_BATCH_ROWS", 5)  # 40 messages: 8 batches
    calls: list[tuple[int, int]] = []
    db = OpenCodeDB.open(seeded.db)
    try:
        build_diagnose(
            db,
            load_records(seeded.store),
            now=NOW,
            days=0,
            bridge_path=Path("/x"),
            progress=lambda done, total: calls.append((done, total)),
        )
    finally:
        db.close()
    total = calls[0][1]
    assert total >= 9 and calls == [(n, total) for n in range(1, total + 1)]


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bar_only_on_a_terminal_and_only_when_slow() -> None:
    from opencode_autoretry.diagnostics.progress import DELAY, scan_progress

    with scan_progress(io.StringIO()) as advance:
        assert advance is None  # piped: nothing drawn
    now = [0.0]
    fast = Tty()
    with scan_progress(fast, clock=lambda: now[0]) as advance:
        assert advance is not None
        advance(1, 4)
        advance(4, 4)
    assert fast.getvalue() == ""  # ended before the delay
    slow = Tty()
    with scan_progress(slow, clock=lambda: now[0]) as advance:
        now[0] += DELAY + 0.1
        advance(1, 4)
        advance(2, 4)
    assert "scanning OpenCode's database" in slow.getvalue()
