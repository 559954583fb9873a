"""``autoretry trace [DAYS|SESSION]``: every continuation, what triggered it and how it went.

Sources are joined on the durable marker: the daemon's injections (store) and the user
messages in OpenCode's DB whose text part carries ``metadata.autoretry``. Each is shown with
its trigger (the assistant step before it, classified) and its outcome (the next assistant
step): ``recovered`` (output=N), ``failed`` (ErrorName), ``blank`` (still nothing) or
``pending``; injections never delivered show ``not_sent`` / ``cancelled``. The decisions not
to act (skip, notify) follow, with their reasons.

``--json`` shape (stable)::

    {"report": "trace", "version": 1, "days": int|null, "session_id": str|null,
     "since": ISO|null,
     "continuations": [{"time": ISO, "session_id", "injection_id": int|null,
        "decision_id": int|null, "state": str|null,   # store state; null: only in the DB
        "message_id": str|null, "text": str|null,
        "trigger": {"message_id", "kind", "reason", "finish", "tokens", "error"}|null,
        "outcome": {"status": "recovered"|"failed"|"blank"|"pending"|"not_sent"|"cancelled",
                    "detail": str, "message_id": str|null}}],
     "declined": [{"time": ISO, "session_id", "decision_id": int, "action", "kind": str|null,
                   "reason", "message_id": str|null}],
     # added in issue 6 (oldest first):
     "repetition_stops": [{"time": ISO, "session_id", "message_id": str|null,
        "turn_id": str|null, "decision_id": int, "action", "taken": "reminded"|"replanned"|
        "stopped"|"skipped", "reason": str, "trimmed": bool, "keep_chars": int|null,
        "outcome": {"status": "clean"|"looped"|"pending"|"stopped"|"skipped", "detail": str,
                    "message_id": str|null}}],
     "trims": [{"id": int, "time": ISO, "session_id", "message_id", "part_id",
                "keep_chars": int, "excerpt": str|null, "decision_id": int|null}],
     # added in issue 9 (diagnostics/todo_view.py):
     "todo_continuations": [{"time": ISO, "session_id", "injection_id": int,
        "decision_id": int, "named": [str],   # "[pending] Add the tests"
        "progress": {"status": "progress"|"no_progress"|"pending"|"not_sent"|"cancelled",
                     "detail": str}}],
     # added in issue 22 (diagnostics/goal_view.py):
     "goals": [{"id": int, "session_id", "command", "turn_id": str|null,
        "state": "active"|"met"|"given_up"|"ended", "outcome": str|null, "set_at": ISO,
        "ended_at": ISO|null, "checks": [{"time": ISO, "reply_id", "exit_code": int|null,
        "duration_ms": int, "timed_out": bool, "excerpt": str|null,
        "decision_id": int|null}]}],
     # added in issue 23 (observe mode): what autoretry would have done, oldest first
     "observed": [{"time": ISO, "session_id", "decision_id": int, "action", "kind": str|null,
                   "would": str, "reason": str, "message_id": str|null}]}

A repetition stop's outcome: ``looped`` when a later repetition decision falls in the same
turn, else ``clean`` once the reminder's next assistant step finished, else ``pending``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from opencode_autoretry.diagnostics.goal_view import goal_json, goal_lines, goals_of
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
from opencode_autoretry.diagnostics.repetition_view import (
    LoopOutcome,
    RepetitionStop,
    loop_outcome,
    repetition_stops,
    stop_json,
    stop_line,
    trim_json,
    trim_line,
)
from opencode_autoretry.diagnostics.steps import (
    ClassifiedStep,
    classify_message,
    relabel_daemon_aborts,
)
from opencode_autoretry.diagnostics.subagent_view import (
    SubagentAbort,
    abort_json,
    abort_lines,
    subagent_aborts,
)
from opencode_autoretry.diagnostics.todo_view import (
    TodoContinuation,
    todo_continuations,
    todo_json,
    todo_lines,
)
from opencode_autoretry.diagnostics.trace.outcome import (
    LinkMemo,
    Outcome,
    message_links,
    undelivered,
)
from opencode_autoretry.diagnostics.trace.rows import (
    PLACEHOLDER,
    Rendered,
    TextPieces,
    marker_of,
    render_item,
    reusable,
    splice,
    with_rendered,
)
from opencode_autoretry.models import Kind, Message, Role
from opencode_autoretry.notifications.records import (
    NotificationRecord,
    notification_json,
    notification_line,
)
from opencode_autoretry.opencode.db import OpenCodeDB
from opencode_autoretry.store.database import (
    DecisionRecord,
    GoalCheckRecord,
    GoalRecord,
    InjectionRecord,
    TrimRecord,
)

DECLINED_ACTIONS = ("skip", "notify")


@dataclass(frozen=True)
class Continuation:
    """One continuation: what triggered it, what was sent and its outcome."""

    time: datetime
    session_id: str
    injection: InjectionRecord | None
    decision: DecisionRecord | None
    message: Message | None
    trigger: ClassifiedStep | None
    outcome: Outcome


@dataclass(frozen=True)
class TraceReport:
    """What trace found in its window, drawn as text or ``--json``."""

    days: int | None
    session_id: str | None
    since: datetime | None
    continuations: tuple[Continuation, ...]  # trace_rows.Rendered too, when ``rendered``
    declined: tuple[DecisionRecord, ...]
    repetition: tuple[tuple[RepetitionStop, LoopOutcome], ...] = ()
    trims: tuple[TrimRecord, ...] = ()
    todos: tuple[TodoContinuation, ...] = ()
    subagents: tuple[SubagentAbort, ...] = ()  # issue 9: hung children that were aborted
    notifications: tuple[NotificationRecord, ...] = ()
    goals: tuple[tuple[GoalRecord, tuple[GoalCheckRecord, ...]], ...] = ()  # issue 22
    observed: tuple[DecisionRecord, ...] = ()  # issue 23: observe mode's would-be actions


def _continuation(
    db: OpenCodeDB,
    records: DaemonRecords,
    injection: InjectionRecord | None,
    message: Message | None,
    now: datetime,
    memo: LinkMemo | None = None,
) -> Continuation:
    decision = records.decision(injection.decision_id) if injection else None
    if message is not None:
        trigger, outcome = (memo.links if memo else message_links)(db, message, now)
        time, session_id = message.time_created, message.session_id
    elif injection is not None:
        trigger_id = decision.message_id if decision else None
        before = db.message(trigger_id) if trigger_id else None
        outcome = undelivered(injection)
        time, session_id = injection.created, injection.session_id
        trigger = classify_message(db, before, now=now) if before is not None else None
    else:
        raise ValueError("a continuation needs an injection record or a message")
    if trigger is not None:
        (trigger,) = relabel_daemon_aborts([trigger], records)
    return Continuation(time, session_id, injection, decision, message, trigger, outcome)


def build_trace(
    db: OpenCodeDB,
    records: DaemonRecords,
    *,
    now: datetime,
    since: datetime | None = None,
    days: int | None = None,
    session_id: str | None = None,
    memo: LinkMemo | None = None,
    rendered: bool = False,
) -> TraceReport:
    """``records`` must already be limited to the same session / window; ``memo``
    remembers each continuation's trigger and outcome (the report index), and with
    ``rendered`` its JSON and text lines (trace/rows.py; the continuations may then be
    ``Rendered`` items, which only ``trace_json`` and ``render_trace`` read)."""
    ids = db.marker_message_ids(since, session_id)
    injections = [i for i in records.injections if session_id in (None, i.session_id)]
    confirmed = {i.message_id for i in injections if i.message_id}
    known = {i.id for i in injections}
    decided = {d.session_id for d in records.decisions}
    kept = getattr(memo, "rendered", None) if rendered and session_id is None else None
    reused = reusable(kept(now, ids), set(ids), decided, confirmed, known) if kept else {}
    marked = db.messages_by_id([i for i in ids if i not in reused] if reused else ids)
    by_injection = {marker_of(m): m for m in marked if m.role is Role.USER}
    found: list[Any] = [
        _continuation(db, records, i, _delivered(db, marked, by_injection, i), now, memo)
        for i in injections
    ]
    tail = [
        _continuation(db, records, None, message, now, memo)
        for message in marked
        if message.id not in confirmed and marker_of(message) not in known
    ]
    if kept:
        tail = with_rendered(
            tail, reused, memo, _continuation_json, _text_pieces, decided, now  # type: ignore[arg-type]
        )
    found += tail
    found.sort(key=lambda c: c.time)
    declined = tuple(
        d
        for d in records.decisions
        if d.action in DECLINED_ACTIONS and session_id in (None, d.session_id)
    )
    stops = tuple((s, loop_outcome(db, records, s)) for s in repetition_stops(records, session_id))
    trims = tuple(t for t in records.trims if session_id in (None, t.session_id))
    todos = todo_continuations(db, records, session_id)
    aborted = tuple(subagent_aborts(db, records, session_id))
    notes = tuple(n for n in records.notifications if session_id in (None, n.session_id))
    observed = tuple(d for d in records.observed if session_id in (None, d.session_id))
    return TraceReport(days, session_id, since, tuple(found), declined, stops, trims, todos,
                       aborted, notes, goals_of(records, session_id),
                       observed)


def _delivered(
    db: OpenCodeDB,
    marked: list[Message],
    by_injection: dict[int | None, Message],
    injection: InjectionRecord,
) -> Message | None:
    """The user message an injection became: by its marker, else by the confirmed id (in
    case OpenCode did not keep the part metadata)."""
    found = by_injection.get(injection.id)
    if found is None and injection.message_id:
        found = next((m for m in marked if m.id == injection.message_id), None)
        found = found or db.message(injection.message_id)
    return found


def _continuation_json(item: Continuation) -> dict[str, Any]:
    trigger = item.trigger
    return {
        "time": iso(item.time),
        "session_id": item.session_id,
        "injection_id": item.injection.id if item.injection else None,
        "decision_id": item.injection.decision_id if item.injection else None,
        "state": item.injection.state if item.injection else None,
        "message_id": item.message.id if item.message else None,
        "text": item.injection.text if item.injection else _text(item.message),
        "trigger": None
        if trigger is None
        else {
            "message_id": trigger.step.id,
            "kind": str(trigger.verdict.kind),
            "reason": trigger.verdict.reason,
            "finish": trigger.step.finish,
            "tokens": tokens_json(trigger.step.tokens),
            "error": trigger.step.error.name if trigger.step.error else None,
        },
        "outcome": _outcome_json(item.outcome),
    }


def _text(message: Message | None) -> str | None:
    return None if message is None else " ".join(p.text for p in message.parts if p.text)


def trace_json(report: TraceReport) -> str:
    body = {
        "days": report.days,
        "session_id": report.session_id,
        "since": iso(report.since),
        "continuations": PLACEHOLDER,
        "declined": [
            {
                "time": iso(d.at),
                "session_id": d.session_id,
                "decision_id": d.id,
                "action": d.action,
                "kind": d.kind,
                "reason": d.reason,
                "message_id": d.message_id,
            }
            for d in report.declined
        ],
        "repetition_stops": [
            {**stop_json(stop), "outcome": _outcome_json(outcome)}
            for stop, outcome in report.repetition
        ],
        "trims": [trim_json(t) for t in report.trims],
        "todo_continuations": [todo_json(t) for t in report.todos],
        "subagent_aborts": [abort_json(a) for a in report.subagents],  # issue 9
        "notifications": [notification_json(n) for n in report.notifications],
        "goals": [goal_json(goal, checks) for goal, checks in report.goals],  # issue 22
        "observed": [
            {
                "time": iso(d.at),
                "session_id": d.session_id,
                "decision_id": d.id,
                "action": d.action,
                "kind": d.kind,
                "would": d.would,
                "reason": d.reason,
                "message_id": d.message_id,
            }
            for d in report.observed
        ],
    }
    items = [
        c.text if isinstance(c, Rendered) else render_item(_continuation_json(c))
        for c in report.continuations
    ]
    return splice(dump_json("trace", body), items)


def _outcome_json(outcome: Outcome | LoopOutcome) -> dict[str, Any]:
    return {"status": outcome.status, "detail": outcome.detail, "message_id": outcome.message_id}


def _outcome_text(outcome: Outcome | LoopOutcome, style: Style) -> str:
    colour = {
        "recovered": "green",
        "failed": "red",
        "not_sent": "red",
        "blank": "yellow",
        "clean": "green",
        "looped": "red",
        "stopped": "red",
    }
    return style.paint(outcome.detail, colour.get(outcome.status, "bright_black"))


def _text_pieces(item: Continuation) -> TextPieces:
    """The continuation's lines but the local time and the colours (kept in the index)."""
    source = (
        f"injection #{item.injection.id} ({item.injection.state})"
        if item.injection
        else ("marker in OpenCode's DB (not in the store)")
    )
    text = item.injection.text if item.injection else _text(item.message)
    head = f'ses={session_ref(item.session_id)} {source} "{excerpt(text, 40)}"'
    trigger = item.trigger
    if trigger is None:
        about = "    trigger: (no earlier assistant step)"
    else:
        step = trigger.step
        about = (
            f"    trigger: {trigger.verdict.kind} — {trigger.verdict.reason} "
            f"(finish={step.finish or '-'} out={step.tokens.output} in={step.tokens.input} "
            f"cacheRead={step.tokens.cache_read} parts={len(step.parts)}"
            f"{' error=' + step.error.name if step.error else ''})"
        )
    return head, about, item.outcome.status, item.outcome.detail


def _piece_lines(time: datetime, pieces: TextPieces, style: Style) -> list[str]:
    head, about, status, detail = pieces
    return [
        f"[{style.local(time)}] {head}",
        about,
        f"    outcome: {_outcome_text(Outcome(status, detail), style)}",
    ]


def _continuation_lines(item: Continuation | Rendered, style: Style) -> list[str]:
    if isinstance(item, Rendered):
        return _piece_lines(item.time, item.pieces, style)
    lines = _piece_lines(item.time, _text_pieces(item), style)
    switch = item.decision.facts.switch if item.decision is not None else None
    if switch is not None:  # model fallback (issue 10)
        lines.append(f"    switched {switch.from_model} → {switch.to_model}")
    if item.decision is not None and item.decision.kind == str(Kind.REPETITION):
        # The daemon aborted the looping step itself, so the step reads as an abort.
        lines.append(style.dim(f"    a repetition reminder (decision #{item.decision.id})"))
    return lines


def render_trace(report: TraceReport, style: Style) -> str:
    scope = (
        f"session {report.session_id}"
        if report.session_id
        else ("all time" if report.since is None else f"last {report.days} days")
    )
    lines = [style.head(f"autoretry trace — {scope}"), RULE]
    lines.append(f"Continuations: {len(report.continuations)}")
    for item in report.continuations:
        lines.extend(_continuation_lines(item, style))
    lines += [RULE, f"Decisions not to act: {len(report.declined)}"]
    for decision in report.declined:
        lines.append(
            f"[{style.local(decision.at)}] ses={session_ref(decision.session_id)} "
            f"{decision.action.upper()} {decision.kind or '-'}: {decision.reason}"
        )
    lines.extend(_repetition_lines(report, style))
    lines += [RULE, *todo_lines(report.todos, style)]
    lines += [RULE, f"Subagent aborts: {len(report.subagents)}"]
    lines.extend(line for item in report.subagents for line in abort_lines(item, style))
    lines += [RULE, f"Notifications: {len(report.notifications)}"]
    lines += [f"[{style.local(n.at)}] ses={session_ref(n.session_id)} {notification_line(n)}"
              for n in report.notifications]
    lines += [RULE, *goal_lines(report.goals, style)]
    if report.observed:  # issue 23: shown only when observe mode recorded something
        lines += [RULE, f"Observe mode, would have acted: {len(report.observed)} "
                        "(nothing was sent, aborted or switched)"]
        lines += [f"[{style.local(d.at)}] ses={session_ref(d.session_id)} "
                  f"{(d.kind or '-')}: {d.would}" for d in report.observed]
    return "\n".join(lines)


def _repetition_lines(report: TraceReport, style: Style) -> list[str]:
    lines = [RULE, f"Repetition stops: {len(report.repetition)}"]
    for stop, outcome in report.repetition:
        lines.append(stop_line(stop, style).strip())
        lines.append(f"    reason: {stop.detector_reason}")
        lines.append(f"    outcome: {_outcome_text(outcome, style)}")
    lines.append(f"History trims: {len(report.trims)}")
    lines.extend(trim_line(t, style) for t in report.trims)
    return lines
