"""A session's timeline as marks on a time axis, for ``autoretry timeline SESSION --html``.

Each message, decision, continuation and trim of a ``TimelineReport`` becomes a ``Mark`` in
one of four lanes: what the user (or autoretry, or OpenCode itself) sent, the assistant steps
(coloured by what the classifier makes of them), what OpenCode did by itself (its own retries:
one ``step-start`` part per attempt, or a retryable error it gave up on after retrying), and
what autoretry decided and did (waits drawn from the decision to the time it was due).

Pure: the caller passes the steps' verdicts and the continuations' outcomes. Decision actions
are the store's strings, so an action added later gets a mark of its own class as it is.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime

from opencode_autoretry.causes import Cause
from opencode_autoretry.diagnostics.render import excerpt, iso, tokens_text
from opencode_autoretry.diagnostics.timeline.report import TimelineReport, origin
from opencode_autoretry.diagnostics.trace.outcome import Outcome
from opencode_autoretry.models import Kind, Message, PartType, Role, Verdict
from opencode_autoretry.store.database import DecisionRecord, InjectionRecord, TrimRecord

LANES = (
    ("turns", "messages sent"),
    ("steps", "assistant steps"),
    ("opencode", "OpenCode by itself"),
    ("autoretry", "autoretry decides"),
    ("continuations", "continuations"),
)
#: The mark classes and what they mean (the page's legend, in this order).
LEGEND = {
    "user-real": "your message",
    "user-injected": "continuation sent by autoretry",
    "user-synthetic": "OpenCode's own message (compaction)",
    "ok": "step ended normally",
    "fault": "failed step (a fault)",
    "abort": "step aborted by the user",
    "tools": "step ended in tool calls",
    "running": "step still running",
    "oc-retry": "OpenCode retried by itself",
    "wait": "autoretry waiting before it continues",
    "inject": "decision: continue",
    "abort-inject": "decision: abort, then continue",
    "notify": "gave up: budget used up, waiting for you",
    "skip": "decision not to act",
    "loop": "loop stopped / trimmed",
    "recovered": "continuation: recovered",
    "failed": "continuation: failed or still blank",
    "pending": "continuation: pending",
    "other": "other decision",
}
_ACTION_CLASS = {
    "inject": "inject",
    "inject_at": "inject",
    "abort_then_inject": "abort-inject",
    "notify": "notify",
    "skip": "skip",
}
_OUTCOME_CLASS = {"recovered": "recovered", "clean": "recovered", "pending": "pending"}


@dataclass(frozen=True)
class Mark:
    lane: str
    start: datetime
    end: datetime | None
    css: str
    label: str  # a glyph or two drawn on the mark
    title: str
    detail: tuple[str, ...] = ()
    ref: str | None = None  # the message (steps) or decision's message this mark is about
    count: int = 1  # identical steps in a row folded into this mark
    child: str | None = None  # a task step's child session


#: A run of at least this many identical steps in a row is drawn as one mark with a count.
FOLD_RUN = 3
_CONTINUING = frozenset({"inject", "inject_at", "abort_then_inject"})


def _step_class(verdict: Verdict | None, message: Message, last: bool) -> str:
    """Only the newest step, still open, is running (issue 24: a two-day-old session's
    tool-call steps were drawn as "step still running")."""
    if verdict is None or verdict.kind is Kind.HEALTHY:
        return "ok"
    if verdict.kind is Kind.RUNNING:
        if last and message.time_completed is None:
            return "running"
        has_tools = any(p.type is PartType.TOOL for p in message.parts)
        return "tools" if has_tools or message.finish == "tool-calls" else "ok"
    return "abort" if verdict.kind is Kind.USER_ABORT else "fault"


def _child_session(message: Message) -> str | None:
    """The session a ``task`` tool call started (OpenCode keeps it in the call's metadata)."""
    for part in message.parts:
        if part.type is PartType.TOOL and part.tool == "task":
            state = part.data.get("state")
            meta = state.get("metadata") if isinstance(state, Mapping) else None
            child = meta.get("sessionId") if isinstance(meta, Mapping) else None
            if isinstance(child, str) and child:
                return child
    return None


def _user_mark(message: Message) -> Mark:
    kind = origin(message)
    text = excerpt(" ".join(p.text for p in message.parts if p.text), 160)
    label = {"real": "U", "injected": "↻", "synthetic": "S"}[kind]
    title = {"real": "your message", "injected": "continuation", "synthetic": "OpenCode"}[kind]
    return Mark("turns", message.time_created, None, f"user-{kind}", label, title, (text,))


def _step_marks(message: Message, verdict: Verdict | None, last: bool = False) -> list[Mark]:
    css = _step_class(verdict, message, last)
    detail = [f"finish={message.finish or '-'} {tokens_text(message.tokens)}"]
    if message.error is not None:
        detail.append(f"error {message.error.name}: {excerpt(message.error.message, 160)}")
    if verdict is not None:
        detail.append(f"{verdict.kind}: {verdict.reason}")
    tools = [p.tool or "?" for p in message.parts if p.type is PartType.TOOL]
    if tools:
        detail.append("tools: " + ", ".join(tools))
    child = _child_session(message)
    if child is not None:
        detail.append(f"child session {child}: autoretry timeline {child}")
    title = "step" if verdict is None else f"step: {verdict.kind}"
    if verdict is not None and verdict.kind is Kind.RUNNING and css != "running":
        title = "step: ended in tool calls" if css == "tools" else "step: finished"
    label = {"ok": "✓", "running": "…", "tools": "⚙"}.get(css, "✗")
    marks = [
        Mark(
            "steps", message.time_created, message.time_completed, css, label, title,
            tuple(detail), ref=message.id, child=child,
        )
    ]
    retry = _opencode_retries(message)
    if retry is not None:
        marks.append(
            Mark(
                "opencode",
                message.time_created,
                message.time_completed,
                "oc-retry",
                "⟳",
                "OpenCode retried by itself",
                (retry,),
            )
        )
    return marks


def _opencode_retries(message: Message) -> str | None:
    """OpenCode writes one step-start part per attempt; a retryable error is what is left
    after its own retries (reference §2.7: up to 5)."""
    attempts = sum(1 for p in message.parts if p.type is PartType.STEP_START)
    if attempts > 1:
        return f"{attempts} attempts in this step ({attempts - 1} retries by OpenCode)"
    error = message.error
    if error is not None and error.is_retryable:
        return f"{error.name} after OpenCode's own retries (up to 5)"
    return None


def _decision_marks(decision: DecisionRecord) -> list[Mark]:
    action = decision.action
    css = _ACTION_CLASS.get(action, "other")
    if decision.kind == str(Kind.REPETITION) and action == "notify":
        css = "loop"
    lane = "opencode" if decision.cause is Cause.OPENCODE_RETRYING else "autoretry"
    budget = f"budget {decision.used_after}/{decision.limit}" if decision.limit else ""
    detail = tuple(x for x in (decision.reason, budget, f"decision #{decision.id}") if x)
    title = f"{action} {decision.kind or ''}".strip()
    label = {"inject": "▶", "abort-inject": "■", "notify": "!", "skip": "·", "loop": "⟲"}
    marks = [Mark(lane, decision.at, None, css, label.get(css, "?"), title, detail,
                  ref=decision.message_id if action in _CONTINUING else None)]
    if decision.due is not None and decision.due > decision.at:
        wait = f"waits {(decision.due - decision.at).total_seconds():g} s, due {iso(decision.due)}"
        marks.insert(
            0,
            Mark(
                "autoretry",
                decision.at,
                decision.due,
                "wait",
                "",
                "waiting",
                (wait, decision.reason),
            ),
        )
    return marks


def _injection_mark(injection: InjectionRecord, outcome: Outcome | None) -> Mark:
    status = outcome.status if outcome else "pending"
    css = _OUTCOME_CLASS.get(status, "failed")
    detail = [f"state {injection.state}", f'"{excerpt(injection.text, 120)}"']
    if outcome is not None:
        detail.append(f"outcome: {outcome.detail}")
    if injection.error:
        detail.append(injection.error)
    label = {"recovered": "✓", "pending": "…"}.get(css, "✗")
    return Mark(
        "continuations",
        injection.created,
        injection.confirmed_at,
        css,
        label,
        f"continuation #{injection.id}: {status}",
        tuple(detail),
    )


def _trim_mark(trim: TrimRecord) -> Mark:
    detail = (f"kept {trim.keep_chars} chars of part {trim.part_id}", excerpt(trim.excerpt, 120))
    return Mark("autoretry", trim.at, None, "loop", "⟲", "loop trimmed from the history", detail)


def build_marks(
    report: TimelineReport,
    verdicts: Mapping[str, Verdict],
    outcomes: Mapping[int, Outcome],
) -> list[Mark]:
    """Every entry of the report as marks, in time order."""
    marks: list[Mark] = []
    steps = [e for e in report.entries if isinstance(e, Message) and e.role is Role.ASSISTANT]
    newest = steps[-1].id if steps else None
    for entry in report.entries:
        if isinstance(entry, Message):
            if entry.role is Role.USER:
                marks.append(_user_mark(entry))
            else:
                marks += _step_marks(entry, verdicts.get(entry.id), entry.id == newest)
        elif isinstance(entry, DecisionRecord):
            marks += _decision_marks(entry)
        elif isinstance(entry, InjectionRecord):
            marks.append(_injection_mark(entry, outcomes.get(entry.id)))
        else:
            marks.append(_trim_mark(entry))
    marks.sort(key=lambda m: m.start)
    return fold_runs(marks)


def _same_step(a: Mark, b: Mark) -> bool:
    """Same class, finish, tokens, error and tools: the verdict's reason may differ (a runaway's
    "N steps in a row" grows with each)."""
    def key(mark: Mark) -> tuple[object, ...]:
        kept = tuple(d for d in mark.detail if not d.startswith(mark.title.removeprefix("step: ")))
        return mark.css, mark.title, kept

    return a.lane == b.lane == "steps" and key(a) == key(b)


def fold_runs(marks: list[Mark]) -> list[Mark]:
    """Runs of ``FOLD_RUN`` or more identical steps in a row (a runaway's 39 empty steps),
    nothing else in between, as one mark spanning them with a count."""
    folded: list[Mark] = []
    run: list[Mark] = []

    def flush() -> None:
        if len(run) >= FOLD_RUN:
            first, last = run[0], run[-1]
            note = f"{len(run)} identical steps in a row, folded into this mark"
            folded.append(replace(
                first, end=last.end or last.start, count=len(run),
                label=f"{first.label}×{len(run)}", title=f"{first.title} ×{len(run)}",
                detail=(note, *last.detail),
            ))
        else:
            folded.extend(run)
        run.clear()

    for mark in marks:
        if run and not _same_step(run[-1], mark):
            flush()
        if mark.lane == "steps":
            run.append(mark)
        else:
            flush()
            folded.append(mark)
    flush()
    return folded


def verdict_line(marks: list[Mark]) -> str:
    """The page's one-line answer: how many faults, how many autoretry continued."""
    faults = [m for m in marks if m.css == "fault"]
    total = sum(m.count for m in faults)
    if not total:
        return "No faults: every finished step ended normally."
    continued_ids = {m.ref for m in marks if m.lane == "autoretry" and m.ref}
    continued = sum(m.count for m in faults if m.ref in continued_ids)
    word = "fault" if total == 1 else "faults"
    return f"{total} {word}: {continued} continued by autoretry, {total - continued} left to you"
