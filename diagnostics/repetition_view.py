"""Repetition stops (issue 6) as the reports show them: what the daemon did about each loop,
whether it trimmed the loop out of the model's context, and how the reminder went.

The facts come from the store only: a decision of kind ``repetition`` (its action says what
was done, its ``used_before`` whether it was the first reminder or the re-plan) and the trim
recorded with it. ``diagnose``, ``trace`` and ``timeline`` share these helpers.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from opencode_autoretry.causes import NOTIFY_CAUSES, Cause
from opencode_autoretry.diagnostics.records import DaemonRecords
from opencode_autoretry.diagnostics.render import Style, excerpt, iso, session_ref, short_id
from opencode_autoretry.models import Kind, Message, Part, PartType, Role
from opencode_autoretry.opencode.db import OpenCodeDB
from opencode_autoretry.store.database import DecisionRecord, InjectionRecord, TrimRecord

REPETITION = str(Kind.REPETITION)
SEND_ACTIONS = ("abort_then_inject", "inject", "inject_at")
#: Decisions whose reason names the detector's own words (``Facts.detail``):
#: ``<action>: repetition (<detector reason>); <budget or why>``.
_NAMES_DETECTOR = frozenset({Cause.RETRY, Cause.MODEL_SWITCH, *NOTIFY_CAUSES})
LOOP_MARK = "⟲"


@dataclass(frozen=True)
class RepetitionStop:
    """A repetition guard's decision and the trim of the looping text, if one was made."""

    decision: DecisionRecord
    trim: TrimRecord | None

    @property
    def taken(self) -> str:
        """reminded (first unit) / replanned (a later one) / stopped (budget spent) / skipped."""
        action = self.decision.action
        if action in SEND_ACTIONS:
            return "reminded" if self.decision.used_before == 0 else "replanned"
        return "stopped" if action == "notify" else "skipped"

    @property
    def detector_reason(self) -> str:
        detail = self.decision.facts.detail
        named = detail is not None and self.decision.cause in _NAMES_DETECTOR
        return detail if detail is not None and named else self.decision.reason


@dataclass(frozen=True)
class LoopOutcome:
    """How the step after a reminder went: ``clean``, ``looped`` again, ``pending``,
    ``stopped`` (no reminder: the budget was spent) or ``skipped``."""

    status: str
    detail: str
    message_id: str | None = None


def repetition_stops(
    records: DaemonRecords, session_id: str | None = None
) -> tuple[RepetitionStop, ...]:
    """The repetition decisions (oldest first), each with its trim when one was recorded
    (joined by decision id; else by the decision's message, for trims kept without one)."""
    by_decision = {t.decision_id: t for t in records.trims if t.decision_id is not None}
    by_message = {t.message_id: t for t in records.trims if t.decision_id is None}
    return tuple(
        RepetitionStop(d, by_decision.get(d.id) or by_message.get(d.message_id or ""))
        for d in records.decisions
        if d.kind == REPETITION and session_id in (None, d.session_id)
    )


def _looped_again(stop: RepetitionStop, later: Iterable[DecisionRecord]) -> DecisionRecord | None:
    decision = stop.decision
    return next(
        (
            d
            for d in later
            if d.kind == REPETITION
            and d.id > decision.id
            and d.session_id == decision.session_id
            and d.turn_id == decision.turn_id
        ),
        None,
    )


def _reminder(records: DaemonRecords, decision_id: int) -> InjectionRecord | None:
    return next((i for i in records.injections if i.decision_id == decision_id), None)


def _next_step(db: OpenCodeDB, injection: InjectionRecord | None) -> Message | None:
    if injection is None or not injection.message_id:
        return None
    delivered = db.message(injection.message_id)
    return None if delivered is None else db.neighbours(delivered, Role.ASSISTANT, before=False)


def loop_outcome(db: OpenCodeDB, records: DaemonRecords, stop: RepetitionStop) -> LoopOutcome:
    """A later repetition decision in the same turn means the reminder did not help; else the
    reminder's next assistant step, once finished, counts as clean."""
    if stop.taken == "stopped":
        return LoopOutcome("stopped", "■ stopped (budget spent; waiting for the user)")
    if stop.taken == "skipped":
        return LoopOutcome("skipped", "– not acted on")
    again = _looped_again(stop, records.decisions)
    if again is not None:
        return LoopOutcome("looped", f"✗ looped again (decision #{again.id})", again.message_id)
    injection = _reminder(records, stop.decision.id)
    step = _next_step(db, injection)
    if step is None:
        state = injection.state if injection else "no reminder recorded"
        return LoopOutcome("pending", f"… pending ({state})")
    if step.finish is None and step.error is None and step.time_completed is None:
        return LoopOutcome("pending", "… pending (reply in progress)", step.id)
    return LoopOutcome("clean", "✓ clean (no loop after the reminder)", step.id)


def trim_json(trim: TrimRecord) -> dict[str, Any]:
    return {
        "id": trim.id,
        "time": iso(trim.at),
        "session_id": trim.session_id,
        "message_id": trim.message_id,
        "part_id": trim.part_id,
        "keep_chars": trim.keep_chars,
        "excerpt": trim.excerpt,
        "decision_id": trim.decision_id,
    }


def stop_json(stop: RepetitionStop) -> dict[str, Any]:
    decision = stop.decision
    return {
        "time": iso(decision.at),
        "session_id": decision.session_id,
        "message_id": decision.message_id,
        "turn_id": decision.turn_id,
        "decision_id": decision.id,
        "action": decision.action,
        "taken": stop.taken,
        "reason": stop.detector_reason,
        "trimmed": stop.trim is not None,
        "keep_chars": stop.trim.keep_chars if stop.trim else None,
    }


def stop_line(stop: RepetitionStop, style: Style) -> str:
    decision = stop.decision
    taken = stop.taken
    colour = {"reminded": "yellow", "replanned": "yellow", "stopped": "red"}
    shown = style.paint(taken, colour.get(taken, "bright_black"))
    trimmed = f"yes (char {stop.trim.keep_chars})" if stop.trim else "no"
    return (
        f"  [{style.local(decision.at)}] ses={session_ref(decision.session_id)} "
        f"msg={short_id(decision.message_id)} {shown} trimmed={trimmed}"
    )


def trim_line(trim: TrimRecord, style: Style) -> str:
    decision = f" (decision #{trim.decision_id})" if trim.decision_id is not None else ""
    return (
        f"[{style.local(trim.at)}] ses={session_ref(trim.session_id)}"
        f" msg={short_id(trim.message_id)}"
        f" part={short_id(trim.part_id)} kept {trim.keep_chars} chars{decision}"
        f' "{excerpt(trim.excerpt, 40)}"'
    )


def loop_part_lines(part: Part, trim: TrimRecord, style: Style) -> list[str]:
    """A trimmed part: its text up to the cut, where the loop began, the repeated block once."""
    text = part.text
    cut = min(trim.keep_chars, len(text))
    kept = text[:cut]
    before = excerpt(kept[-80:] if len(kept) > 80 else kept, 80)
    lead = "…" if len(kept) > 80 else ""
    label = "text" if part.type is PartType.TEXT else "reasoning"
    marker = (
        f"{LOOP_MARK} loop began here (char {trim.keep_chars}; trimmed from the model's context)"
    )
    repeated = trim.excerpt or text[cut:]
    hidden = max(len(text) - cut, 0)
    return [
        f'{label}: "{lead}{before}"',
        style.warn(marker),
        style.dim(f'  repeats: "{excerpt(repeated, 60)}" ({hidden} more chars in the TUI)'),
    ]
