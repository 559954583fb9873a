"""The words of the toasts that say what autoretry is doing (pure: text from a decision)."""

from __future__ import annotations

from datetime import datetime

from opencode_autoretry.decisions.observed import kind_label
from opencode_autoretry.models import Action, Decision, Kind


def label(kind: Kind | None) -> str:
    return kind_label(kind)


def recovery_toast(decision: Decision, now: datetime) -> str:
    """'autoretry: connection lost — continuing in 5 s (1/2)'."""
    wait = (decision.due - now).total_seconds() if decision.due else 0.0
    when = f"in {wait:.0f} s" if wait >= 0.5 else "now"
    aborting = decision.action is Action.ABORT_THEN_INJECT
    verb = "stopping and continuing" if aborting else "continuing"
    count = f"({decision.used_after}/{decision.limit})"
    switch = decision.switch if decision.model else None
    if switch is not None:
        return (f"autoretry: switched {switch.from_model} → {switch.to_model} — {verb} {when} "
                f"{count}")
    return f"autoretry: {label(decision.kind)} — {verb} {when} {count}"
