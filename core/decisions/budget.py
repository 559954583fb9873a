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

from opencode_autoretry.causes import Cause, Facts
from opencode_autoretry.decisions.gates import waiting_on_user
from opencode_autoretry.decisions.kind_labels import INTERRUPTION_LABELS
from opencode_autoretry.decisions.policy import (
    INTERRUPTION_GROUPS,
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
from opencode_autoretry.decisions.quota import QuotaConfig, waits_for_reset
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
    Kind.HEALTHY: Cause.HEALTHY,
    Kind.RUNNING: Cause.RUNNING,
    Kind.TERMINAL: Cause.NOT_RETRYABLE,
    Kind.ORPHAN: Cause.ORPHAN,
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
    # ``[quota]`` (issue 23): None never waits for a usage window (the behaviour before it).
    quota: QuotaConfig | None = None
    # A ``[fallback]`` chain has a model this turn has not tried: it switches instead of waiting.
    fallback_ready: bool = False


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


@dataclass(frozen=True)
class _Refusal:
    """Why nothing is sent, and the facts the reason names."""

    cause: Cause
    facts: Facts = Facts()


def _gate(
    ledger: TurnLedger, verdict: Verdict, context: DecisionContext, *, quota: bool = False
) -> _Refusal | None:
    """Why not to send anything for this verdict, or None when budgets decide. ``quota``: the
    verdict is a usage window to wait out, whose kind alone would never send."""
    if not context.enabled:
        return _Refusal(Cause.OFF)
    if context.is_child is None:
        return _Refusal(Cause.PARENT_UNKNOWN)
    if context.is_child:
        return _Refusal(Cause.CHILD_SESSION)
    if ledger.user_aborted:
        return _Refusal(Cause.USER_ABORT)
    if verdict.kind in _NEVER_SENDS and not quota:
        return _Refusal(_NEVER_SENDS[verdict.kind])
    if verdict.group is None and not quota:
        return _Refusal(Cause.NOT_RETRIED)
    live = live_refusal(context.live)
    if live is None and context.live.busy and verdict.kind not in ABORT_KINDS:
        live = Cause.BUSY
    if live is not None:
        return _Refusal(live)
    return _pending_gate(ledger, verdict, context)


def live_refusal(live: LiveFacts) -> Cause | None:
    """The user (or OpenCode itself) has the session: a permission or question to answer,
    a busy subagent, OpenCode's own retries."""
    waiting = waiting_on_user(live)
    if waiting is None and live.retrying:
        return Cause.OPENCODE_RETRYING
    return waiting


def _pending_gate(
    ledger: TurnLedger, verdict: Verdict, context: DecisionContext
) -> _Refusal | None:
    if verdict.message_id is not None and verdict.message_id in ledger.handled:
        return _Refusal(Cause.ALREADY_HANDLED, Facts(failure_id=verdict.message_id))
    pending = context.pending
    if pending is None or pending.turn_id != ledger.turn_id:
        return None
    if pending.message_id == verdict.message_id:
        return _Refusal(Cause.ALREADY_SCHEDULED, Facts(pending_due=pending.due))
    return _Refusal(Cause.ALREADY_PENDING, Facts(pending_due=pending.due))


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
) -> Cause | None:
    if budget.deadline is None or ledger.first_failure is None:
        return None
    end = ledger.first_failure + timedelta(seconds=budget.deadline)
    if now >= end:
        return Cause.DEADLINE_PASSED
    if due > end:
        return Cause.DEADLINE_TOO_LATE
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


def _skip(ledger: TurnLedger, verdict: Verdict, refusal: _Refusal) -> Decision:
    return Decision(
        action=Action.SKIP,
        cause=refusal.cause,
        session_id=ledger.session_id,
        turn_id=ledger.turn_id,
        kind=verdict.kind,
        group=verdict.group,
        facts=replace(refusal.facts, detail=verdict.reason),
    )


def _exhaust(
    ledger: TurnLedger, verdict: Verdict, count: _Count, why: Cause, policy: Policy,
    facts: Facts | None = None,
) -> tuple[Decision, TurnLedger]:
    group = verdict.group
    text = fill(policy.text("exhausted"), used=count.used, group=count.label, kind=verdict.kind)
    decision = Decision(
        action=Action.NOTIFY,
        cause=why,
        facts=replace(facts or Facts(), detail=verdict.reason, budget_label=count.label),
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
        return _exhaust(ledger, verdict, count, Cause.BUDGET_SPENT, policy)
    if verdict.give_up:  # e.g. todos that two continuations in a row did not move
        return _exhaust(ledger, verdict, count, Cause.GAVE_UP, policy,
                        Facts(give_up=verdict.give_up))
    attempt = _attempt(ledger, group)
    delay = retry_delay(budget, attempt, verdict.retry_after_ms, rand)
    ledger = ledger if ledger.first_failure else replace(ledger, first_failure=now)
    late = _past_deadline(ledger, budget, now, now + delay)
    if late is not None:  # a deadline is the group's own: it closes only that group
        own = replace(count, groups=frozenset({group}), label=group.value)
        return _exhaust(ledger, verdict, own, late, policy, Facts(deadline_s=budget.deadline))
    action = _action_for(verdict.kind, delay)
    decision = Decision(
        action=action,
        cause=Cause.RETRY,
        facts=Facts(detail=verdict.reason, budget_label=count.label,
                    delay_s=delay.total_seconds()),
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


def _quota_applies(verdict: Verdict, context: DecisionContext, now: datetime) -> bool:
    """Wait for the usage window: ``[quota]`` is on, no fallback model would be switched to,
    and the verdict names a reset beyond OpenCode's own retries (``quota.waits_for_reset``)."""
    return (context.quota is not None and not context.fallback_ready
            and waits_for_reset(verdict, now))


def _wait_for_quota(
    ledger: TurnLedger, verdict: Verdict, context: DecisionContext, policy: Policy,
    now: datetime, rand: float,
) -> tuple[Decision, TurnLedger]:
    """ONE continuation at the reset plus jitter, spent from the ``quota`` group; a reset
    beyond ``[quota] max_wait`` (or a spent quota budget) gives up and notifies instead."""
    quota, reset = context.quota, verdict.resets_at
    assert quota is not None and reset is not None  # _quota_applies checked both
    group = BudgetGroup.QUOTA
    if group in ledger.exhausted:
        skip = _skip(ledger, verdict, _Refusal(Cause.GROUP_EXHAUSTED))
        return replace(skip, group=group), ledger
    budget = policy.budget_for(group, context.provider_id)
    count = _Count(ledger.used_in(group), budget.max_retries, frozenset({group}), group.value)
    facts = Facts(resets_at=reset)
    if count.used >= count.limit:
        decision, updated = _exhaust(ledger, verdict, count, Cause.BUDGET_SPENT, policy, facts)
        return replace(decision, group=group), updated
    due = quota.due(reset, rand)
    wait = due - now
    if wait.total_seconds() > quota.max_wait:
        why = (f"the usage limit resets at {reset:%Y-%m-%d %H:%M} UTC, in "
               f"{wait.total_seconds() / 3600:.1f} h: longer than [quota] max_wait "
               f"({quota.max_wait / 3600:g} h)")
        decision, updated = _exhaust(ledger, verdict, count, Cause.GAVE_UP, policy,
                                     replace(facts, give_up=why))
        text = f"autoretry: {why} — waiting for you."
        return replace(decision, group=group, text=text), updated
    decision = Decision(
        action=Action.INJECT_AT, cause=Cause.QUOTA_WAIT,
        facts=replace(facts, detail=verdict.reason, budget_label=group.value,
                      delay_s=wait.total_seconds()),
        session_id=ledger.session_id, turn_id=ledger.turn_id, kind=verdict.kind, group=group,
        text=policy.text("quota"), due=due, used_before=count.used,
        used_after=count.used + 1, limit=count.limit,
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
        aborted = _Refusal(Cause.USER_ABORT)
        return _skip(ledger, verdict, aborted), replace(ledger, user_aborted=True)
    quota = _quota_applies(verdict, context, now)
    refusal = _gate(ledger, verdict, context, quota=quota)
    if refusal is not None:
        return _skip(ledger, verdict, refusal), ledger
    if quota:
        return _wait_for_quota(ledger, verdict, context, policy, now, rand)
    group = verdict.group
    if group is not None and group in ledger.exhausted:
        return _skip(ledger, verdict, _Refusal(Cause.GROUP_EXHAUSTED)), ledger
    return _spend(ledger, verdict, context, policy, now, rand)
