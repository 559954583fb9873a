"""Fuzzing OpenCode's row and part shapes: the parsers in ``opencode/shapes.py`` and the reader
over a real DB whose rows hold garbage. Nothing raises; every time is a valid datetime."""

from __future__ import annotations

import dataclasses
import sqlite3
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest
from fuzzing import FUZZ, NUMBERS, SCALARS, dumps, json_values, report, shaped, tried
from hypothesis import given, settings
from hypothesis import strategies as st
from opencode_rows import OpenCodeRows

from opencode_autoretry.models import Message, Role
from opencode_autoretry.opencode import shapes
from opencode_autoretry.opencode.db import OpenCodeDB

MESSAGE_KEYS = ["role", "time", "parentID", "finish", "tokens", "error", "agent", "mode",
                "providerID", "modelID", "model", "variant", "summary", "id", "sessionID"]
ERROR_KEYS = ["name", "data", "message", "error"]
ERROR_DATA_KEYS = ["message", "statusCode", "isRetryable", "responseHeaders", "responseBody",
                   "metadata"]
TIMES = st.one_of(NUMBERS, st.text(max_size=12), st.none())


@pytest.fixture(scope="module", autouse=True)
def _tally() -> Iterator[None]:
    yield
    report("opencode shapes")


def _valid(message: Message) -> None:
    assert isinstance(message.time_created, datetime)
    assert message.time_completed is None or isinstance(message.time_completed, datetime)
    assert isinstance(message.tokens.output, int)
    error = [message.error] if message.error is not None else []
    for built in (message, message.tokens, *error, *message.parts):
        _as_constructed(built)


def _as_constructed(built: object) -> None:
    """What ``shapes._assembled`` built (without the dataclass's ``__init__``) is what the
    constructor builds: every field, in order, equal, hashed alike, and still frozen."""
    assert dataclasses.is_dataclass(built) and not isinstance(built, type)
    names = [f.name for f in dataclasses.fields(built)]
    assert list(vars(built)) == names
    again = dataclasses.replace(built)  # through __init__
    assert again == built and hash(again) == hash(built) and repr(again) == repr(built)
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(built, names[0], None)


@settings(FUZZ, max_examples=200)
@given(st.one_of(st.text(max_size=60), st.binary(max_size=60), json_values().map(dumps)))
def test_load_json_always_gives_a_dict(raw: str | bytes) -> None:
    tried("load_json")
    assert isinstance(shapes.load_json(raw), dict)


@settings(FUZZ, max_examples=100)
@given(st.one_of(json_values(), shaped(ERROR_KEYS, st.one_of(
    shaped(ERROR_DATA_KEYS), json_values(4)))))
def test_parse_error(raw: object) -> None:
    tried("parse_error")
    error = shapes.parse_error(raw)
    assert error is None or isinstance(error.message, str)
    if isinstance(raw, dict) and raw:
        assert error is not None
        _as_constructed(error)


@settings(FUZZ, max_examples=100)
@given(TIMES, shaped(MESSAGE_KEYS, st.one_of(
    json_values(4), shaped(["completed", "created"], SCALARS),
    shaped(["input", "output", "reasoning", "total", "cache"], SCALARS))))
def test_parse_message_and_its_parts(time_created: object, data: dict) -> None:
    tried("parse_message")
    part = shapes.parse_part("prt_1", "msg_1", "ses_1", time_created, data)  # type: ignore[arg-type]
    message = shapes.parse_message("msg_1", "ses_1", time_created, data, [part])  # type: ignore[arg-type]
    _valid(message)
    opener = shapes.stand_in_opener(message)
    _as_constructed(opener)
    assert opener == Message(id=message.parent_id or "", session_id="ses_1", role=Role.USER,
                             time_created=message.time_created)
    for turn in shapes.group_turns("ses_1", [message, message]):
        shapes.turn_until(turn, "msg_1")


@settings(FUZZ, max_examples=200)
@given(st.fixed_dictionaries({"id": st.text(max_size=8)}, optional={
    name: SCALARS for name in shapes.SESSION_COLUMNS if name != "id"}))
def test_parse_session(row: dict) -> None:
    tried("parse_session")
    session = shapes.parse_session(row)
    assert isinstance(session.time_updated, datetime)


# -- the reader over a DB full of garbage ----------------------------------------------------

ROW_VALUES = st.one_of(TIMES.filter(lambda v: not isinstance(v, int) or -(2**63) <= v < 2**63),
                       st.binary(max_size=8))


@pytest.fixture(scope="module")
def garbage_db(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    rows = OpenCodeRows(tmp_path_factory.mktemp("fz") / "opencode.db")
    sid = rows.session("garbage")
    rows.user(sid)
    rows.commit()
    yield rows.path, sid
    rows.close()


def _sqlite_safe(value: object) -> object:
    """Any value SQLite takes in a NOT NULL column (it has no column types to enforce)."""
    if value is None or (isinstance(value, float) and value != value):
        return "null"  # SQLite would store NaN as NULL
    if isinstance(value, int) and not -(2**63) <= value < 2**63:
        return str(value)
    return value


@settings(FUZZ, max_examples=60)
@given(st.lists(st.tuples(st.sampled_from(["user", "assistant", None]), ROW_VALUES,
                          st.one_of(json_values(8).map(dumps), st.text(max_size=30),
                                    st.binary(max_size=30))), min_size=1, max_size=5))
def test_the_reader_survives_garbage_rows(garbage_db: tuple[Path, str], rows: list) -> None:
    path, sid = garbage_db
    writer = sqlite3.connect(path)
    try:
        for index, (role, created, data) in enumerate(rows):
            tried("db rows")
            text = data if role is None or not isinstance(data, str) else dumps(
                {"role": role, "time": {"created": 1}, "raw": data})
            writer.execute(
                "INSERT INTO message (id, session_id, time_created, time_updated, data) "
                "VALUES (?, ?, ?, ?, ?)",
                (f"msg_z{index:04d}", sid, _sqlite_safe(created), 0, text))
            writer.execute(
                "INSERT INTO part (id, message_id, session_id, time_created, time_updated, data)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (f"prt_z{index:04d}", f"msg_z{index:04d}", sid, _sqlite_safe(created), 0, text))
        writer.commit()
        db = OpenCodeDB.open(path)
        try:
            for message in db.session_messages(sid):
                _valid(message)
            db.last_turn(sid)
            db.turns(sid)
            db.messages_after(None)
            db.errored_rows()
        finally:
            db.close()
    finally:
        writer.execute("DELETE FROM part WHERE id LIKE 'prt_z%'")
        writer.execute("DELETE FROM message WHERE id LIKE 'msg_z%'")
        writer.commit()
        writer.close()


# -- regressions found by fuzzing ------------------------------------------------------------


@pytest.mark.parametrize("completed", [float("inf"), float("nan"), 1e300, "inf", "1e400", -1e20])
def test_regression_absurd_completion_times_do_not_raise(completed: object) -> None:
    message = shapes.parse_message("m", "s", 0, {"time": {"completed": completed}})
    _valid(message)


@pytest.mark.parametrize("created", [10**20, -(10**15), "garbage", 2.5e18, None])
def test_regression_out_of_range_row_times_are_clamped(created: object) -> None:
    message = shapes.parse_message("m", "s", created, {})  # type: ignore[arg-type]
    assert 1970 <= message.time_created.year <= 9999


def test_regression_nan_and_infinite_token_counts_read_as_zero() -> None:
    tokens = shapes.parse_tokens({"input": float("nan"), "output": float("inf"), "total": "1e400"})
    assert (tokens.input, tokens.output, tokens.total) == (0, 0, 0)
    assert shapes.parse_error({"data": {"statusCode": float("inf")}}).status_code is None  # type: ignore[union-attr]


def test_regression_deeply_nested_row_json_reads_as_empty() -> None:
    assert shapes.load_json("[" * 100_000) == {}
