"""diagnose's summary ("no live owner N") and its health section ("Sessions with no live owner")
come from one list (issue 24): a user saw "no live owner 1" above "✓ none"."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

from opencode_rows import BASE_MS, OpenCodeRows
from seeded_reports import NOW, OLD_MS

from opencode_autoretry.causes import Cause, Facts
from opencode_autoretry.models import Action, Decision, Kind
from opencode_autoretry.store.database import Store


def _both_counts(invoke_on, db: Path, store: Path, *args: str) -> tuple[int, list[str], str]:
    text = invoke_on(db, store, "diagnose", *args).output
    left = next(line for line in text.splitlines() if "Left alone:" in line)
    found = re.search(r"no live owner (\d+)", left)
    summary_turns = int(found[1]) if found else 0
    body = json.loads(invoke_on(db, store, "diagnose", *args, "--json").output)
    assert body["summary"]["left_alone"]["no_owner"] == summary_turns
    assert body["summary"]["ownerless_sessions"] == body["ownerless_sessions"]
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if "Sessions with no live owner" in line)
    bottom = "\n".join(lines[at: at + 2 + len(body["ownerless_sessions"])]).rstrip()
    return summary_turns, body["ownerless_sessions"], bottom.split("\nRepetition")[0]


def test_seeded_store_counts_the_same_ownerless_turns_in_both(run_on, seeded) -> None:
    turns, sessions, bottom = _both_counts(run_on, seeded.db, seeded.store, "0")
    assert turns == 2 and sessions == [seeded.sessions["quiet"]]  # the silent and the orphan
    assert bottom == (
        f"Sessions with no live owner: 1\n  {seeded.sessions['quiet']}\n"
        "  2 failed turns left alone in them"
    )


def test_an_orphan_without_a_decision_is_ownerless_in_both(run_on, tmp_path) -> None:
    rows = OpenCodeRows(tmp_path / "opencode.db")
    sid = rows.session("lone-orphan")
    rows.assistant(sid, rows.user(sid), finish=None, text="", completed=False)
    rows.commit()
    Store.open(tmp_path / "autoretry.db").close()
    turns, sessions, bottom = _both_counts(run_on, rows.path, tmp_path / "autoretry.db", "0")
    rows.close()
    assert turns == 1 and sessions == [sid]
    assert bottom == f"Sessions with no live owner: 1\n  {sid}\n  1 failed turn left alone in them"


def test_an_ownerless_decision_outside_the_window_is_in_neither(run_on, tmp_path) -> None:
    rows = OpenCodeRows(tmp_path / "opencode.db", start_ms=OLD_MS)
    old = rows.session("old-quiet")
    turn = rows.user(old)
    step = rows.assistant(old, turn, finish=None, text="")
    rows.clock = BASE_MS
    fine = rows.session("all-well")
    rows.assistant(fine, rows.user(fine))
    rows.commit()
    store = Store.open(tmp_path / "autoretry.db")
    at = datetime.fromtimestamp(OLD_MS / 1000, tz=UTC) + timedelta(seconds=5)
    skip = Decision(Action.SKIP, Cause.NO_OWNER, old, turn, Kind.SILENT, facts=Facts(note="x"))
    store.record_decision(skip, at, message_id=step)
    store.close()
    assert NOW - at > timedelta(days=7)
    turns, sessions, bottom = _both_counts(run_on, rows.path, tmp_path / "autoretry.db", "7")
    rows.close()
    assert turns == 0 and sessions == []
    assert bottom == "Sessions with no live owner: ✓ none"
