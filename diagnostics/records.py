"""What the daemon recorded, read once per report through the read-only ``StoreView``.

Reports never open the store themselves: they get a ``DaemonRecords`` value, which keeps them
testable with literal records and makes "no store yet" simply empty.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from pathlib import Path

from opencode_autoretry.causes import Cause
from opencode_autoretry.models import Message
from opencode_autoretry.notifications.records import NotificationRecord, notifications
from opencode_autoretry.store.database import (
    DecisionRecord,
    GoalCheckRecord,
    GoalRecord,
    Heartbeat,
    InjectionRecord,
    StoreView,
    TrimRecord,
)

#: The daemon declined to act because no process owns the session.
NO_OWNER = frozenset({Cause.NO_OWNER, Cause.ORPHAN})


@dataclass(frozen=True)
class DaemonRecords:
    """What the daemon's store holds for a report's window."""

    decisions: tuple[DecisionRecord, ...] = ()
    injections: tuple[InjectionRecord, ...] = ()
    heartbeat: Heartbeat | None = None
    trims: tuple[TrimRecord, ...] = ()
    notifications: tuple[NotificationRecord, ...] = ()  # deliveries outside OpenCode (issue 10)
    goals: tuple[GoalRecord, ...] = ()  # issue 22: goals and their check runs
    goal_checks: tuple[GoalCheckRecord, ...] = ()
    #: Would-be actions of observe mode (issue 23): decisions to act recorded but never
    #: carried out. Kept out of ``decisions`` so that no report takes them for something done
    #: (a continuation, a stopped loop, a daemon abort); an observed skip stays a decision,
    #: as it reads the same in both modes.
    observed: tuple[DecisionRecord, ...] = ()

    def decisions_for(self, session_id: str) -> tuple[DecisionRecord, ...]:
        return tuple(d for d in self.decisions if d.session_id == session_id)

    def injections_for(self, session_id: str) -> tuple[InjectionRecord, ...]:
        return tuple(i for i in self.injections if i.session_id == session_id)

    def trims_for(self, session_id: str) -> tuple[TrimRecord, ...]:
        return tuple(t for t in self.trims if t.session_id == session_id)

    def decision(self, decision_id: int) -> DecisionRecord | None:
        return next((d for d in self.decisions if d.id == decision_id), None)

    def since(self, cut: datetime | None) -> DaemonRecords:
        """Only the decisions, injections and trims from ``cut`` on (None: all)."""
        if cut is None:
            return self
        return replace(
            self,
            decisions=tuple(d for d in self.decisions if d.at >= cut),
            observed=tuple(d for d in self.observed if d.at >= cut),
            injections=tuple(i for i in self.injections if i.created >= cut),
            trims=tuple(t for t in self.trims if t.at >= cut),
        )


def load_records(
    store: Path, session_id: str | None = None, since: datetime | None = None
) -> DaemonRecords:
    """Decisions, injections and trims (optionally of one session / since a time) and the heartbeat.

    A missing store reads as empty (the daemon never ran); ``StoreError`` propagates.
    """
    view = StoreView.open(store)
    try:
        decisions = view.decisions(session_id, since)
        return DaemonRecords(
            decisions=tuple(d for d in decisions if not is_would_be(d)),
            observed=tuple(d for d in decisions if is_would_be(d)),
            injections=tuple(view.injections(session_id, since)),
            heartbeat=view.heartbeat(),
            trims=tuple(view.trims(session_id, since)),
            notifications=tuple(notifications(view, session_id, since)),
            goals=tuple(g for g in view.goals(session_id) if since is None or (
                g.ended_at or g.set_at) >= since),
            goal_checks=tuple(c for c in view.goal_checks(session_id)
                              if since is None or c.at >= since),
        )
    finally:
        view.close()


def is_would_be(decision: DecisionRecord) -> bool:
    """A decision to act taken in observe mode: recorded, never carried out."""
    return decision.observed and decision.action != "skip"


#: How long after a step ended its abort can still be the daemon's (the abort's error lands
#: on the step a moment after the daemon recorded the decision that asked for it).
ABORT_SLACK = timedelta(seconds=5)


def daemon_abort_for(records: DaemonRecords, step: Message) -> DecisionRecord | None:
    """The daemon's own abort-then-continue decision that ended ``step``, if any.

    The step then carries ``MessageAbortedError`` although no user pressed anything: the
    reports show it as what the daemon stopped (a loop, a stall, a runaway), not a user abort.
    """
    if step.error is None or step.error.name not in ("MessageAbortedError", "AbortError"):
        return None
    end = (step.time_completed or step.time_created) + ABORT_SLACK
    for decision in records.decisions_for(step.session_id):
        if decision.action not in ("abort_then_inject", "abort") and decision.kind != "repetition":
            continue
        if decision.message_id == step.id or step.time_created <= decision.at <= end:
            return decision
    return None
