"""What became of a continuation (the next assistant step, or why it was never delivered),
apart from ``trace``'s report: ``diagnose``'s summary and the report index judge outcomes
too, without importing the trace report's views."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

from opencode_autoretry.diagnostics.steps import ClassifiedStep, classify_message
from opencode_autoretry.models import Message, PartType, Role

if TYPE_CHECKING:
    from opencode_autoretry.opencode.db import OpenCodeDB
    from opencode_autoretry.store.database import InjectionRecord


@dataclass(frozen=True)
class Outcome:
    """What became of a continuation: its status and why."""

    status: str
    detail: str
    message_id: str | None = None


def outcome_of(next_step: Message | None) -> Outcome:
    """What the first assistant step after a continuation shows."""
    if next_step is None:
        return Outcome("pending", "… pending (no reply yet)")
    mid = next_step.id
    if next_step.error is not None:
        return Outcome("failed", f"✗ failed ({next_step.error.name})", mid)
    output = next_step.tokens.output
    visible = any(
        (p.type is PartType.TEXT and p.text.strip()) or p.type is PartType.TOOL
        for p in next_step.parts
    )
    if output > 0 or visible:
        return Outcome("recovered", f"✓ recovered (output={output})", mid)
    if next_step.finish is not None:
        return Outcome("blank", "? still blank", mid)
    return Outcome("pending", "… pending (reply in progress)", mid)


def undelivered(injection: InjectionRecord) -> Outcome:
    if injection.state == "failed":
        return Outcome("not_sent", f"✗ not sent ({injection.error or 'failed'})")
    if injection.state == "cancelled":
        return Outcome("cancelled", f"cancelled ({injection.error or 'no reason'})")
    return Outcome("pending", f"… pending ({injection.state})")


class LinkMemo(Protocol):
    """Remembers ``message_links`` (the report index: diagnostics/index/indexed_db.py)."""

    def links(
        self, db: OpenCodeDB, message: Message, now: datetime
    ) -> tuple[ClassifiedStep | None, Outcome]: ...


def message_links(
    db: OpenCodeDB, message: Message, now: datetime
) -> tuple[ClassifiedStep | None, Outcome]:
    """A delivered continuation's trigger (the assistant step before it, classified) and
    outcome (the next one), before the daemon's records relabel the trigger."""
    before = db.neighbours(message, Role.ASSISTANT, before=True)
    outcome = outcome_of(db.neighbours(message, Role.ASSISTANT, before=False))
    return (classify_message(db, before, now=now) if before is not None else None), outcome


