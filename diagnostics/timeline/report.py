"""``autoretry timeline SESSION``: one session's messages, parts and the daemon's actions.

SESSION is an id, a unique id prefix or a slug. Parts are read from the ``part`` table (the
prior art read them from ``message.data``, where they never are). The daemon's decisions and
injections are merged in by time.

``--json`` shape (stable)::

    {"report": "timeline", "version": 1,
     "session": {"id", "slug", "title", "directory", "version", "parent_id": str|null,
                 "time_created": ISO},
     "entries": [  # in time order
       {"type": "message", "role": "user", "id", "time": ISO,
        "origin": "real"|"injected"|"synthetic", "marker": {...}|null, "parts": [PART]},
       {"type": "message", "role": "assistant", "id", "time": ISO, "parent_id",
        "finish": str|null, "tokens": {...}, "error": {"name", "message"}|null,
        "completed": ISO|null, "parts": [PART]},
       {"type": "decision", "id": int, "time": ISO, "action", "kind": str|null, "reason",
        "group": str|null, "used_before": int, "used_after": int, "limit": int,
        "message_id": str|null},
       {"type": "injection", "id": int, "time": ISO, "decision_id": int, "state", "text",
        "message_id": str|null, "error": str|null},
       {"type": "trim", "id": int, "time": ISO, "session_id", "message_id", "part_id",
        "keep_chars": int, "excerpt": str|null, "decision_id": int|null}],  # issue 6
     "verdict": {"kind", "retryable": bool, "reason", "message_id"}|null}  # the newest step
    PART = {"type", "text": str (excerpt, text/reasoning), "tool": str, "status": str,
            "loop_start": int}  # only on a trimmed part: where the kept text ends (issue 6)

``--html FILE`` draws the same entries as one self-contained page (``timeline_page.py``).

A trimmed part (a stopped loop, issue 6) shows its text up to the cut, a ``⟲ loop began
here`` line and the repeated block once: the model no longer sees the rest, the TUI does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from opencode_autoretry.diagnostics.records import DaemonRecords
from opencode_autoretry.diagnostics.render import (
    RULE,
    Style,
    dump_json,
    excerpt,
    iso,
    session_ref,
    tokens_json,
)
from opencode_autoretry.diagnostics.repetition_view import loop_part_lines, trim_json
from opencode_autoretry.diagnostics.steps import classify_message, relabel_daemon_aborts
from opencode_autoretry.diagnostics.subagent_view import is_subagent_abort
from opencode_autoretry.models import Message, Part, PartType, Role, Session, Verdict
from opencode_autoretry.opencode.db import OpenCodeDB
from opencode_autoretry.store.database import DecisionRecord, InjectionRecord, TrimRecord
from opencode_autoretry.terminal_text import visible

Entry = Message | DecisionRecord | InjectionRecord | TrimRecord
Record = DecisionRecord | InjectionRecord | TrimRecord


@dataclass(frozen=True)
class TimelineReport:
    session: Session
    entries: tuple[Entry, ...]
    verdict: Verdict | None
    trims: Mapping[str, TrimRecord] = field(default_factory=dict)  # by part id


def _entry_time(entry: Entry) -> datetime:
    if isinstance(entry, Message):
        return entry.time_created
    if isinstance(entry, DecisionRecord | TrimRecord):
        return entry.at
    return entry.created


def build_timeline(
    db: OpenCodeDB, session: Session, records: DaemonRecords, *, now: datetime
) -> TimelineReport:
    messages = db.session_messages(session.id)
    entries: list[Entry] = [*messages]
    entries.extend(records.decisions_for(session.id))
    entries.extend(d for d in records.decisions if d.session_id != session.id
                   and is_subagent_abort(d))  # its children's aborts (issue 9)
    entries.extend(records.injections_for(session.id))
    trims = records.trims_for(session.id)
    entries.extend(trims)
    entries.sort(key=lambda e: (_entry_time(e), 0 if isinstance(e, Message) else 1))
    last = next((m for m in reversed(messages) if m.role is Role.ASSISTANT), None)
    verdict = classify_message(db, last, now=now) if last is not None else None
    if verdict is not None:  # a step the daemon aborted is what it stopped, not a user abort
        verdict = relabel_daemon_aborts([verdict], records)[0]
    found = verdict.verdict if verdict else None
    return TimelineReport(session, tuple(entries), found, {t.part_id: t for t in trims})


def origin(message: Message) -> str:
    if message.marker is not None:
        return "injected"
    return "synthetic" if message.synthetic else "real"


def _part_json(part: Part, trims: Mapping[str, TrimRecord]) -> dict[str, Any]:
    found: dict[str, Any] = {"type": str(part.type)}
    if part.type in (PartType.TEXT, PartType.REASONING):
        found["text"] = excerpt(part.text, 200)
        if part.id in trims:
            found["loop_start"] = trims[part.id].keep_chars
    if part.type is PartType.TOOL:
        found["tool"] = part.tool
        found["status"] = part.tool_status and str(part.tool_status)
    return found


def _message_json(message: Message, trims: Mapping[str, TrimRecord]) -> dict[str, Any]:
    found: dict[str, Any] = {
        "type": "message",
        "role": str(message.role),
        "id": message.id,
        "time": iso(message.time_created),
        "parts": [_part_json(p, trims) for p in message.parts],
    }
    if message.role is Role.USER:
        marker = message.marker
        found.update(origin=origin(message), marker=dict(marker) if marker else None)
        return found
    error = message.error
    found.update(
        parent_id=message.parent_id,
        finish=message.finish,
        tokens=tokens_json(message.tokens),
        error={"name": error.name, "message": error.message} if error else None,
        completed=iso(message.time_completed),
    )
    return found


def _record_json(entry: Record) -> dict[str, Any]:
    if isinstance(entry, TrimRecord):
        return {"type": "trim", **trim_json(entry)}
    if isinstance(entry, DecisionRecord):
        return {
            "type": "decision",
            "id": entry.id,
            "session_id": entry.session_id,  # a child's, for its aborts (issue 9)
            "time": iso(entry.at),
            "action": entry.action,
            "kind": entry.kind,
            "reason": entry.reason,
            "group": entry.group,
            "used_before": entry.used_before,
            "used_after": entry.used_after,
            "limit": entry.limit,
            "message_id": entry.message_id,
        }
    return {
        "type": "injection",
        "id": entry.id,
        "time": iso(entry.created),
        "decision_id": entry.decision_id,
        "state": entry.state,
        "text": entry.text,
        "message_id": entry.message_id,
        "error": entry.error,
    }


def timeline_json(report: TimelineReport) -> str:
    session, verdict = report.session, report.verdict
    body = {
        "session": {
            "id": session.id,
            "slug": session.slug,
            "title": session.title,
            "directory": session.directory,
            "version": session.version,
            "parent_id": session.parent_id,
            "time_created": iso(session.time_created),
        },
        "entries": [
            _message_json(e, report.trims) if isinstance(e, Message) else _record_json(e)
            for e in report.entries
        ],
        "verdict": None
        if verdict is None
        else {
            "kind": str(verdict.kind),
            "retryable": verdict.retryable,
            "reason": verdict.reason,
            "message_id": verdict.message_id,
        },
    }
    return dump_json("timeline", body)


def _part_line(part: Part, style: Style) -> str | None:
    if part.type is PartType.TEXT:
        return f'text: "{excerpt(part.text, 80)}"' if part.text.strip() else "text: (empty)"
    if part.type is PartType.REASONING:
        return style.dim(f'reasoning: "{excerpt(part.text, 80)}"')
    if part.type is PartType.TOOL:
        status = str(part.tool_status or "?")
        shown = style.bad(status) if status == "error" else status
        return f"tool: {part.tool}({(part.data.get('callID') or '')[-8:]})[{shown}]"
    if part.type in (PartType.COMPACTION, PartType.PATCH, PartType.FILE, PartType.SUBTASK):
        return style.dim(str(part.type))
    return None  # step-start / step-finish carry nothing the header does not show


def _content_lines(part: Part, trims: Mapping[str, TrimRecord], style: Style) -> list[str]:
    trim = trims.get(part.id)
    if trim is not None and part.type in (PartType.TEXT, PartType.REASONING):
        return loop_part_lines(part, trim, style)
    line = _part_line(part, style)
    return [line] if line else []


def _message_lines(
    index: int, message: Message, style: Style, trims: Mapping[str, TrimRecord]
) -> list[str]:
    when = style.local(message.time_created, with_date=False)
    if message.role is Role.USER:
        kind = origin(message)
        label = style.paint(kind, "magenta") if kind == "injected" else kind
        text = excerpt(" ".join(p.text for p in message.parts if p.text), 80)
        lines = [f'[{index}] {when} USER ({label}) "{text}"']
    else:
        head = f"[{index}] {when} ASST finish={visible(message.finish or '-')} " + (
            f"in={message.tokens.input} out={message.tokens.output}"
            f" cacheRead={message.tokens.cache_read}"
        )
        if message.error is not None:
            error = f"err={visible(message.error.name)}: {excerpt(message.error.message, 60)}"
            head += " " + style.bad(error)
        lines = [head]
        parts = [line for p in message.parts for line in _content_lines(p, trims, style)]
        lines.extend(f"      {line}" for line in parts or [style.dim("(no content parts)")])
    return lines


def _record_line(entry: Record, style: Style) -> str:
    if isinstance(entry, TrimRecord):
        text = (
            f"daemon {style.local(entry.at, False)} TRIM part {entry.part_id[-8:]}: "
            f"kept {entry.keep_chars} chars"
        )
        return "      ↳ " + style.paint(text, "blue")
    if isinstance(entry, DecisionRecord):
        budget = f" budget {entry.used_after}/{entry.limit}" if entry.limit else ""
        text = f"daemon {style.local(entry.at, False)} {entry.action.upper()} {entry.kind or '-'}: "
        if entry.kind == "subagent_stall":
            text += f"ses={session_ref(entry.session_id)} "
        return "      ↳ " + style.paint(text + entry.reason + budget, "blue")
    tail = f" ({entry.error})" if entry.error else ""
    text = f'injection #{entry.id} {entry.state} "{excerpt(entry.text, 40)}"{tail}'
    return "      ↳ " + style.paint(text, "blue")


def render_timeline(report: TimelineReport, style: Style) -> str:
    session = report.session
    lines = [
        style.head(visible(f"Session {session.id} ({session.slug}) — {session.title}")),
        f"dir={visible(session.directory)} version={session.version} "
        f"created={style.local(session.time_created)}",
    ]
    if session.parent_id:
        lines.append(style.warn(f"child session of {session.parent_id}: never continued"))
    lines.append(RULE)
    index = 0
    for entry in report.entries:
        if isinstance(entry, Message):
            index += 1
            lines.extend(_message_lines(index, entry, style, report.trims))
        else:
            lines.append(_record_line(entry, style))
    lines.append(RULE)
    verdict = report.verdict
    if verdict is not None:
        lines.append(f"Newest step: {verdict.kind} — {verdict.reason}")
    first_error = next(
        (e for e in report.entries if isinstance(e, Message) and e.error is not None), None
    )
    if first_error is not None and first_error.error is not None:
        when = style.local(first_error.time_created)
        lines.append(f"First error at {when}: {visible(first_error.error.name)}")
    return "\n".join(lines)
