"""Reads what the soak checks (issue 11): OpenCode's DB (read-only, ``mode=ro``), the daemon's
store (``StoreView``) and the fake provider's request log, into ``soak_checks`` rows.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fake_provider import ProviderRequest, _text_of
from soak_checks import DecisionRow, InjectionRow, MessageRow, SessionRow
from soak_plan import tag_of

from opencode_autoretry.decisions.policy import INTERRUPTION_GROUPS, Policy
from opencode_autoretry.models import BudgetGroup
from opencode_autoretry.store.database import StoreView


def _connect(db: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10.0)
    conn.execute("PRAGMA query_only = ON")
    return conn


def _user_text(parts: Sequence[dict[str, Any]]) -> tuple[str, int | None]:
    texts = [p for p in parts if p.get("type") == "text" and not p.get("synthetic")]
    injection = None
    for part in texts:
        marker = (part.get("metadata") or {}).get("autoretry")
        if isinstance(marker, dict) and marker.get("injection") is not None:
            injection = int(marker["injection"])
    return "".join(str(p.get("text", "")) for p in texts), injection


def _message(row: tuple[str, str, str], parts: Sequence[dict[str, Any]]) -> MessageRow:
    message_id, session_id, raw = row
    data = json.loads(raw)
    role = str(data.get("role"))
    if role == "user":
        text, injection = _user_text(parts)
        return MessageRow(message_id, session_id, role, text=text, injection=injection)
    error = data.get("error")
    name = str(error.get("name")) if isinstance(error, dict) else None
    return MessageRow(message_id, session_id, role, finish=data.get("finish"), error=name)


def read_opencode(db: Path) -> tuple[list[SessionRow], list[MessageRow]]:
    conn = _connect(db)
    try:
        sessions = [SessionRow(i, p) for i, p in conn.execute("SELECT id, parent_id FROM session")]
        parts: dict[str, list[dict[str, Any]]] = {}
        for message_id, raw in conn.execute("SELECT message_id, data FROM part ORDER BY id"):
            parts.setdefault(message_id, []).append(json.loads(raw))
        rows = conn.execute(
            "SELECT id, session_id, data FROM message ORDER BY session_id, time_created, id"
        ).fetchall()
    finally:
        conn.close()
    return sessions, [_message(r, parts.get(r[0], [])) for r in rows]


def read_store(path: Path) -> tuple[list[DecisionRow], list[InjectionRow]]:
    view = StoreView.open(path)
    try:
        decisions = [
            DecisionRow(d.id, d.session_id, d.turn_id, d.kind, d.action, d.reason, d.group,
                        d.used_after, d.limit)
            for d in view.decisions()
        ]
        injections = [
            InjectionRow(i.id, i.decision_id, i.session_id, i.turn_id, i.state)
            for i in view.injections()
        ]
    finally:
        view.close()
    return decisions, injections


def provider_continuations(requests: Sequence[ProviderRequest]) -> dict[str, int]:
    """Per turn tag: how many user messages after the tagged one the provider was ever sent.

    OpenCode sends the whole history, so a request's latest tagged user message names its turn
    and every user message after it is a continuation autoretry sent (tags open new turns).
    """
    seen: dict[str, int] = {}
    for request in requests:
        users = [_text_of(m.get("content")) for m in request.messages if m.get("role") == "user"]
        tagged = [i for i, text in enumerate(users) if tag_of(text)]
        if not tagged:
            continue
        tag = tag_of(users[tagged[-1]])
        assert tag is not None
        seen[tag] = max(seen.get(tag, 0), len(users) - tagged[-1] - 1)
    return seen


def budget_limits(policy: Policy) -> tuple[dict[str, int], frozenset[str], int]:
    """Per-group max retries, the interruption groups and their shared cap, from the policy."""
    limits = {group.value: policy.budget_for(group).max_retries for group in BudgetGroup}
    return limits, frozenset(g.value for g in INTERRUPTION_GROUPS), policy.cap_for()


def read_session(db: Path, session_id: str) -> list[MessageRow]:
    """One session's messages (the driver waits on them between turns)."""
    conn = _connect(db)
    try:
        parts: dict[str, list[dict[str, Any]]] = {}
        query = "SELECT message_id, data FROM part WHERE session_id = ? ORDER BY id"
        for message_id, raw in conn.execute(query, (session_id,)):
            parts.setdefault(message_id, []).append(json.loads(raw))
        rows = conn.execute(
            "SELECT id, session_id, data FROM message WHERE session_id = ? "
            "ORDER BY time_created, id", (session_id,)
        ).fetchall()
    finally:
        conn.close()
    return [_message(r, parts.get(r[0], [])) for r in rows]
