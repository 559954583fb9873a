"""The fast prefilters of ``diagnose`` find what parsing every row finds, in any key order.

Rows are added to the seeded DB in shapes OpenCode 1.18 does not write (keys reordered,
indented JSON, upper-case tags, a malformed row): the report built on ``OpenCodeDB`` must
equal the one built on ``ExhaustiveDB`` (``exhaustive_db.py``) and list the odd steps.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from exhaustive_db import ExhaustiveDB, diagnose_report
from opencode_rows import OpenCodeRows, api_error, assistant_data, tokens
from seeded_reports import NOW, Seeded

from opencode_autoretry.diagnostics import diagnose
from opencode_autoretry.opencode.db import OpenCodeDB

BRIDGE = Path("/nonexistent/autoretry.js")


def _finish_first(data: dict[str, Any]) -> str:
    keys = ["finish", "error", "role"]
    ordered = {k: data[k] for k in keys if k in data} | data
    return json.dumps(ordered, separators=(",", ":"))


def _indented(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=1)


def _rewrite(rows: OpenCodeRows, message_id: str, render: Callable[[dict], str]) -> None:
    raw = rows.conn.execute("SELECT data FROM message WHERE id = ?", (message_id,)).fetchone()
    rows.conn.execute(
        "UPDATE message SET data = ? WHERE id = ?", (render(json.loads(raw[0])), message_id)
    )


def _rewrite_text_parts(rows: OpenCodeRows, message_id: str) -> None:
    """The text part's ``type`` key moved last."""
    found = rows.conn.execute("SELECT id, data FROM part WHERE message_id = ?", (message_id,))
    for part_id, raw in found.fetchall():
        data = json.loads(raw)
        if data.get("type") == "text":
            moved = {k: v for k, v in data.items() if k != "type"} | {"type": "text"}
            rows.conn.execute("UPDATE part SET data = ? WHERE id = ?", (json.dumps(moved), part_id))


def add_odd_rows(seeded: Seeded) -> dict[str, str]:
    rows: OpenCodeRows = seeded.rows  # type: ignore[attr-defined]
    sid = rows.session("odd-shapes")
    odd: dict[str, str] = {}

    def step(name: str, **kwargs: Any) -> str:
        odd[name] = rows.assistant(sid, rows.user(sid), **kwargs)
        return odd[name]

    _rewrite(rows, step("healthy_finish_first"), _finish_first)
    tools = [("bash", "completed")]
    _rewrite(rows, step("tools_finish_first", finish="tool-calls", tools=tools), _finish_first)
    _rewrite(rows, step("blank_finish_first", toks=tokens(100, 0), text=None), _finish_first)
    limited = api_error("Rate limit exceeded", status=429)
    _rewrite(rows, step("error_first", finish=None, error=limited, text=""), _finish_first)
    _rewrite(rows, step("forged_indented", finish="length", toks=tokens(100, 0)), _indented)
    _rewrite(rows, step("healthy_indented"), _indented)
    step("upper_tags", toks=tokens(100, 20), text='<INVOKE name="bash">ls</INVOKE>')
    _rewrite_text_parts(rows, odd["upper_tags"])
    step("spaced_json_call", toks=tokens(100, 20), text='{ "type" : "function", "name": "ls" }')
    parent = rows.user(sid)
    two = [{"type": "text", "text": f"<invoke name='ls'>{n}</invoke>"} for n in (1, 2)]
    data = assistant_data(parent, rows.tick(), toks=tokens(100, 9), completed_ms=rows.clock + 1)
    odd["two_markup_parts"] = rows.message(sid, data, two)
    user = rows.user(sid)
    _rewrite(rows, user, lambda d: json.dumps({"time": d["time"], "role": "user"}))
    bad = rows.user(sid)
    rows.conn.execute("UPDATE message SET data = ? WHERE id = ?", ('{"role":"assist', bad))
    rows.commit()
    return odd


def _report(reader: type[OpenCodeDB], path: Path, days: int) -> str:
    return diagnose_report(reader, path, now=NOW, days=days)


@pytest.mark.parametrize("days", [0, 7])
def test_fast_prefilters_equal_the_exhaustive_reference(fresh_seeded: Seeded, days: int) -> None:
    add_odd_rows(fresh_seeded)
    fast = _report(OpenCodeDB, fresh_seeded.db, days)
    assert fast == _report(ExhaustiveDB, fresh_seeded.db, days)


@pytest.mark.parametrize(
    ("kind", "name"),
    [
        ("blank", "blank_finish_first"),
        ("rate_limit", "error_first"),
        ("forged_length", "forged_indented"),
        ("tool_as_text", "upper_tags"),
        ("tool_as_text", "spaced_json_call"),
        ("tool_as_text", "two_markup_parts"),
    ],
)
def test_odd_shapes_are_reported(fresh_seeded: Seeded, kind: str, name: str) -> None:
    odd = add_odd_rows(fresh_seeded)
    body = json.loads(_report(OpenCodeDB, fresh_seeded.db, 0))
    listed = {row["message_id"] for row in body["kinds"][kind]["rows"]}
    assert odd[name] in listed
    healthy = {odd[n] for n in ("healthy_finish_first", "tools_finish_first", "healthy_indented")}
    everywhere = {row["message_id"] for k in body["kinds"].values() for row in k["rows"]}
    assert not healthy & everywhere


def test_scan_chunk_sizes_do_not_change_the_report(
    fresh_seeded: Seeded, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One-row chunks split every step's parts and every turn across scans."""
    add_odd_rows(fresh_seeded)
    whole = _report(OpenCodeDB, fresh_seeded.db, 0)
    monkeypatch.setattr(diagnose, "PART_BATCH_ROWS", 1)
    monkeypatch.setattr(diagnose, "SCAN_BATCH_ROWS", 1)
    assert _report(OpenCodeDB, fresh_seeded.db, 0) == whole
