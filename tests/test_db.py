"""The read-only OpenCode reader against a DB with the pinned 1.18.33 schema."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from opencode_rows import BASE_MS, OpenCodeRows, api_error, tokens

from opencode_autoretry.models import Role
from opencode_autoretry.opencode import db as dbmod
from opencode_autoretry.opencode.db import (
    DbMissing,
    DbUnreadable,
    DbUnsupported,
    OpenCodeDB,
)


@pytest.fixture()
def built(tmp_path: Path):
    rows = OpenCodeRows(tmp_path / "opencode.db")
    sid = rows.session("swift-planet")
    other = rows.session("lucky-sailor", parent_id=sid)
    u1 = rows.user(sid, "first")
    a1 = rows.assistant(sid, u1, finish="tool-calls", tools=[("bash", "completed")])
    a2 = rows.assistant(sid, u1, toks=tokens(100, 0), text=None)
    inj = rows.injected(sid, decision=1, kind="blank", injection=1)
    a3 = rows.assistant(sid, inj)
    u2 = rows.user(sid, "second")
    a4 = rows.assistant(sid, u2, finish=None, error=api_error("boom", status=500), text="")
    rows.user(other, "child work")
    rows.event(sid, "message.updated.1", {"sessionID": sid})
    rows.event(sid, "message.part.updated.1", {"sessionID": sid})
    rows.commit()
    ids = {
        "sid": sid,
        "child": other,
        "u1": u1,
        "a1": a1,
        "a2": a2,
        "inj": inj,
        "a3": a3,
        "u2": u2,
        "a4": a4,
    }
    db = OpenCodeDB.open(tmp_path / "opencode.db")
    yield db, ids, rows
    db.close()
    rows.close()


def test_missing_db_names_the_path_and_the_overrides(tmp_path: Path) -> None:
    with pytest.raises(DbMissing) as caught:
        OpenCodeDB.open(tmp_path / "absent.db")
    text = str(caught.value)
    assert str(tmp_path / "absent.db") in text and "--db" in text and "OPENCODE_DB" in text
    assert not (tmp_path / "absent.db").exists()  # never created


def test_pre_sqlite_or_foreign_db_is_unsupported(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path)
    conn.executescript("CREATE TABLE session (id TEXT); CREATE TABLE message (id TEXT);")
    conn.close()
    with pytest.raises(DbUnsupported, match="no part table"):
        OpenCodeDB.open(path)


def test_corrupt_file_is_one_line_unreadable(tmp_path: Path) -> None:
    path = tmp_path / "corrupt.db"
    path.write_bytes(b"this is not a database at all" * 100)
    with pytest.raises(DbUnreadable) as caught:
        OpenCodeDB.open(path)
    assert "\n" not in str(caught.value)


def test_locked_db_is_unreadable_not_a_hang(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "locked.db"
    writer = sqlite3.connect(path, isolation_level=None)
    writer.executescript(
        "CREATE TABLE session (id); CREATE TABLE message (id); CREATE TABLE part (id);"
    )
    writer.execute("BEGIN EXCLUSIVE")
    monkeypatch.setattr(dbmod, "BUSY_TIMEOUT_S", 0.05)
    try:
        with pytest.raises(DbUnreadable, match="locked"):
            OpenCodeDB.open(path)
    finally:
        writer.rollback()
        writer.close()


def test_connection_refuses_writes(built) -> None:
    db, _, _ = built
    with pytest.raises(sqlite3.OperationalError):
        db._conn.execute("CREATE TABLE x (y)")


def test_sessions_by_id_prefix_and_slug(built) -> None:
    db, ids, _ = built
    sid = ids["sid"]
    assert [s.id for s in db.find_sessions(sid)] == [sid]
    assert [s.id for s in db.find_sessions(sid[:-6])] == [sid]
    assert [s.id for s in db.find_sessions("swift-planet")] == [sid]
    assert len(db.find_sessions("ses_")) == 2
    assert db.find_sessions("nothing-like-it") == []
    assert db.closest_sessions("swift-planit", limit=1)[0].id == sid
    child = db.session(ids["child"])
    assert child is not None and child.parent_id == sid


def test_turns_group_injected_followups_and_last_turn(built) -> None:
    db, ids, _ = built
    turns = db.turns(ids["sid"])
    assert [t.id for t in turns] == [ids["u1"], ids["u2"]]
    assert [s.id for s in turns[0].steps] == [ids["a1"], ids["a2"], ids["a3"]]
    assert [f.id for f in turns[0].followups] == [ids["inj"]]
    last = db.last_turn(ids["sid"])
    assert last is not None and last.id == ids["u2"] and [s.id for s in last.steps] == [ids["a4"]]
    assert last.last_step is not None and last.last_step.error is not None
    assert db.last_turn("ses_missing") is None


def test_message_parts_come_from_the_part_table(built) -> None:
    db, ids, _ = built
    step = db.message(ids["a1"])
    assert step is not None and step.finish == "tool-calls"
    assert [p.type.value for p in step.parts] == ["step-start", "text", "tool", "step-finish"]
    assert step.parts[2].tool == "bash"
    assert db.message("msg_nope") is None


def test_injected_messages_carry_the_marker(built) -> None:
    db, ids, _ = built
    found = db.injected_messages(ids["sid"])
    assert [m.id for m in found] == [ids["inj"]]
    assert found[0].marker == {"decision": "1", "kind": "blank", "injection": "1"}


def test_tailing_messages_and_events_by_id_and_rowid(built) -> None:
    db, ids, rows = built
    everything = db.messages_after(None, limit=100)
    assert [m.id for m in everything] == sorted(m.id for m in everything)
    assert db.max_message_id() == everything[-1].id
    after = db.messages_after(ids["a3"], limit=2)
    assert [m.id for m in after] == [ids["u2"], ids["a4"]]
    assert db.messages_after(db.max_message_id()) == []
    events = db.events_after(0)
    assert [e.type for e in events] == ["message.updated.1", "message.part.updated.1"]
    assert events[0].aggregate_id == ids["sid"] and events[0].data == {"sessionID": ids["sid"]}
    assert db.max_event_rowid() == events[-1].rowid
    assert db.events_after(events[0].rowid) == events[1:]
    assert db.events_after(0, limit=1) == events[:1]


def test_neighbours_find_previous_and_next_assistant(built) -> None:
    db, ids, _ = built
    injected = db.message(ids["inj"])
    assert injected is not None
    before = db.neighbours(injected, Role.ASSISTANT, before=True)
    after = db.neighbours(injected, Role.ASSISTANT, before=False)
    assert before is not None and before.id == ids["a2"]
    assert after is not None and after.id == ids["a3"]


def test_step_candidates_prefilter_keeps_every_unproven_step(built) -> None:
    db, ids, _ = built
    found = {r.id for r in db.step_candidates(None)}
    assert found == {ids["a2"], ids["a4"]}  # blank stop, errored; not tool-calls / healthy


@pytest.mark.parametrize("offset_s", [-1, 0, 1, 5, 9, 10, 11, 60])
def test_first_rowid_since_is_the_first_row_at_or_after_the_cut(tmp_path: Path, offset_s: int):
    rows = OpenCodeRows(tmp_path / "t.db")
    sid = rows.session("s")
    for _ in range(10):
        rows.user(sid)  # one per second from BASE_MS + 1 s
    rows.commit()
    db = OpenCodeDB.open(tmp_path / "t.db")
    cut = datetime.fromtimestamp(BASE_MS / 1000, tz=UTC) + timedelta(seconds=offset_s)
    first = db.first_rowid_since("message", cut)
    times = db._rows("SELECT rowid, time_created FROM message ORDER BY rowid")
    expected = next((r for r, t in times if t >= BASE_MS + offset_s * 1000), times[-1][0] + 1)
    assert first == expected
    db.close()
    rows.close()


@pytest.mark.parametrize(
    ("kwargs", "candidate"),
    [
        ({}, False),  # finish stop, output 10, text
        ({"finish": "tool-calls", "tools": [("bash", "completed")]}, False),
        ({"toks": tokens(100, 0), "text": None}, True),  # blank
        ({"toks": tokens(100, 0, reasoning=4), "text": None, "reasoning": "hm"}, True),
        ({"finish": "length", "toks": tokens(100, 0)}, True),
        ({"finish": "unknown", "toks": tokens(0, 0)}, True),
        ({"finish": None, "completed": False}, True),  # in progress / orphan
        ({"finish": None, "error": api_error("x", status=500)}, True),
        ({"error": api_error("late error after a finish")}, True),  # error key after finish
    ],
)
def test_step_candidate_table(tmp_path: Path, kwargs: dict, candidate: bool) -> None:
    rows = OpenCodeRows(tmp_path / "c.db")
    sid = rows.session("s")
    step = rows.assistant(sid, rows.user(sid), **kwargs)
    rows.commit()
    db = OpenCodeDB.open(tmp_path / "c.db")
    assert ({r.id for r in db.step_candidates(None)} == {step}) is candidate
    db.close()
    rows.close()


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ('<function_calls><invoke name="bash">', True),
        ('<tool_call>{"name": "read"}</tool_call>', True),
        ('{"type":"function","function":{"name":"bash"}}', True),
        ("plain <b>html</b> and a < b comparison", False),
        ("no markup at all", False),
    ],
)
def test_tool_markup_candidates(tmp_path: Path, text: str, found: bool) -> None:
    rows = OpenCodeRows(tmp_path / "m.db")
    sid = rows.session("s")
    step = rows.assistant(sid, rows.user(sid), text=text, toks=tokens(100, 20))
    rows.commit()
    db = OpenCodeDB.open(tmp_path / "m.db")
    assert ([r.id for r in db.tool_markup_candidates(None)] == [step]) is found
    db.close()
    rows.close()
