"""Property tests: random event sequences against the decision core's invariants.

A sequence mixes failures of every kind (with duplicates and stale replays drawn from a small
pool of message ids), real user messages, our injected and OpenCode's synthetic messages,
/autoretry commands and switches, idle/busy/deleted events, pending retries firing, and daemon
restarts (transient state dropped, ledger kept). After every step we check:

- never more sends per turn and group than the group's budget, nor more interruption sends than
  the shared cap;
- never a send into a child (or unknown) session, a disabled one, or a user-aborted turn;
- exhausted only grows within a turn and blocks its groups until a real user message;
- at most one NOTIFY per group per turn; every decision says why.

And at the end of every sequence, liveness (a daemon that never sends would pass the rest):
every recoverable failure -- a retryable kind with an id, its group's budget left (count,
shared cap, deadline, not exhausted), a known root session (an owner), autoretry on, nothing in
the live facts or a pending retry in the way -- is continued exactly once: sent at once, or
scheduled and not cancelled by a real user message, autoretry off, a deletion or the session
resuming on its own (a restart does not cancel it: the store keeps the intent).

The number of generated sequences is fixed (MAX_EXAMPLES: 1000 in a suite run, which keeps the
suite under 10 minutes; ``AUTORETRY_BUDGET_EXAMPLES=3000`` for the full run), counted, printed
and recorded as the ``generated_sequences`` test property. Seeded (``SEED``; another with
``AUTORETRY_BUDGET_SEED=N``): every run checks the same sequences, however pytest is invoked,
so a larger number adds coverage once, not on every run (another seed may draw too few of
the rarest outcome for the thresholds at the end: seeds 2 and 6 draw 6 ``blocked_by_exhausted``).
The last 10 000 run (derandomized then, so other sequences than today's)
(``AUTORETRY_BUDGET_EXAMPLES=10000 pytest -n 0 --timeout=0 tests/test_budget_properties.py``):
154 630 events, 6 185 continuations owed and checked, no violation; 614 s wall (83 s of CPU) on
the shared 2-core machine at a load average near 15.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from opencode_autoretry.decisions.budget import (
    ABORT_KINDS,
    DecisionContext,
    PendingEvent,
    PendingRetry,
    decide,
    new_ledger,
    opens_turn,
    should_cancel_pending,
)
from opencode_autoretry.decisions.policy import (
    INTERRUPTION_GROUPS,
    Policy,
    load_policy,
    retry_delay,
)
from opencode_autoretry.models import (
    GROUP_OF_KIND,
    Action,
    BudgetGroup,
    Kind,
    LiveFacts,
    Message,
    Part,
    PartType,
    Role,
    TurnLedger,
    Verdict,
)

MAX_EXAMPLES = int(os.environ.get("AUTORETRY_BUDGET_EXAMPLES") or 1000)
#: The generation's seed (``AUTORETRY_BUDGET_SEED`` tries another).
SEED = int(os.environ.get("AUTORETRY_BUDGET_SEED") or 1)
MIN_EVENTS = 8
MAX_EVENTS = 60
T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
MARKER = {"autoretry": {"decision": "1", "kind": "blank"}}

# --- strategies ------------------------------------------------------------------------------

delay_pairs = st.sampled_from([(0, 0), (0, 5), (1, 5), (5, 10), (2, 60)])
budget_tables = st.builds(
    lambda retries, delays, extra: {
        "max_retries": retries,
        "initial_delay": delays[0],
        "max_delay": delays[1],
        **extra,
    },
    st.integers(0, 3),
    delay_pairs,
    st.fixed_dictionaries(
        {},
        optional={
            "jitter_ratio": st.sampled_from([0, 0.1, 1]),
            "deadline": st.sampled_from([0, 30, 120]),
        },
    ),
)
raw_policies = st.one_of(
    st.just({}),
    st.builds(
        lambda groups, cap: {"budgets": {**groups, "interruption": {"max_retries": cap}}},
        # quota: spent by the quota wait only (issue 23), never by a kind drawn here
        st.dictionaries(st.sampled_from([g.value for g in BudgetGroup
                                         if g is not BudgetGroup.QUOTA]), budget_tables),
        st.integers(0, 4),
    ),
)
live_facts = st.one_of(
    st.just(LiveFacts()),
    st.just(LiveFacts()),  # mostly nothing in the way, so budgets get spent
    st.just(LiveFacts(busy=True)),
    st.builds(
        LiveFacts,
        busy=st.booleans(),
        retrying=st.booleans(),
        permission_pending=st.booleans(),
        question_pending=st.booleans(),
        child_busy=st.booleans(),
    ),
)
#: Kinds the classifier gives and that spend a budget; the detectors' own kinds (todos left,
#: a hung subagent) come from ``list(Kind)`` below, less often: they are not failures that
#: repeat within a turn the way errors do, and drawing them as often would starve the
#: exhaustion paths of examples.
sending_kinds = st.sampled_from([k for k in GROUP_OF_KIND if k is not Kind.UNFINISHED_TODOS])
failures = st.tuples(
    st.just("failure"),
    st.one_of(sending_kinds, sending_kinds, st.sampled_from(list(Kind))),
    st.sampled_from([f"m{n}" for n in range(12)] + [None]),  # small pool: duplicates, replays
    st.one_of(st.none(), st.none(), st.integers(0, 10**9)),
    live_facts,
    st.sampled_from([True, True, True, False]),  # the classifier may say "not retryable"
)
# Weighted by repetition: switching off and deleting are rarer than the everyday events.
OTHER_EVENTS = [
    "user",
    "injected",
    "synthetic",
    "command",
    "restart",
    "fire",
    "idle",
    "busy",
    "on",
] * 3 + ["off", "deleted"]
others = st.tuples(st.sampled_from(OTHER_EVENTS))
events = st.lists(st.one_of(failures, failures, others), min_size=MIN_EVENTS, max_size=MAX_EVENTS)
children = st.sampled_from([False, False, False, True, None])


def user_message(n: int, **data: Any) -> Message:
    msg_id = f"msg_u{n:04d}"
    text = Part(f"prt_{n}", msg_id, "ses_a", PartType.TEXT, T0, {"type": "text", **data})
    return Message(msg_id, "ses_a", Role.USER, T0, parts=(text,))


# --- the simulated daemon ----------------------------------------------------------------------


@dataclass
class World:
    policy: Policy
    is_child: bool | None
    ledger: TurnLedger = field(default_factory=lambda: new_ledger("ses_a", "msg_u0000"))
    pending: PendingRetry | None = None
    enabled: bool = True
    now: datetime = T0
    messages: int = 1
    tally: dict[str, int] = field(default_factory=dict)  # across turns, for the report
    sends: dict[BudgetGroup, int] = field(default_factory=dict)
    notified: set[BudgetGroup] = field(default_factory=set)
    exhausted_seen: frozenset[BudgetGroup] = frozenset()
    deleted: bool = False
    # Liveness bookkeeping, keyed by (turn, failed message): what is owed, what was sent.
    owed: set[tuple[str, str]] = field(default_factory=set)
    continued: dict[tuple[str, str], int] = field(default_factory=dict)
    scheduled: set[tuple[str, str]] = field(default_factory=set)  # decided, not yet delivered

    def message(self, **data: Any) -> Message:
        self.messages += 1
        return user_message(self.messages, **data)

    def see(self, msg: Message) -> None:
        if opens_turn(msg, self.ledger.turn_id):  # a new turn: per-turn bookkeeping starts again
            self.ledger = new_ledger(msg.session_id, msg.id)
            self.sends, self.notified, self.exhausted_seen = {}, set(), frozenset()
            self.pending = None

    def cancel_on(self, event: PendingEvent) -> None:
        if should_cancel_pending(self.pending, event) is not None:
            self.pending = None

    def release(self) -> None:
        """A user message, autoretry off, a deletion or the session resuming on its own cancels
        a retry still waiting: the duty to continue that failure ends. What should have been
        sent at once stays owed (and is checked at the end)."""
        waived = {key for key in self.scheduled if key[0] == self.ledger.turn_id}
        self.owed -= waived
        self.scheduled -= waived


def apply_other(world: World, name: str) -> None:
    if name == "user":
        world.cancel_on(PendingEvent.REAL_USER_MESSAGE)
        world.release()
        world.see(world.message(text="do the next thing"))
    elif name == "injected":
        world.see(world.message(text="Continue.", metadata=MARKER))
    elif name == "synthetic":
        world.see(world.message(text="Continue if you have next steps", synthetic=True))
    elif name == "command":
        world.see(world.message(text="/autoretry status"))
    elif name == "off":
        world.enabled = False
        world.cancel_on(PendingEvent.AUTORETRY_OFF)
        world.release()
    elif name == "on":
        world.enabled = True
    elif name == "restart":
        world.pending = None  # transient state gone, ledger kept (the store keeps the intent)
    elif name == "fire":
        world.pending = None  # delivered
        world.scheduled = {key for key in world.scheduled if key[0] != world.ledger.turn_id}
    elif name == "idle":
        before = world.pending
        world.cancel_on(PendingEvent.SESSION_IDLE)
        assert world.pending is before  # D19
    elif name == "busy":
        world.cancel_on(PendingEvent.SESSION_BUSY)
        world.release()
    elif name == "deleted":
        world.cancel_on(PendingEvent.SESSION_DELETED)
        world.deleted = True
        world.release()


def apply_failure(world: World, event: tuple[Any, ...], rand: float) -> None:
    _, kind, msg_id, hint, live, retryable = event
    retryable = retryable if kind in GROUP_OF_KIND else False
    verdict = Verdict(kind, retryable, f"random {kind}", msg_id, hint)
    context = DecisionContext(
        "ses_a", world.is_child, world.enabled and not world.deleted, live, "prov", world.pending
    )
    before = world.ledger
    if msg_id is not None and is_recoverable(world, verdict, context, rand):
        world.owed.add((before.turn_id, msg_id))
    decision, world.ledger = decide(before, verdict, context, world.policy, world.now, rand)
    check_decision(world, before, decision, verdict, context)
    if decision.sends and msg_id is not None:
        key = (before.turn_id, msg_id)
        world.continued[key] = world.continued.get(key, 0) + 1
        if decision.action is Action.INJECT_AT:
            world.scheduled.add(key)
    key = "blocked_by_exhausted" if "exhausted" in decision.reason else decision.action.value
    # BUDGET_PROPERTY_REASONS=1 breaks "skip" down by reason in the printed summary.
    if os.environ.get("BUDGET_PROPERTY_REASONS") and decision.action is Action.SKIP:
        key = decision.reason.split("(")[0][:40]
    world.tally[key] = world.tally.get(key, 0) + 1
    if decision.action is Action.INJECT_AT and decision.group is not None and decision.due:
        world.pending = PendingRetry("ses_a", before.turn_id, msg_id, decision.group, decision.due)


def is_recoverable(
    world: World, verdict: Verdict, context: DecisionContext, rand: float
) -> bool:
    """The model's own reading of "this failure must be continued" (not decide()'s gates)."""
    ledger, group, live = world.ledger, verdict.group, context.live
    if group is None or verdict.kind in (Kind.SUBAGENT_STALL, Kind.USER_ABORT):
        return False
    if verdict.kind in (Kind.HEALTHY, Kind.RUNNING, Kind.TERMINAL, Kind.ORPHAN):
        return False
    owner_and_on = context.is_child is False and context.enabled and not ledger.user_aborted
    in_the_way = live.permission_pending or live.question_pending or live.child_busy
    in_the_way = in_the_way or live.retrying or (live.busy and verdict.kind not in ABORT_KINDS)
    waiting = context.pending is not None and context.pending.turn_id == ledger.turn_id
    fresh = verdict.message_id not in ledger.handled
    return owner_and_on and not in_the_way and not waiting and fresh and has_budget(
        world, verdict, group, context.provider_id, rand
    )


def has_budget(
    world: World, verdict: Verdict, group: BudgetGroup, pid: str | None, rand: float
) -> bool:
    """Count, shared cap, deadline: does the turn still have a send for ``group``?"""
    ledger, policy = world.ledger, world.policy
    if group in ledger.exhausted:
        return False
    budget = policy.budget_for(group, pid)
    if ledger.used_in(group) >= budget.max_retries:
        return False
    interruptions = sum(ledger.used_in(g) for g in INTERRUPTION_GROUPS)
    if group in INTERRUPTION_GROUPS and interruptions >= policy.cap_for(pid):
        return False
    if budget.deadline is None:
        return True
    attempt = interruptions + 1 if group in INTERRUPTION_GROUPS else ledger.used_in(group) + 1
    delay = retry_delay(budget, attempt, verdict.retry_after_ms, rand)
    end = (ledger.first_failure or world.now) + timedelta(seconds=budget.deadline)
    return world.now < end and world.now + delay <= end


def check_liveness(world: World) -> None:
    """At the end of a sequence: every failure still owed was continued, and only once."""
    for key, count in world.continued.items():
        assert count == 1, f"failure {key} continued {count} times"
    missing = sorted(key for key in world.owed if world.continued.get(key, 0) != 1)
    assert not missing, f"recoverable failures never continued: {missing}"


def check_decision(
    world: World,
    before: TurnLedger,
    decision: Any,
    verdict: Verdict,
    context: DecisionContext,
) -> None:
    after = world.ledger
    assert decision.reason, "every decision says why"
    assert (decision.action is Action.SKIP) == decision.reason.startswith("skip: ")
    assert after.exhausted >= before.exhausted, "exhausted only grows within a turn"
    assert (after.session_id, after.turn_id) == (before.session_id, before.turn_id)
    if decision.sends:
        group = decision.group
        assert group is not None and group == verdict.group
        assert context.is_child is False, "never a send into a child or unknown session"
        assert context.enabled, "never a send while disabled"
        assert not before.user_aborted, "never a send into a user-aborted turn"
        assert group not in world.exhausted_seen, "exhausted is absorbing"
        live = context.live
        assert not (live.retrying or live.child_busy or live.permission_pending)
        assert not live.question_pending
        assert decision.used_after == decision.used_before + 1
        assert decision.due is not None and decision.due >= world.now
        world.sends[group] = world.sends.get(group, 0) + 1
    if decision.action is Action.NOTIFY:
        assert decision.group not in world.notified, "one notice per group per turn"
        world.notified.add(decision.group)
    check_budgets(world)
    world.exhausted_seen = after.exhausted


def check_budgets(world: World) -> None:
    ledger, policy = world.ledger, world.policy
    for group, count in world.sends.items():
        assert count == ledger.used_in(group), "the ledger counts every send"
        assert count <= policy.budget_for(group, "prov").max_retries
    interruptions = sum(world.sends.get(g, 0) for g in INTERRUPTION_GROUPS)
    assert interruptions <= policy.cap_for("prov")


# --- the property ---------------------------------------------------------------------------


@pytest.mark.long
def test_random_event_sequences_keep_the_budget_invariants(record_property, capsys):
    checked: list[int] = []
    owed_total: list[int] = []  # failures the liveness check held to a continuation
    tally: dict[str, int] = {}

    @settings(
        max_examples=MAX_EXAMPLES,
        # The same sequences on every run, however pytest is invoked: ``derandomize`` drew
        # other sequences under other pytest options (``-o addopts=""``), and a rare
        # outcome's count moves a lot between draws (``blocked_by_exhausted``: 6-87 in 1 000
        # sequences over 8 seeds), so the thresholds below held for one invocation only.
        database=None,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    @seed(SEED)
    @given(
        raw=raw_policies,
        is_child=children,
        sequence=events,
        rands=st.lists(st.floats(0, 1, exclude_max=True), min_size=1, max_size=4),
        gaps=st.lists(st.integers(0, 40), min_size=1, max_size=4),
    )
    def run(raw, is_child, sequence, rands, gaps):
        world = World(load_policy(raw), is_child)
        for step, event in enumerate(sequence):
            world.now += timedelta(seconds=gaps[step % len(gaps)])
            if event[0] == "failure":
                apply_failure(world, event, rands[step % len(rands)])
            else:
                apply_other(world, event[0])
        check_liveness(world)
        checked.append(len(sequence))
        owed_total.append(len(world.owed))
        for key, count in world.tally.items():
            tally[key] = tally.get(key, 0) + count

    run()
    with capsys.disabled():
        print(
            f"\n[budget properties] generated sequences checked: {len(checked)}, "
            f"events: {sum(checked)}, continuations owed and checked: {sum(owed_total)}, "
            f"outcomes: {dict(sorted(tally.items()))}"
        )
    record_property("generated_sequences", len(checked))
    record_property("generated_events", sum(checked))
    assert len(checked) >= MAX_EXAMPLES
    # Not vacuous: every kind of outcome happened many times (more than 100 in 3000 sequences).
    many = MAX_EXAMPLES // 30
    for key in ("inject", "inject_at", "abort_then_inject", "notify", "skip"):
        assert tally.get(key, 0) > many, (key, tally)
    assert tally.get("blocked_by_exhausted", 0) > many, tally
    # Liveness is not vacuous either: many failures were held to a continuation (671 in 1000).
    assert sum(owed_total) > MAX_EXAMPLES // 3, sum(owed_total)
