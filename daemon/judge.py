"""The one decision path: a session's last turn -> classifier -> budget core -> a Decision.

Shared by the daemon loop and ``autoretry exec`` (headless ``opencode run``), so both judge a
turn the same way: the same classifier, the same fail-closed reading of ``parent_id``, the same
per-turn ledger in the store and the same ``budget.decide``. What differs between the two is
only who may send (``Owner``): the daemon sends through a live bridge, exec through OpenCode's
own CLI once the run has exited; a bridge that belongs to an exec run is never the daemon's to
send through, so the daemon skips those sessions without spending any budget.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, tzinfo
from enum import StrEnum

from opencode_autoretry.causes import Cause, Facts, skip_words
from opencode_autoretry.config.load import Config
from opencode_autoretry.daemon.sessions import with_error
from opencode_autoretry.decisions.budget import DecisionContext, PendingRetry, decide, new_ledger
from opencode_autoretry.decisions.caps import Caps, cap_notice, over_cap, turn_spend
from opencode_autoretry.decisions.classifier import classify
from opencode_autoretry.decisions.fallback import FallbackChains, next_model, revise
from opencode_autoretry.decisions.policy import Policy
from opencode_autoretry.decisions.quota import QuotaConfig
from opencode_autoretry.decisions.reset_time import quota_reset
from opencode_autoretry.goals.config import GoalConfig
from opencode_autoretry.models import (
    Action,
    BudgetGroup,
    Decision,
    ErrorInfo,
    Kind,
    LiveFacts,
    Session,
    Turn,
    TurnLedger,
    Verdict,
)
from opencode_autoretry.opencode.daemon_reads import DaemonReads
from opencode_autoretry.store.database import Store

#: What a skip of a headless run reads as (code reads ``Cause.HEADLESS``).
HEADLESS = f"{Action.SKIP}: {skip_words(Cause.HEADLESS)}"
#: (child session, its turn, enabled) -> (ledger key, enabled): a hung subagent is counted per
#: parent turn and follows the parent's switch (issue 9, ``SubagentStalls.scope``).
Scope = Callable[[Session | None, Turn, bool], tuple[str, bool]]


class Owner(StrEnum):
    """Who could carry out a send for the session being judged."""

    LIVE = "live"  # a bridge of an interactive process (TUI, serve)
    EXEC = "exec"  # `autoretry exec` itself, judging the run it drove after it exited
    NONE = "none"  # nobody: record, never inject
    HEADLESS = "headless"  # an `opencode run` driven by `autoretry exec`: exec recovers it


@dataclass(frozen=True)
class Judgement:
    turn: Turn
    verdict: Verdict
    decision: Decision | None  # None: the turn is healthy or still running


class Judge:
    def __init__(
        self,
        store: Store,
        db: Callable[[], DaemonReads | None],
        policy: Policy,
        *,
        enabled: bool,
        runaway_steps: int,
        rand: Callable[[], float],
        subagents: bool = True,
        scope: Scope | None = None,
        fallback: FallbackChains | None = None,
        caps: Caps | None = None,
        goal: GoalConfig | None = None,
        quota: QuotaConfig | None = None,
        zone: tzinfo | None = None,
    ) -> None:
        self._caps = caps or Caps()  # [caps]: per user turn, off by default (issue 22)
        self._goal = goal or GoalConfig()  # a goal turn always runs under the goal's own caps
        self._quota = quota  # [quota]: wait for a usage window to reset (issue 23)
        # Where a reset time without a zone ("resets at 3pm") is read: the machine's zone.
        self._zone = zone or datetime.now().astimezone().tzinfo
        self._subagents = subagents  # [stall] subagents: hung children may be aborted
        self._scope = scope
        self._fallback = fallback  # [fallback]: the next model when this one can only fail
        self._store = store
        self._db = db
        self._policy = policy
        self._enabled = enabled
        self._runaway_steps = runaway_steps
        self._rand = rand

    def judge(
        self,
        session_id: str,
        now: datetime,
        *,
        live: LiveFacts,
        owner: Owner,
        pending: PendingRetry | None,
        error: ErrorInfo | None = None,
        verdict: Verdict | None = None,
    ) -> Judgement | None:
        """Classify the session's last turn and decide about it (None: no turn yet)."""
        db = self._db()
        turn = db.last_turn(session_id) if db is not None else None
        if turn is None:
            return None
        if error is not None:
            turn = with_error(turn, error)
        if verdict is None:
            verdict = classify(turn, live, now=now, runaway_steps=self._runaway_steps)
            if verdict.error is not None and verdict.kind in (Kind.RATE_LIMIT, Kind.TERMINAL):
                verdict = replace(verdict, resets_at=quota_reset(verdict.error, now, self._zone))
        if verdict.kind in (Kind.HEALTHY, Kind.RUNNING):
            return Judgement(turn, verdict, None)
        return Judgement(turn, verdict, self.decide(turn, verdict, live, owner, pending, now))

    def decide(
        self, turn: Turn, verdict: Verdict, live: LiveFacts, owner: Owner,
        pending: PendingRetry | None, now: datetime,
    ) -> Decision:
        """The budget core's decision for a verdict (detectors such as the repetition guard
        bring their own verdict). A spent budget or exhausted group rides on the decision as
        its ``ledger``, for ``Actions.perform`` to save with it."""
        session_id = turn.session_id
        db = self._db()
        session = db.session(session_id) if db is not None else None
        is_child = None if session is None else session.parent_id is not None
        if is_child is False and owner in (Owner.NONE, Owner.HEADLESS) and verdict.retryable:
            cause = Cause.HEADLESS if owner is Owner.HEADLESS else Cause.NO_OWNER
            return Decision(Action.SKIP, cause, session_id, turn.id, verdict.kind, verdict.group,
                            facts=Facts(detail=verdict.reason))
        key, enabled = turn.id, self._enabled and self._store.is_enabled(session_id)
        if verdict.kind is Kind.SUBAGENT_STALL and self._scope is not None:
            key, enabled = self._scope(session, turn, enabled)  # counted per parent turn
        ledger = self._store.load_ledger(session_id, key) or new_ledger(session_id, key)
        step = turn.last_step
        switches = self._fallback is not None and owner in (Owner.LIVE, Owner.EXEC)
        context = DecisionContext(
            session_id=session_id, is_child=is_child, enabled=enabled, live=live,
            provider_id=step.provider_id if step else None, pending=pending,
            subagents=self._subagents, quota=self._quota,
            fallback_ready=switches and self._fallback is not None
            and next_model(turn, self._fallback) is not None,
        )
        decision, updated = decide(ledger, verdict, context, self._policy, now, self._rand())
        if self._fallback is not None and self._fallback.chains and owner in (
                Owner.LIVE, Owner.EXEC):
            decision, updated = revise(decision, updated, verdict, turn, context, self._fallback,
                                       self._policy, now)
        if decision.sends:  # the one place every send passes: the spend caps bind them all
            capped = self._over_cap(decision, ledger, turn, verdict, now)
            if capped is not None:
                return capped
        # Saved by ``Actions.perform`` with the decision it belongs to (one transaction).
        return replace(decision, ledger=updated) if updated != ledger else decision

    def _over_cap(self, decision: Decision, ledger: TurnLedger, turn: Turn, verdict: Verdict,
                  now: datetime) -> Decision | None:
        """A send in a user turn that used more than a cap becomes one notice (``gave_up``
        with the figures), and every group of the turn is closed: nothing more is sent in it,
        whatever the trigger (issue 22). None: within the caps."""
        caps = self._goal.caps(self._caps) if verdict.kind is Kind.GOAL else self._caps
        if not caps.any:
            return None
        spend = turn_spend(turn, now)
        cap = over_cap(spend, caps)
        if cap is None:
            return None
        facts = replace(spend.facts(), cap=cap, detail=verdict.reason)
        closed = replace(ledger, exhausted=frozenset(BudgetGroup))
        return Decision(Action.NOTIFY, Cause.SPEND_CAP, decision.session_id, decision.turn_id,
                        decision.kind, decision.group, text=cap_notice(spend, cap),
                        used_before=decision.used_before, used_after=decision.used_before,
                        limit=decision.limit, facts=facts, ledger=closed)


def judge_for(
    config: Config,
    store: Store,
    db: Callable[[], DaemonReads | None],
    *,
    rand: Callable[[], float],
    scope: Scope | None = None,
) -> Judge:
    """The one decision path, built the same way for the daemon and for ``autoretry exec``
    from the one ``Config``: its policy (with the ``[todos]`` budget), the on/off switch,
    ``runaway_steps``, ``[stall] subagents`` and the ``[fallback]`` chains (issue 18: exec
    built its judge without them, so a headless run never switched models)."""
    settings = config.settings
    return Judge(store, db, config.policy, enabled=settings.enabled,
                 runaway_steps=settings.runaway_steps, rand=rand,
                 subagents=settings.stall_subagents, scope=scope, fallback=config.fallback,
                 caps=config.caps, goal=config.goal, quota=config.quota)
