"""The names of what the daemon exports (issue 24): its counters and its decision span, shared
by the recorder and the OTLP exporter."""

from __future__ import annotations

from collections.abc import Mapping

FAULTS = "autoretry.faults"
DECISIONS = "autoretry.decisions"
SENT = "autoretry.continuations.sent"
RECOVERED = "autoretry.continuations.recovered"
GAVE_UP = "autoretry.gave_up"
LOOPS_STOPPED = "autoretry.loops_stopped"
COUNTERS: Mapping[str, str] = {
    FAULTS: "decisions about a failed or stalled turn, by kind",
    DECISIONS: "every recorded decision, by action and cause",
    SENT: "continuations written to a bridge",
    RECOVERED: "turns that ended healthy after a confirmed continuation",
    GAVE_UP: "budgets run out, by kind",
    LOOPS_STOPPED: "repetition loops stopped",
}
#: The span every decision is exported as.
DECISION_SPAN = "autoretry.decision"
#: A span's or a count's attributes.
Attributes = Mapping[str, str | int]
