"""``autoretry errors [KEYWORD]``: the newest errored steps, or those whose error matches.

Without a keyword: the 10 newest assistant steps with an error, each with its kind from the
classifier and the ``autoretry timeline`` command to see it in context. With a keyword
(matched case-insensitively against the error's name, message and body): at most 5 steps with
every field and the state of the assistant step before it.

``--json`` shape (stable)::

    {"report": "errors", "version": 1, "keyword": str|null,
     "matches": [{"session_id", "message_id", "time": ISO, "finish": str|null,
                  "tokens": {...}, "parts": int, "provider": str|null, "model": str|null,
                  "error": {"name", "message", "status_code": int|null,
                            "is_retryable": bool|null, "code": str|null,
                            "response_body": str|null},
                  "kind": str, "retryable": bool, "reason": str,
                  "previous": {"id", "session_id", "time", "finish", "tokens", "has_text",
                               "has_tool", "parts", "error"}|null,   # keyword mode only
                  "command": "autoretry timeline <session_id>"}]}
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from opencode_autoretry.diagnostics.render import (
    RULE,
    Style,
    dump_json,
    excerpt,
    iso,
    step_state,
    tokens_json,
    tokens_text,
)
from opencode_autoretry.diagnostics.steps import ClassifiedStep, classify_rows
from opencode_autoretry.models import Message, Role
from opencode_autoretry.opencode.db import OpenCodeDB
from opencode_autoretry.terminal_text import visible

LATEST = 10
MATCHES = 5


@dataclass(frozen=True)
class ErrorMatch:
    found: ClassifiedStep
    previous: Message | None


@dataclass(frozen=True)
class ErrorsReport:
    keyword: str | None
    matches: tuple[ErrorMatch, ...]


def build_errors(db: OpenCodeDB, keyword: str | None, *, now: datetime) -> ErrorsReport:
    keyword = keyword.strip() if keyword else None
    rows = db.search_errors(keyword, MATCHES) if keyword else db.errored_rows(LATEST)
    classified = {c.step.id: c for c in classify_rows(db, rows, now=now)}
    matches = []
    for row in rows:  # newest first
        found = classified.get(row.id)
        if found is None:
            continue
        previous = db.neighbours(found.step, Role.ASSISTANT, before=True) if keyword else None
        matches.append(ErrorMatch(found, previous))
    return ErrorsReport(keyword, tuple(matches))


def command_for(session_id: str) -> str:
    return f"autoretry timeline {session_id}"


def _match_json(match: ErrorMatch) -> dict[str, Any]:
    step, verdict = match.found.step, match.found.verdict
    error = step.error
    return {
        "session_id": step.session_id,
        "message_id": step.id,
        "time": iso(step.time_created),
        "finish": step.finish,
        "tokens": tokens_json(step.tokens),
        "parts": len(step.parts),
        "provider": step.provider_id,
        "model": step.model_id,
        "error": None
        if error is None
        else {
            "name": error.name,
            "message": error.message,
            "status_code": error.status_code,
            "is_retryable": error.is_retryable,
            "code": error.code,
            "response_body": error.response_body,
        },
        "kind": str(verdict.kind),
        "retryable": verdict.retryable,
        "reason": verdict.reason,
        "previous": step_state(match.previous) if match.previous else None,
        "command": command_for(step.session_id),
    }


def errors_json(report: ErrorsReport) -> str:
    body = {"keyword": report.keyword, "matches": [_match_json(m) for m in report.matches]}
    return dump_json("errors", body)


def _latest_lines(match: ErrorMatch, style: Style) -> list[str]:
    step, verdict = match.found.step, match.found.verdict
    name = visible(step.error.name) if step.error else "-"
    message = excerpt(step.error.message if step.error else "", 80)
    return [
        f"[{style.local(step.time_created)}] {style.bad(name)}: {message}",
        f"    kind={verdict.kind} ({verdict.reason})",
        f"    {style.dim(command_for(step.session_id))}",
    ]


def _full_lines(match: ErrorMatch, style: Style) -> list[str]:
    step, verdict = match.found.step, match.found.verdict
    error = step.error
    lines = [
        style.head(f"{step.id} ({style.local(step.time_created)})"),
        f"  session:  {step.session_id}",
        f"  role:     {step.role}   finish: {step.finish or '-'}   parts: {len(step.parts)}",
        f"  tokens:   {tokens_text(step.tokens)}",
        f"  model:    {visible(step.provider_id or '-')}/{visible(step.model_id or '-')}",
        f"  kind:     {verdict.kind} ({'retryable' if verdict.retryable else 'not retryable'})"
        f" — {verdict.reason}",
    ]
    if error is not None:
        lines += [
            f"  error:    {style.bad(visible(error.name))}: {visible(error.message)}",
            f"  status:   {error.status_code or '-'}   retryable: {error.is_retryable}"
            f"   code: {error.code or '-'}",
        ]
        if error.response_body:
            lines.append(f"  body:     {excerpt(error.response_body, 200)}")
    previous = match.previous
    if previous is None:
        lines.append("  previous: (no earlier assistant step)")
    else:
        state = step_state(previous)
        lines.append(
            f"  previous: finish={state['finish'] or '-'} out={previous.tokens.output} "
            f"hasTool={state['has_tool']} hasText={state['has_text']} error={state['error'] or '-'}"
        )
    lines.append(f"  {style.dim(command_for(step.session_id))}")
    return lines


def render_errors(report: ErrorsReport, style: Style) -> str:
    if report.keyword:
        title = f"Errors matching {report.keyword!r}: {len(report.matches)} (at most {MATCHES})"
    else:
        title = f"The {LATEST} newest errored steps: {len(report.matches)}"
    lines = [style.head(title), RULE]
    if not report.matches:
        lines.append(style.good("✓ none"))
    for match in report.matches:
        lines.extend(_full_lines(match, style) if report.keyword else _latest_lines(match, style))
    return "\n".join(lines)
