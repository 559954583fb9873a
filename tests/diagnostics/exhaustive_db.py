"""The report prefilters' specification, with no shortcut: a reference to compare them with.

``ExhaustiveDB`` answers ``step_candidates`` and ``tool_markup_candidates`` by parsing every
row in Python (no raw-text test, no key-order or spacing assumption), so a report built on it
shows what the fast SQL prefilters of ``OpenCodeDB`` must find. ``build_diagnose`` opens its
worker connections with ``type(db)``, so handing it an ``ExhaustiveDB`` is enough. Used by
``test_prefilter_reference.py`` and by ``bench/reports.py --check``.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from opencode_autoretry.decisions.classifier import classify
from opencode_autoretry.diagnostics.diagnose import build_diagnose, diagnose_json
from opencode_autoretry.diagnostics.records import DaemonRecords
from opencode_autoretry.models import Kind, Message, Role, Turn
from opencode_autoretry.opencode.db import MessageRow, OpenCodeDB
from opencode_autoretry.opencode.dbtypes import ms_or_zero
from opencode_autoretry.opencode.shapes import load_json, parse_part


def is_healthy(data: Mapping[str, Any]) -> bool:
    """No error, and finish ``tool-calls``, or ``stop`` with at least one output token."""
    if data.get("error") is not None:
        return False
    finish = data.get("finish")
    tokens = data.get("tokens")
    output = tokens.get("output") if isinstance(tokens, Mapping) else None
    counted = isinstance(output, int | float) and not isinstance(output, bool) and output >= 1
    return finish == "tool-calls" or (finish == "stop" and counted)


def writes_tool_as_text(message_id: str, session_id: str, parts: list[Any]) -> bool:
    """Whether these text parts alone make a finished answer a tool call written as text
    (asked of the classifier itself, so the reference uses its exact pattern)."""
    at = parts[0].time_created
    opener = Message(id="user", session_id=session_id, role=Role.USER, time_created=at)
    step = Message(
        id=message_id,
        session_id=session_id,
        role=Role.ASSISTANT,
        time_created=at,
        time_completed=at,
        finish="stop",
        parts=tuple(parts),
    )
    verdict = classify(Turn(session_id, opener, (step,)), None, now=at)
    return verdict.kind is Kind.TOOL_AS_TEXT


class ExhaustiveDB(OpenCodeDB):
    """``OpenCodeDB`` whose report prefilters parse every row (slow, exact)."""

    def step_candidates(
        self, cut: datetime | None, rowids: tuple[int, int] | None = None
    ) -> list[MessageRow]:
        low, high = rowids or (0, 1 << 62)
        rows = self._message_rows(
            "rowid >= ? AND rowid < ? AND time_created >= ?",
            (low, high, ms_or_zero(cut)),
            "ORDER BY rowid",
        )
        return [r for r in rows if r.data.get("role") == "assistant" and not is_healthy(r.data)]

    def tool_markup_candidates(
        self, cut: datetime | None, rowids: tuple[int, int] | None = None
    ) -> list[MessageRow]:
        low, high = rowids or (0, 1 << 62)
        sql = "SELECT id, message_id, session_id, time_created, data FROM part"
        sql += " WHERE rowid >= ? AND rowid < ? AND time_created >= ?"
        texts: dict[tuple[str, str], list[Any]] = defaultdict(list)
        for pid, mid, sid, created, raw in self._rows(sql, (low, high, ms_or_zero(cut))):
            data = load_json(raw)
            if data.get("type") == "text":
                texts[(mid, sid)].append(parse_part(pid, mid, sid, created, data))
        found = [mid for (mid, sid), parts in texts.items() if writes_tool_as_text(mid, sid, parts)]
        rows = [self.row(mid) for mid in found]
        return sorted(
            (r for r in rows if r is not None and r.data.get("role") == "assistant"),
            key=lambda r: (r.time_created, r.id),
        )


NO_BRIDGE = Path("/nonexistent/autoretry.js")


def diagnose_report(
    reader: type[OpenCodeDB],
    path: Path,
    *,
    now: datetime,
    days: int,
    bridge: Path = NO_BRIDGE,
) -> str:
    """``diagnose --json --limit 0`` built on ``reader`` (an empty store; ``bridge``: where the
    bridge would be, none by default)."""
    db = reader.open(path)
    try:
        built = build_diagnose(db, DaemonRecords(), now=now, days=days, bridge_path=bridge)
        return diagnose_json(built, limit=0)
    finally:
        db.close()


def reference_verdict(path: Path, *, now: datetime, days: int) -> tuple[str, bool]:
    """A line saying whether ``OpenCodeDB``'s report equals the reference, and the answer."""
    fast, reference = (
        diagnose_report(reader, path, now=now, days=days) for reader in (OpenCodeDB, ExhaustiveDB)
    )
    kinds = json.loads(fast)["kinds"].items()
    counts = {kind: found["count"] for kind, found in kinds if found["count"]}
    same = fast == reference
    return f"diagnose {days}: same as the exhaustive reference: {same}; {counts}", same
