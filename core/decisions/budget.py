"""The pure decision core: a turn's ledger + a verdict + live facts -> one Decision.

Budgets belong to the user's turn (``TurnLedger``) and only a real user message opens a new one;
idle events, restarts and lost event streams never reset them. Every path returns a Decision with
a reason, including the many ways of deciding to do nothing. Randomness (jitter) and the clock are
arguments: this module reads neither.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import StrEnum

from opencode_autoretry.decisions.policy import (
    INTERRUPTION_GROUPS,
    INTERRUPTION_LABELS,
    GroupBudget,
    Policy,
    fill,
    retry_delay,
)
from opencode_autoretry.decisions.policy import (  # re-exported: settings.py names them budget's
    PolicyError as PolicyError,
)
from opencode_autoretry.decisions.policy import (
    load_policy as load_policy,
)
from opencode_autoretry.decisions.subagents import decide_subagent_stall
from opencode_autoretry.models import (
    Action,
    BudgetGroup,
    Decision,
    Kind,
    LiveFacts,
    Message,
    PartType,
    Role,
    TurnLedger,
    Verdict,
)

#: Kinds whose session is still busy with a bad generation: stop it first, then continue.
ABORT_KINDS = frozenset({Kind.RUNAWAY, Kind.STALL, Kind.REPETITION})

_NEVER_SENDS = {
    Kind.HEALTHY: "turn finished normally",
    Kind.RUNNING: "turn is still running",
    Kind.TERMINAL: "error is not retryable",
    Kind.ORPHAN: "no live owner for this turn",
}


@dataclass(frozen=True)
class DecisionContext:
    """Everything decide() needs besides the ledger and the verdict."""

    session_id: str
    is_child: bool | None  # None: the parent could not be read -> fail closed
    enabled: bool = True  # global and per-session switch, already combined by the caller
    live: LiveFacts = LiveFacts()
    provider_id: str | None = None
    pending: PendingRetry | None = None  # a retry already scheduled for this turn
    subagents: bool = True  # ``[stall] subagents``: abort hung child sessions (issue 9)


# --- turns ---------------------------------------------------------------------------------

#: ``/autoretry``, ``/autoretry off``, ``/autoretry-off`` ... typed as a message.
_COMMAND = re.compile(r"^\s*/autoretry(?:-[a-z]+)?(?:\s|$)", re.IGNORECASE)


def new_ledger(session_id: str, turn_id: str) -> TurnLedger:
    """A fresh, unspent ledger for the turn opened by the real user message ``turn_id``."""
    return TurnLedger(session_id=session_id, turn_id=turn_id)


def is_autoretry_command(message: Message) -> bool:
    """A user message that is really a typed ``/autoretry`` command, not a request."""
    texts = [p.text for p in message.parts if p.type is PartType.TEXT and not p.synthetic]
    return bool(texts) and bool(_COMMAND.match(texts[0]))


def is_real_user_message(
    message: Message,
    known_injected_ids: Collection[str] = (),
    *,
    known_command_ids: Collection[str] = (),
) -> bool:
    """True for a message a person wrote: not ours, not OpenCode's, not an ``/autoretry`` command.

    Ours are recognised by the durable marker on a part or because the store knows the id (an
    injection whose marker OpenCode dropped); OpenCode's synthetic messages are compaction and
    its "continue" after compaction.
    """
    if message.role is not Role.USER:
        return False
    if message.id in known_injected_ids or message.marker is not None:
        return False
    if message.synthetic:
        return False
    return message.id not in known_command_ids and not is_autoretry_command(message)


def opens_turn(
    message: Message,
    current_turn_id: str | None,
    known_injected_ids: Collection[str] = (),
    *,
    known_command_ids: Collection[str] = (),
) -> bool:
    """Whether ``message`` starts a new turn (a replayed event for the current one does not)."""
    if message.id == current_turn_id:
        return False
    return is_real_user_message(message, known_injected_ids, known_command_ids=known_command_ids)


def advance_turn(
    ledger: TurnLedger | None,
    message: Message,
    known_injected_ids: Collection[str] = (),
    *,
    known_command_ids: Collection[str] = (),
) -> TurnLedger | None:
    """The ledger after seeing ``message``: fresh if it opens a turn, otherwise unchanged."""
    current = ledger.turn_id if ledger is not None else None
    if opens_turn(message, current, known_injected_ids, known_command_ids=known_command_ids):
        return new_ledger(message.session_id, message.id)
    return ledger


# --- pending retries -----------------------------------------------------------------------


@dataclass(frozen=True)
class PendingRetry:
    """An INJECT_AT decision waiting for its due time (transient: the store keeps the intent)."""

    session_id: str
    turn_id: str
    message_id: str | None  # the failed assistant message it answers
    group: BudgetGroup
    due: datetime


class PendingEvent(StrEnum):
    """What can happen to a session while a retry waits."""

    REAL_USER_MESSAGE = "real_user_message"
    INJECTED_MESSAGE = "injected_message"  # ours or OpenCode's synthetic one
    AUTORETRY_OFF = "autoretry_off"
    SESSION_BUSY = "session_busy"  # busy on its own (not because we sent)
    SESSION_RETRYING = "session_retrying"  # OpenCode started retrying by itself
    SESSION_IDLE = "session_idle"
    SESSION_ERROR = "session_error"
    SESSION_DELETED = "session_deleted"


_CANCELS: dict[PendingEvent, str] = {
    PendingEvent.REAL_USER_MESSAGE: "the user wrote a new message",
    PendingEvent.AUTORETRY_OFF: "autoretry was switched off",
    PendingEvent.SESSION_BUSY: "the session resumed on its own",
    PendingEvent.SESSION_RETRYING: "OpenCode is retrying by itself",
    PendingEvent.SESSION_DELETED: "the session was deleted",
}


def should_cancel_pending(pending: PendingRetry | None, event: PendingEvent) -> str | None:
    """Why ``event`` cancels ``pending``, or None to keep waiting.

    Idle and the repeated error of the same failure keep it (D19): they are what the pending
    retry answers, and cancelling on them would lose the only recovery.
    """
    if pending is None:
        return None
    reason = _CANCELS.get(event)
    return f"cancelled: {reason}" if reason else None


# --- gates ---------------------------------------------------------------------------------


def _gate(ledger: TurnLedger, verdict: Verdict, context: DecisionContext) -> str | None:
    """The reason not to send anything for this verdict, or None when budgets decide."""
    if not context.enabled:
        return "autoretry is off"
    if context.is_child is None:
        return "session parent unknown (fail-closed)"
    if context.is_child:
        return "child session (its parent decides)"
    if ledger.user_aborted:
        return "user aborted this turn"
    if verdict.kind in _NEVER_SENDS:
        return _NEVER_SENDS[verdict.kind]
    if verdict.group is None:
        return f"{verdict.kind} is not retried ({verdict.reason})"
    return _live_gate(verdict, context.live) or _pending_gate(ledger, verdict, context)


def _live_gate(verdict: Verdict, live: LiveFacts) -> str | None:
    if live.permission_pending:
        return "waiting on a permission answer"
    if live.question_pending:
        return "waiting on a question answer"
    if live.child_busy:
        return "waiting on a busy subagent"
    if live.retrying:
        return "OpenCode is retrying itself; waiting for its final error"
    if live.busy and verdict.kind not in ABORT_KINDS:
        return "session is busy"
    return None


def _pending_gate(ledger: TurnLedger, verdict: Verdict, context: DecisionContext) -> str | None:
    if verdict.message_id is not None and verdict.message_id in ledger.handled:
        return f"failure {verdict.message_id} already handled"
    pending = context.pending
    if pending is None or pending.turn_id != ledger.turn_id:
        return None
    if pending.message_id == verdict.message_id:
        return f"retry already scheduled for this failure (due {pending.due.isoformat()})"
    return f"a retry is already pending for this turn (due {pending.due.isoformat()})"


# --- budgets -------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Count:
    """The counter that binds: the group's own, or the shared interruption cap."""

    used: int
    limit: int
    groups: frozenset[BudgetGroup]  # what becomes exhausted when this counter runs out
    label: str


def _binding_count(
    ledger: TurnLedger, group: BudgetGroup, policy: Policy, pid: str | None
) -> _Count:
    own = _Count(
        ledger.used_in(group), policy.budget_for(group, pid).max_retries, frozenset({group}), group
    )
    if group not in INTERRUPTION_GROUPS:
        return own
    total = sum(ledger.used_in(g) for g in INTERRUPTION_GROUPS)
    shared = _Count(total, policy.cap_for(pid), INTERRUPTION_GROUPS, "interruptions")
    # On a tie the shared cap is the one to report and exhaust: it closes every error group,
    # so a different error kind cannot notify a second time.
    return shared if shared.limit - shared.used <= own.limit - own.used else own


def _attempt(ledger: TurnLedger, group: BudgetGroup) -> int:
    """Interruptions share one backoff ladder per turn (the seed's 5 s then 10 s), whatever mix
    of error groups occurs; the other groups climb their own."""
    if group in INTERRUPTION_GROUPS:
        return sum(ledger.used_in(g) for g in INTERRUPTION_GROUPS) + 1
    return ledger.used_in(group) + 1


def _past_deadline(
    ledger: TurnLedger, budget: GroupBudget, now: datetime, due: datetime
) -> str | None:
    if budget.deadline is None or ledger.first_failure is None:
        return None
    end = ledger.first_failure + timedelta(seconds=budget.deadline)
    if now >= end:
        return f"deadline of {budget.deadline:g} s since the first failure has passed"
    if due > end:
        return f"the next retry would fall past the {budget.deadline:g} s deadline"
    return None


def _text_for(verdict: Verdict, used_before: int, policy: Policy) -> str:
    if verdict.text:
        return verdict.text
    if verdict.kind is Kind.REPETITION:
        key = "repetition_remind" if used_before == 0 else "repetition_replan"
        return policy.text(key)
    if verdict.kind is Kind.STALL:
        return policy.text("stall")
    if verdict.kind is Kind.TRUNCATED:
        return policy.text("truncated")
    label = INTERRUPTION_LABELS.get(verdict.kind, verdict.kind.value)
    return fill(policy.text(verdict.kind.value), reason=label)


def _action_for(kind: Kind, delay: timedelta) -> Action:
    if kind in ABORT_KINDS:
        return Action.ABORT_THEN_INJECT
    return Action.INJECT if delay <= timedelta(0) else Action.INJECT_AT


def _skip(ledger: TurnLedger, verdict: Verdict, reason: str) -> Decision:
    return Decision(
        action=Action.SKIP,
        reason=f"skip: {reason}",
        session_id=ledger.session_id,
        turn_id=ledger.turn_id,
        kind=verdict.kind,
        group=verdict.group,
    )


def _exhaust(
    ledger: TurnLedger, verdict: Verdict, count: _Count, why: str, policy: Policy
) -> tuple[Decision, TurnLedger]:
    group = verdict.group
    text = fill(policy.text("exhausted"), used=count.used, group=count.label, kind=verdict.kind)
    decision = Decision(
        action=Action.NOTIFY,
        reason=f"notify: {verdict.kind} ({verdict.reason}); {why}; waiting for a real user message",
        session_id=ledger.session_id,
        turn_id=ledger.turn_id,
        kind=verdict.kind,
        group=group,
        text=text,
        used_before=count.used,
        used_after=count.used,
        limit=count.limit,
    )
    return decision, replace(ledger, exhausted=ledger.exhausted | count.groups)


def _spend(
    ledger: TurnLedger,
    verdict: Verdict,
    context: DecisionContext,
    policy: Policy,
    now: datetime,
    rand: float,
) -> tuple[Decision, TurnLedger]:
    group = verdict.group
    assert group is not None  # _gate returned early for verdicts without a group
    budget = policy.budget_for(group, context.provider_id)
    count = _binding_count(ledger, group, policy, context.provider_id)
    if count.used >= count.limit:
        why = f"retried {count.used} of {count.limit} times ({count.label})"
        return _exhaust(ledger, verdict, count, why, policy)
    if verdict.give_up:  # e.g. todos that two continuations in a row did not move
        return _exhaust(ledger, verdict, count, verdict.give_up, policy)
    attempt = _attempt(ledger, group)
    delay = retry_delay(budget, attempt, verdict.retry_after_ms, rand)
    ledger = ledger if ledger.first_failure else replace(ledger, first_failure=now)
    late = _past_deadline(ledger, budget, now, now + delay)
    if late is not None:  # a deadline is the group's own: it closes only that group
        own = replace(count, groups=frozenset({group}), label=group.value)
        return _exhaust(ledger, verdict, own, late, policy)
    action = _action_for(verdict.kind, delay)
    decision = Decision(
        action=action,
        reason=(
            f"{action}: {verdict.kind} ({verdict.reason}); {count.label} "
            f"{count.used + 1}/{count.limit}, in {delay.total_seconds():g} s"
        ),
        session_id=ledger.session_id,
        turn_id=ledger.turn_id,
        kind=verdict.kind,
        group=group,
        text=_text_for(verdict, ledger.used_in(group), policy),
        due=now + delay,
        used_before=count.used,
        used_after=count.used + 1,
        limit=count.limit,
    )
    return decision, _spent(ledger, group, verdict.message_id)


def _spent(ledger: TurnLedger, group: BudgetGroup, message_id: str | None) -> TurnLedger:
    used = {**ledger.used, group: ledger.used_in(group) + 1}
    handled = ledger.handled | {message_id} if message_id is not None else ledger.handled
    return replace(ledger, used=used, handled=handled)


def decide(
    ledger: TurnLedger,
    verdict: Verdict,
    context: DecisionContext,
    policy: Policy,
    now: datetime,
    rand: float = 0.0,
) -> tuple[Decision, TurnLedger]:
    """Decide what to do about one verdict for the turn ``ledger`` tracks.

    Returns the decision and the ledger to store (unchanged unless a budget was spent, a group
    became exhausted, or the user aborted). A budget unit is spent when a send is decided, not
    when it is delivered, so a cancelled retry never lets the turn exceed its budget.
    """
    if context.session_id != ledger.session_id:
        raise ValueError(f"ledger of {ledger.session_id} used for {context.session_id}")
    if verdict.kind is Kind.SUBAGENT_STALL:  # a hung child: abort only, never a send (issue 9)
        return decide_subagent_stall(
            ledger, verdict, enabled=context.enabled, subagents=context.subagents,
            is_child=context.is_child, live=context.live, now=now,
        )
    if verdict.kind is Kind.USER_ABORT:
        return _skip(ledger, verdict, "user aborted this turn"), replace(ledger, user_aborted=True)
    reason = _gate(ledger, verdict, context)
    if reason is not None:
        return _skip(ledger, verdict, reason), ledger
    group = verdict.group
    if group is not None and group in ledger.exhausted:
        why = f"{group} budget exhausted; waiting for a real user message"
        return _skip(ledger, verdict, why), ledger
    return _spend(ledger, verdict, context, policy, now, rand)
