"""Hung subagents in the reports (issue 9): each abort with how long the child had hung.

The daemon records an aborted subagent on the child (kind ``subagent_stall``, action
``abort``); its parent is read from OpenCode's DB. ``with_child_aborts`` adds the aborts of a
session's children to the records of that session, so ``trace`` and ``timeline`` of the
parent show them as well as those of the child. The outcome is the parent's first assistant
step after the abort: ``resumed`` (with its finish) once it exists, else ``pending``.

``--json`` shape (in ``trace``, key ``subagent_aborts``, oldest first)::

    [{"time": ISO, "session_id": str, "parent_id": str|null, "decision_id": int,
      "hung_s": int|null, "reason": str,
      "outcome": {"status": "resumed"|"pending", "detail": str, "message_id": str|null}}]
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from opencode_autoretry.decisions.subagents import whole_seconds
from opencode_autoretry.diagnostics.records import DaemonRecords
from opencode_autoretry.diagnostics.render import Style, iso, session_ref
from opencode_autoretry.models import Kind, Role, to_epoch_ms
from opencode_autoretry.opencode.db import OpenCodeDB
from opencode_autoretry.store.database import DecisionRecord, StoreView

ABORTED = "abort"


@dataclass(frozen=True)
class SubagentAbort:
    """A hung subagent the daemon aborted (or would have), and what became of it."""

    decision: DecisionRecord
    parent_id: str | None
    hung_s: int | None
    status: str
    detail: str
    message_id: str | None = None


def is_subagent_abort(decision: DecisionRecord) -> bool:
    """An abort the daemon carried out (an observed one was never sent, issue 23)."""
    return (decision.kind == str(Kind.SUBAGENT_STALL) and decision.action == ABORTED
            and not decision.observed)


def with_child_aborts(
    records: DaemonRecords, store: Path, db: OpenCodeDB, parent_id: str,
    since: datetime | None = None,
) -> DaemonRecords:
    """``records`` of ``parent_id`` plus the subagent aborts of its child sessions."""
    view = StoreView.open(store)
    try:
        candidates = [d for d in view.decisions(None, since) if is_subagent_abort(d)]
    finally:
        view.close()
    sessions = db.sessions({d.session_id for d in candidates})
    extra = tuple(
        d for d in candidates
        if d.session_id in sessions and sessions[d.session_id].parent_id == parent_id
    )
    known = {d.id for d in records.decisions}
    merged = (*records.decisions, *(d for d in extra if d.id not in known))
    return replace(records, decisions=tuple(sorted(merged, key=lambda d: d.id)))


def subagent_aborts(
    db: OpenCodeDB, records: DaemonRecords, session_id: str | None = None
) -> list[SubagentAbort]:
    """Every recorded subagent abort (of ``session_id`` or of its children)."""
    aborts = [d for d in records.decisions if is_subagent_abort(d)]
    sessions = db.sessions({d.session_id for d in aborts})
    found = []
    for decision in aborts:
        child = sessions.get(decision.session_id)
        parent_id = child.parent_id if child is not None else None
        if session_id not in (None, decision.session_id, parent_id):
            continue
        found.append(_with_outcome(db, decision, parent_id))
    return found


def _with_outcome(db: OpenCodeDB, decision: DecisionRecord, parent_id: str | None) -> SubagentAbort:
    hung = whole_seconds(decision.facts.hung_seconds)
    if parent_id is None:
        return SubagentAbort(decision, None, hung, "pending", "… parent unknown")
    later = db.session_messages(parent_id, since_ms=to_epoch_ms(decision.at))
    step = next((m for m in later if m.role is Role.ASSISTANT and m.time_completed), None)
    if step is None:
        return SubagentAbort(decision, parent_id, hung, "pending", "… parent not resumed yet")
    finish = step.error.name if step.error else step.finish or "-"
    return SubagentAbort(decision, parent_id, hung, "resumed",
                         f"✓ parent resumed (finish={finish})", step.id)


def abort_json(item: SubagentAbort) -> dict[str, Any]:
    d = item.decision
    return {
        "time": iso(d.at), "session_id": d.session_id, "parent_id": item.parent_id,
        "decision_id": d.id, "hung_s": item.hung_s, "reason": d.reason,
        "outcome": {"status": item.status, "detail": item.detail, "message_id": item.message_id},
    }


def abort_lines(item: SubagentAbort, style: Style) -> list[str]:
    d = item.decision
    parent = f" (parent ses={session_ref(item.parent_id)})" if item.parent_id else ""
    hung = f"hung {item.hung_s} s with no progress" if item.hung_s is not None else "hung"
    colour = "green" if item.status == "resumed" else "bright_black"
    return [
        f"[{style.local(d.at)}] ses={session_ref(d.session_id)}{parent} Subagent aborted: {hung} "
        f"(decision #{d.id}, never prompted)",
        f"    outcome: {style.paint(item.detail, colour)}",
    ]
