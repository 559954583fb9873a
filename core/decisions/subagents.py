"""Hung subagents (issue 9), the pure half: a stalled child session is aborted, never prompted.

The daemon's stall detector finds a busy session with no delta, part or status change for
``stall_timeout`` and nothing legitimate to wait on (no tool running, no permission or question
pending). For a root that is a ``stall`` (abort, then continue). A child (``parentID`` set) is
never written to, so its only recovery is an abort: it ends the child's turn, the parent's
``task`` tool returns, and OpenCode carries on with the parent, which is then judged like any
root.

At most one abort per child per parent turn. The count lives in the child's ledger keyed by
the *parent's* turn (``TurnLedger(child, parent_turn)``): the aborted step goes into its
``handled`` set, which the store keeps across daemon restarts. The decision's ``turn_id`` is
that parent turn as well.

This module reads no clock and no config file: ``decide_subagent_stall`` is called by the
decision core (``budget.decide``) with what it needs.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from opencode_autoretry.causes import Cause, Facts, skip_words
from opencode_autoretry.decisions.gates import waiting_on_user
from opencode_autoretry.models import Action, Decision, Kind, LiveFacts, TurnLedger, Verdict

#: What a skip says when ``[stall] subagents = false`` leaves a hung child alone.
OFF_REASON = skip_words(Cause.SUBAGENTS_OFF)


def subagent_stall_verdict(idle_s: float, message_id: str | None) -> Verdict:
    """The stall detector's verdict for a child session (not retryable: nothing is sent)."""
    return Verdict(Kind.SUBAGENT_STALL, False, f"hung {idle_s:.0f} s with no progress",
                   message_id=message_id, idle_s=idle_s)


def whole_seconds(seconds: float | None) -> int | None:
    """A hang as people read it (``hung 182 s``): rounded as the reason shows it."""
    return None if seconds is None else int(f"{seconds:.0f}")


def _refusal(
    ledger: TurnLedger, *, enabled: bool, subagents: bool, is_child: bool | None,
    live: LiveFacts,
) -> Cause | None:
    """Why this hung child must be left alone, or None to abort it."""
    if not enabled:
        return Cause.OFF
    if not subagents:
        return Cause.SUBAGENTS_OFF
    if is_child is None:
        return Cause.PARENT_UNKNOWN
    if not is_child:
        return Cause.NOT_A_CHILD
    waiting = waiting_on_user(live)  # its own question, permission or busy subagent
    if waiting is not None:
        return waiting
    if ledger.handled:
        return Cause.ALREADY_ABORTED
    return None


def decide_subagent_stall(
    ledger: TurnLedger,
    verdict: Verdict,
    *,
    enabled: bool,
    subagents: bool,
    is_child: bool | None,
    live: LiveFacts,
    now: datetime,
) -> tuple[Decision, TurnLedger]:
    """ABORT the hung child once per parent turn, or SKIP with the reason.

    ``ledger`` is the child's ledger for its parent's current turn; the returned one records
    the aborted step (so a replay or a restart never aborts it twice).
    """
    base = Decision(Action.SKIP, Cause.OTHER, ledger.session_id, ledger.turn_id, verdict.kind,
                    facts=Facts(detail=verdict.reason, hung_seconds=verdict.idle_s))
    why = _refusal(ledger, enabled=enabled, subagents=subagents, is_child=is_child, live=live)
    if why is not None:
        return replace(base, cause=why), ledger
    decision = replace(
        base,
        action=Action.ABORT,
        cause=Cause.SUBAGENT_HUNG,
        used_before=0,
        used_after=1,
        limit=1,
    )
    handled = ledger.handled | {verdict.message_id or "stalled"}
    first = ledger.first_failure or now
    return decision, replace(ledger, handled=handled, first_failure=first)


def subagent_toast(decision: Decision) -> str:
    """The toast shown in the parent's window."""
    hung = whole_seconds(decision.hung_seconds)
    took = f" after {hung} s with no progress" if hung is not None else ""
    return f"autoretry: a subagent hung{took} — stopped it so this session can go on"
