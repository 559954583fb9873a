"""The report prefilters of the reader in shapes OpenCode 1.18 does not write (key order,
spacing, case), the part subset the classifier reads, and the next-row probe."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from opencode_rows import (
    BASE_MS,
    OpenCodeRows,
    api_error,
    assistant_data,
    tokens,
    user_data,
)

from opencode_autoretry.models import PartType
from opencode_autoretry.opencode.db import OpenCodeDB


def _finish_first(data: dict[str, Any]) -> str:
    ordered = {k: data[k] for k in ("finish", "error") if k in data} | data
    return json.dumps(ordered, separators=(",", ":"))


def _tokens_last(data: dict[str, Any]) -> str:
    moved = {k: v for k, v in data.items() if k != "tokens"} | {"tokens": data["tokens"]}
    return json.dumps(moved, separators=(",", ":"))


RENDERERS = {
    "compact": lambda d: json.dumps(d, separators=(",", ":")),
    "finish first": _finish_first,
    "tokens last": lambda d: json.dumps(
        {k: v for k, v in d.items() if k != "tokens"} | {"tokens": d["tokens"]}
    ),
    "indented": lambda d: json.dumps(d, indent=2),
}
STEPS = [
    ({"finish": "stop", "toks": tokens(100, 10)}, False),
    ({"finish": "tool-calls", "toks": tokens(100, 10)}, False),
    ({"finish": "stop", "toks": tokens(100, 0)}, True),
    ({"finish": "length", "toks": tokens(100, 0)}, True),
    ({"finish": "unknown", "toks": tokens(0, 0)}, True),
    ({"finish": None, "toks": tokens(0, 0)}, True),
    ({"finish": None, "error": api_error("boom", status=500)}, True),
    ({"finish": "stop", "toks": tokens(100, 10), "error": api_error("late")}, True),
]


@pytest.mark.parametrize("render", list(RENDERERS))
@pytest.mark.parametrize(("kwargs", "candidate"), STEPS)
def test_step_candidates_in_any_key_order(
    tmp_path: Path, render: str, kwargs: dict, candidate: bool
) -> None:
    rows = OpenCodeRows(tmp_path / "k.db")
    sid = rows.session("s")
    user = rows.user(sid)
    data = assistant_data(user, rows.tick(), completed_ms=rows.clock + 1, **kwargs)
    step = rows.message(sid, data, [])
    rows.conn.execute("UPDATE message SET data = ? WHERE id = ?", (RENDERERS[render](data), step))
    rows.commit()
    db = OpenCodeDB.open(tmp_path / "k.db")
    found = db.step_candidates(None)
    assert ({r.id for r in found} == {step}) is candidate
    assert all(r.data == data for r in found)
    db.close()
    rows.close()


@pytest.mark.parametrize(
    ("raw", "listed"),
    [
        ('{"time":{"created":1},"role":"user"}', False),  # a user row, role not first
        ('{"role": "user", "time": {"created": 1}}', False),
        ('{"role":"assist', True),  # malformed: left to Python (reads as {}), no SQL error
        ("[1, 2]", False),  # valid JSON, not an object
    ],
)
def test_step_candidates_other_rows(tmp_path: Path, raw: str, listed: bool) -> None:
    rows = OpenCodeRows(tmp_path / "o.db")
    sid = rows.session("s")
    mid = rows.message(sid, user_data(rows.tick()), [])
    rows.conn.execute("UPDATE message SET data = ? WHERE id = ?", (raw, mid))
    rows.commit()
    db = OpenCodeDB.open(tmp_path / "o.db")
    found = db.step_candidates(None)
    assert [(r.id, dict(r.data)) for r in found] == ([(mid, {})] if listed else [])
    db.close()
    rows.close()


@pytest.mark.parametrize(
    ("part", "found"),
    [
        ({"type": "text", "text": '<INVOKE name="bash">ls</INVOKE>'}, True),
        ({"type": "text", "text": "<Function=bash>"}, True),
        ({"text": "<tool_call>{}</tool_call>", "type": "text"}, True),  # type key last
        ({"type": "text", "text": '{\n  "type" : "function", "name": "ls"}'}, True),
        ({"type": "text", "text": '<parameter name="path">a</parameter>'}, True),
        ({"type": "reasoning", "text": "<invoke name=x>"}, False),
        ({"type": "tool", "state": {"output": '<invoke name="x">'}}, False),
        ({"type": "text", "text": "a <b>bold</b> claim, x < y"}, False),
    ],
)
def test_tool_markup_candidates_any_case_and_key_order(
    tmp_path: Path, part: dict, found: bool
) -> None:
    rows = OpenCodeRows(tmp_path / "m.db")
    sid = rows.session("s")
    user = rows.user(sid)
    data = assistant_data(user, rows.tick(), toks=tokens(100, 20), completed_ms=rows.clock + 1)
    step = rows.message(sid, data, [part])
    rows.commit()
    db = OpenCodeDB.open(tmp_path / "m.db")
    assert ([r.id for r in db.tool_markup_candidates(None)] == [step]) is found
    db.close()
    rows.close()


def test_with_parts_can_leave_out_step_bookkeeping(tmp_path: Path) -> None:
    rows = OpenCodeRows(tmp_path / "p.db")
    sid = rows.session("s")
    step = rows.assistant(
        sid, rows.user(sid), reasoning="hm", text="hi", tools=[("bash", "completed")]
    )
    odd = {"snapshot": "x", "type": "step-start", "note": {"type": "text"}}  # kept: unsure
    rows.message(sid, assistant_data(step, rows.tick()), [])
    rows.conn.execute(
        "INSERT INTO part VALUES ('prt_zz', ?, ?, ?, ?, ?)",
        (step, sid, BASE_MS, BASE_MS, json.dumps(odd)),
    )
    rows.commit()
    db = OpenCodeDB.open(tmp_path / "p.db")
    row = db.row(step)
    assert row is not None
    full = db.with_parts([row])[0]
    lean = db.with_parts([row], step_parts=False)[0]
    assert [p.type for p in full.parts].count(PartType.STEP_START) == 2
    assert [p.type for p in lean.parts] == [
        PartType.REASONING,
        PartType.TEXT,
        PartType.TOOL,
        PartType.STEP_START,
    ]
    db.close()
    rows.close()


def test_next_row_is_the_following_message_of_the_session(tmp_path: Path) -> None:
    rows = OpenCodeRows(tmp_path / "n.db")
    sid = rows.session("s")
    other = rows.session("t")
    user = rows.user(sid)
    first = rows.assistant(sid, user)
    rows.user(other)
    second = rows.assistant(sid, user)
    rows.commit()
    db = OpenCodeDB.open(tmp_path / "n.db")
    one, two = db.messages_by_id([first, second])
    following = db.next_row(one)
    assert following is not None and following.id == second
    assert following.data["parentID"] == user
    assert db.next_row(two) is None
    db.close()
    rows.close()


@pytest.mark.parametrize(
    ("extra", "output", "candidate"),
    [
        ({"output": 5}, 0, True),  # an unrelated non-zero "output" before tokens: still blank
        ({"output": 0}, 7, False),  # an unrelated zero: the exact test clears it
    ],
)
def test_output_count_is_read_from_tokens(
    tmp_path: Path, extra: dict, output: int, candidate: bool
) -> None:
    rows = OpenCodeRows(tmp_path / "t.db")
    sid = rows.session("s")
    user = rows.user(sid)
    data = {"extra": extra} | assistant_data(
        user, rows.tick(), toks=tokens(100, output), completed_ms=rows.clock + 1
    )
    step = rows.message(sid, data, [])
    rows.commit()
    db = OpenCodeDB.open(tmp_path / "t.db")
    assert ({r.id for r in db.step_candidates(None)} == {step}) is candidate
    db.close()
    rows.close()
