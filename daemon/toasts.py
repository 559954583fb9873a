"""The words of the toasts that say what autoretry is doing (pure: text from a decision)."""

from __future__ import annotations

from datetime import datetime

from opencode_autoretry.causes import Cause
from opencode_autoretry.decisions.kind_labels import kind_label
from opencode_autoretry.models import Action, Decision, Kind


def label(kind: Kind | None) -> str:
    return kind_label(kind)


def recovery_toast(decision: Decision, now: datetime) -> str:
    """'autoretry: connection lost — continuing in 5 s (1/2)'; a usage window: 'autoretry:
    quota resets at 14:05 — continuing then' (the machine's local time)."""
    reset = decision.facts.resets_at
    if decision.cause is Cause.QUOTA_WAIT and reset is not None:
        return f"autoretry: quota resets at {clock_time(reset, now)} — continuing then"
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


def clock_time(moment: datetime, now: datetime) -> str:
    """'14:05' in the machine's zone, with the date when it is not today's."""
    local, today = moment.astimezone(), now.astimezone()
    if local.date() == today.date():
        return f"{local:%H:%M}"
    return f"{local:%Y-%m-%d %H:%M}"
