"""The report index gives exactly the exhaustive scan's reports, after randomised updates.

A seeded random walk over an OpenCode DB (new sessions and turns, open steps that end later,
parts added to older messages, continuations, sessions deleted, VACUUM, the file replaced,
the clock moving on or standing within ``SETTLE`` of the newest steps); after each change the
index-based ``diagnose 0``, ``diagnose 7``, ``trace 0`` and ``trace 7`` (``--json --limit 0``)
must equal the reference: ``diagnose`` built on ``ExhaustiveDB`` (every row parsed),
``trace`` on the plain scan.
"""

from __future__ import annotations

import json
import os
import random
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from exhaustive_db import ExhaustiveDB
from opencode_rows import OpenCodeRows, aborted_error, api_error, dumps, step_finish, tokens

from opencode_autoretry.diagnostics.diagnose import build_diagnose, diagnose_json
from opencode_autoretry.diagnostics.index.report_index import prepare, save
from opencode_autoretry.diagnostics.records import DaemonRecords
from opencode_autoretry.diagnostics.trace.report import build_trace, trace_json
from opencode_autoretry.opencode.db import OpenCodeDB

BRIDGE = Path("/nonexistent/autoretry.js")
RECORDS = DaemonRecords()


def reports(db: OpenCodeDB, now: datetime, memo: object = None) -> list[str]:
    found = [
        diagnose_json(
            build_diagnose(
                db,
                RECORDS,
                now=now,
                days=days,
                bridge_path=BRIDGE,
                memo=memo,  # type: ignore[arg-type]
            ),
            limit=0,
        )
        for days in (0, 7)
    ]
    week = now - timedelta(days=7)
    return [
        *found,
        trace_json(build_trace(db, RECORDS, now=now, memo=memo, rendered=True)),  # type: ignore[arg-type]
        trace_json(
            build_trace(db, RECORDS, now=now, since=week, days=7, memo=memo, rendered=True)  # type: ignore[arg-type]
        ),
    ]


def reference(path: Path, now: datetime) -> list[str]:
    exhaustive = ExhaustiveDB.open(path)
    plain = OpenCodeDB.open(path)
    try:
        return [*reports(exhaustive, now)[:2], *reports(plain, now)[2:]]
    finally:
        exhaustive.close()
        plain.close()


def indexed(path: Path, state: Path, now: datetime) -> tuple[list[str], str | None]:
    prepared = prepare(path, state)
    assert prepared is not None
    db = prepared.reader.open(path)
    try:
        found = reports(db, now, prepared.memo)
    finally:
        db.close()
    save(prepared)
    return found, prepared.sync.rebuilt


class Walk:
    """Random changes to an OpenCode DB, like OpenCode's own writes."""

    def __init__(self, path: Path, rng: random.Random) -> None:
        self.path, self.rng = path, rng
        self.rows = OpenCodeRows(path, start_ms=1_796_000_000_000)
        self.sessions: list[str] = []
        self.open_steps: list[tuple[str, str]] = []  # (message id, session id)
        self.messages: list[tuple[str, str]] = []

    @property
    def conn(self) -> sqlite3.Connection:
        return self.rows.conn

    def new_session(self) -> None:
        self.sessions.append(self.rows.session(f"s{len(self.sessions)}"))
        for _ in range(self.rng.randint(1, 3)):
            self.turn(self.sessions[-1])

    def turn(self, sid: str) -> None:
        rows, rng = self.rows, self.rng
        if rng.random() < 0.05:
            self.rows.tick(8 * 86_400_000)  # a gap of days: "diagnose 7" cuts here
        user = rows.user(sid)
        for _ in range(rng.randint(0, 2)):
            rows.assistant(sid, user, finish="tool-calls", tools=[("bash", "completed")])
        kind = rng.choice(
            ["ok", "ok", "blank", "error", "abort", "markup", "loop", "open", "open", "len"]
        )
        if kind == "loop":
            for _ in range(rng.randint(5, 7)):
                rows.assistant(sid, user, finish="unknown", toks=tokens(100, 0), text="")
            return
        mid = {
            "ok": lambda: rows.assistant(sid, user),
            "blank": lambda: rows.assistant(sid, user, toks=tokens(100, 0), text=None),
            "len": lambda: rows.assistant(sid, user, finish="length", toks=tokens(100, 0)),
            "error": lambda: rows.assistant(
                sid, user, finish=None, error=api_error("Rate limit exceeded", status=429)
            ),
            "abort": lambda: rows.assistant(sid, user, finish=None, error=aborted_error()),
            "markup": lambda: rows.assistant(sid, user, text="<function_calls><invoke>"),
            "open": lambda: rows.assistant(sid, user, finish=None, completed=False, text=""),
        }[kind]()
        self.messages.append((mid, sid))
        if kind == "open":
            self.open_steps.append((mid, sid))
        if kind != "ok" and rng.random() < 0.4:
            follow = rows.injected(sid, decision=1, kind="blank", injection=rng.randint(1, 99))
            rows.assistant(sid, follow, toks=tokens(100, rng.choice([0, 30])))

    def end_open_step(self) -> None:
        if not self.open_steps:
            return
        mid, _ = self.open_steps.pop(self.rng.randrange(len(self.open_steps)))
        data = json.loads(
            self.conn.execute("SELECT data FROM message WHERE id = ?", (mid,)).fetchone()[0]
        )
        finish, output = self.rng.choice(
            [("stop", 20), ("stop", 0), ("tool-calls", 5), ("unknown", 0)]
        )
        toks = tokens(100, output)
        data.update(finish=finish, tokens=toks)
        data["time"]["completed"] = data["time"]["created"] + 900
        ms = data["time"]["created"]
        text = self.rng.choice(["Done.", "", "<invoke name='x'>"])
        self.conn.execute(
            "UPDATE part SET data = ?, time_updated = ?"
            " WHERE message_id = ? AND data LIKE '%\"text\"%'",
            (
                dumps({"type": "text", "text": text, "time": {"start": ms, "end": ms + 800}}),
                ms + 800,
                mid,
            ),
        )
        self.conn.execute(
            "INSERT INTO part VALUES (?, ?, ?, ?, ?, ?)",
            (
                f"prt_{mid[4:]}z",
                mid,
                self._session_of(mid),
                ms + 850,
                ms + 850,
                dumps(step_finish(finish, toks)),
            ),
        )
        self.conn.execute(
            "UPDATE message SET data = ?, time_updated = ? WHERE id = ?",
            (dumps(data), ms + 900, mid),
        )

    def stream_open_step(self) -> None:
        """An open step's text part rewritten in place (streaming), or the step failing."""
        if not self.open_steps:
            return
        mid, _ = self.rng.choice(self.open_steps)
        if self.rng.random() < 0.3:  # it ends with an error (and time.completed)
            self.open_steps.remove((mid, _))
            raw = self.conn.execute("SELECT data FROM message WHERE id = ?", (mid,)).fetchone()
            data = json.loads(raw[0])
            data["error"] = api_error("Connection reset by server", code="ECONNRESET")
            data["time"]["completed"] = data["time"]["created"] + 700
            self.conn.execute("UPDATE message SET data = ? WHERE id = ?", (dumps(data), mid))
            return
        text = self.rng.choice(["Working", "<function_calls>", "Working on it"])
        self.conn.execute(
            "UPDATE part SET data = ? WHERE message_id = ? AND data LIKE '%\"text\"%'",
            (dumps({"type": "text", "text": text, "time": {"start": 1}}), mid),
        )

    def _session_of(self, mid: str) -> str:
        return str(
            self.conn.execute("SELECT session_id FROM message WHERE id = ?", (mid,)).fetchone()[0]
        )

    def part_on_old_message(self) -> None:
        if not self.messages:
            return
        mid, sid = self.rng.choice(self.messages)
        if self.conn.execute("SELECT 1 FROM message WHERE id = ?", (mid,)).fetchone() is None:
            return
        ms = self.rows.tick()
        self.conn.execute(
            "INSERT INTO part VALUES (?, ?, ?, ?, ?, ?)",
            (
                f"prt_{ms:013d}{self.rng.randrange(10**6):06d}",
                mid,
                sid,
                ms,
                ms,
                dumps(
                    {
                        "type": "text",
                        "text": "<tool_call>{}</tool_call>",
                        "time": {"start": ms, "end": ms},
                    }
                ),
            ),
        )

    def delete_session(self) -> None:
        if len(self.sessions) < 2:
            return
        sid = self.sessions.pop(self.rng.randrange(len(self.sessions)))
        for table in ("part", "message"):
            self.conn.execute(f"DELETE FROM {table} WHERE session_id = ?", (sid,))
        self.conn.execute("DELETE FROM session WHERE id = ?", (sid,))
        self.open_steps = [(m, s) for m, s in self.open_steps if s != sid]

    def vacuum(self) -> None:
        self.rows.commit()
        self.conn.execute("VACUUM")

    def replace_file(self) -> None:
        self.rows.commit()
        copy = self.path.with_name("copy.db")
        copy.unlink(missing_ok=True)
        self.conn.execute("VACUUM INTO ?", (str(copy),))
        self.rows.close()
        for suffix in ("-wal", "-shm"):
            Path(f"{self.path}{suffix}").unlink(missing_ok=True)
        os.replace(copy, self.path)
        self.rows.conn = sqlite3.connect(self.path)
        self.rows.conn.execute("PRAGMA journal_mode = WAL")

    def step(self) -> str:
        action = self.rng.choices(
            [
                "new_session",
                "turn",
                "end_open_step",
                "stream_open_step",
                "part_on_old_message",
                "delete_session",
                "vacuum",
                "replace_file",
                "nothing",
            ],
            weights=[3, 6, 4, 3, 2, 1, 1, 1, 2],
        )[0]
        if action == "turn" and self.sessions:
            self.turn(self.rng.choice(self.sessions))
        elif action != "turn" and action != "nothing":
            getattr(self, action)()
        self.rows.commit()
        return action


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_index_matches_the_exhaustive_reference_after_random_updates(
    tmp_path: Path, seed: int
) -> None:
    rng = random.Random(seed)
    walk = Walk(tmp_path / "opencode.db", rng)
    for _ in range(4):
        walk.new_session()
    walk.rows.commit()
    rebuilt: list[str] = []
    for number in range(25):
        action = walk.step()
        # now: well after the newest step, or within SETTLE of it (steps still "recent")
        last = datetime.fromtimestamp(walk.rows.clock / 1000, tz=UTC)
        now = last + timedelta(minutes=rng.choice([1, 3, 30, 600]))
        found, why = indexed(walk.path, tmp_path / "state", now)
        if why:
            rebuilt.append(f"{number}:{action}:{why}")
        expected = reference(walk.path, now)
        for name, ours, theirs in zip(
            ("diagnose 0", "diagnose 7", "trace 0", "trace 7"), found, expected, strict=True
        ):
            assert ours == theirs, f"step {number} ({action}), {name} differs"
    walk.rows.close()
    assert rebuilt[0].endswith("new index")
