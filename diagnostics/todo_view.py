"""Todo continuations (issue 9) as the reports show them: which todos each one named and
whether the reply it got moved any of them.

The facts: the daemon's injections of kind ``unfinished_todos`` (store) and OpenCode's
``todowrite`` tool parts (DB, read-only). A continuation made **progress** when a
``todowrite`` between it and the next user message changed the status of a todo (or added or
dropped one) compared with the last ``todowrite`` before it; **no progress** when its reply
finished without such a change; **pending** while no reply has finished.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from opencode_autoretry.diagnostics.records import DaemonRecords
from opencode_autoretry.diagnostics.render import Style, excerpt, iso, session_ref
from opencode_autoretry.models import Kind, Message, PartType, Role, ToolStatus, to_epoch_ms
from opencode_autoretry.opencode.db import OpenCodeDB
from opencode_autoretry.store.database import DecisionRecord, InjectionRecord

TODOS = str(Kind.UNFINISHED_TODOS)
_NAMED = re.compile(r"^- \[(?P<status>[\w-]+)\] (?P<content>.+)$", re.MULTILINE)

Statuses = dict[str, str]  # content -> status


@dataclass(frozen=True)
class TodoContinuation:
    """A continuation sent for unfinished todos, and whether the todos moved after it."""

    injection: InjectionRecord
    decision: DecisionRecord | None
    named: tuple[str, ...]  # "[pending] Add the tests"
    status: str  # progress | no_progress | pending | not_sent | cancelled
    detail: str


def todo_continuations(
    db: OpenCodeDB, records: DaemonRecords, session_id: str | None
) -> tuple[TodoContinuation, ...]:
    found = []
    for injection in records.injections:
        if session_id not in (None, injection.session_id):
            continue
        decision = records.decision(injection.decision_id)
        if decision is None or decision.kind != TODOS:
            continue
        named = tuple(f"[{m['status']}] {m['content']}" for m in _NAMED.finditer(injection.text))
        status, detail = _progress(db, injection)
        found.append(TodoContinuation(injection, decision, named, status, detail))
    return tuple(found)


def _progress(db: OpenCodeDB, injection: InjectionRecord) -> tuple[str, str]:
    if injection.state in ("failed", "cancelled"):
        state = "not_sent" if injection.state == "failed" else "cancelled"
        return state, f"{injection.state} ({injection.error or 'no reason'})"
    sent = db.message(injection.message_id) if injection.message_id else None
    if sent is None:
        return "pending", f"… pending ({injection.state})"
    opener = db.message(injection.turn_id) if injection.turn_id else None
    since = to_epoch_ms((opener or sent).time_created)
    messages = db.session_messages(sent.session_id, since)
    at = next((i for i, m in enumerate(messages) if m.id == sent.id), len(messages))
    before = _last_todos(messages[:at])
    replies = _until_next_user(messages[at + 1 :])
    if not any(m.finish for m in replies):
        return "pending", "… pending (no finished reply yet)"
    writes = [w for m in replies for w in _todo_writes(m)]
    moved = max((_changed(before, after) for after in writes), default=0)
    if moved:
        return "progress", f"✓ progress: {moved} todo(s) changed"
    return "no_progress", "✗ no todo changed"


def _until_next_user(messages: Sequence[Message]) -> list[Message]:
    replies = []
    for message in messages:
        if message.role is Role.USER:
            break
        replies.append(message)
    return replies


def _todo_writes(message: Message) -> list[Statuses]:
    writes = []
    for part in message.parts:
        if part.type is not PartType.TOOL or part.tool != "todowrite":
            continue
        if part.tool_status is not ToolStatus.COMPLETED:
            continue
        state = part.data.get("state")
        todos = _todos_of(state if isinstance(state, Mapping) else {})
        if todos is not None:
            writes.append(todos)
    return writes


def _todos_of(state: Mapping[str, Any]) -> Statuses | None:
    for source in (state.get("metadata"), state.get("input")):
        items = source.get("todos") if isinstance(source, Mapping) else None
        if isinstance(items, list):
            return {str(t.get("content")): str(t.get("status")) for t in items
                    if isinstance(t, Mapping)}
    return None


def _last_todos(messages: Sequence[Message]) -> Statuses:
    writes = [w for m in messages for w in _todo_writes(m)]
    return writes[-1] if writes else {}


def _changed(before: Statuses, after: Statuses) -> int:
    return sum(1 for key in before.keys() | after.keys() if before.get(key) != after.get(key))


def todo_json(item: TodoContinuation) -> dict[str, Any]:
    return {
        "time": iso(item.injection.created),
        "session_id": item.injection.session_id,
        "injection_id": item.injection.id,
        "decision_id": item.injection.decision_id,
        "named": list(item.named),
        "progress": {"status": item.status, "detail": item.detail},
    }


def todo_lines(items: Sequence[TodoContinuation], style: Style) -> list[str]:
    lines = [f"Todo continuations: {len(items)}"]
    colour = {"progress": "green", "no_progress": "red", "not_sent": "red"}
    for item in items:
        injection = item.injection
        named = "; ".join(item.named) or excerpt(injection.text, 60)
        lines.append(
            f"[{style.local(injection.created)}] ses={session_ref(injection.session_id)} "
            f"injection #{injection.id} ({injection.state}) named: {named}"
        )
        detail = style.paint(item.detail, colour.get(item.status, "bright_black"))
        lines.append(f"    next reply: {detail}")
    return lines
