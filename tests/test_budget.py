"""Table tests for decide(): gates, budgets, delays, texts, exhaustion (D14-D25, M9)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from opencode_autoretry.decisions.budget import DecisionContext, PendingRetry, decide, new_ledger
from opencode_autoretry.decisions.policy import INTERRUPTION_GROUPS, Policy, load_policy
from opencode_autoretry.models import (
    GROUP_OF_KIND,
    Action,
    BudgetGroup,
    Kind,
    LiveFacts,
    TurnLedger,
    Verdict,
)

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
POLICY = Policy()
NO_LIVE_FACTS = LiveFacts()
ERROR_KINDS = [
    Kind.DISCONNECT,
    Kind.STREAM_TRUNCATED,
    Kind.TIMEOUT,
    Kind.RATE_LIMIT,
    Kind.SERVER_ERROR,
    Kind.SILENT,
]
BLANK_KINDS = [Kind.BLANK, Kind.THINK_ONLY, Kind.FORGED_LENGTH, Kind.TOOL_AS_TEXT]


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def verdict(kind: Kind, msg: str | None = "msg_a1", hint: int | None = None, **kw) -> Verdict:
    retryable = kw.pop("retryable", kind in GROUP_OF_KIND)
    return Verdict(kind, retryable, f"test {kind}", msg, hint, **kw)


def ctx(**kw) -> DecisionContext:
    return DecisionContext(**{"session_id": "ses_a", "is_child": False, **kw})


def ledger() -> TurnLedger:
    return new_ledger("ses_a", "msg_u1")


def run(kinds: list[Kind], live: LiveFacts = NO_LIVE_FACTS, policy: Policy = POLICY):
    """Feed one failure per kind (distinct assistant messages), 1 s apart, as one turn."""
    book, decisions = ledger(), []
    for n, kind in enumerate(kinds):
        decision, book = decide(
            book, verdict(kind, f"msg_a{n}"), ctx(live=live), policy, T0 + timedelta(seconds=n)
        )
        decisions.append(decision)
    return decisions, book


# --- gates: every "no" has a reason ---------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "context", "reason"),
    [
        (Kind.HEALTHY, ctx(), "skip: turn finished normally"),
        (Kind.RUNNING, ctx(), "skip: turn is still running"),
        (Kind.TERMINAL, ctx(), "skip: error is not retryable"),
        (Kind.ORPHAN, ctx(), "skip: no live owner"),
        (Kind.DISCONNECT, ctx(enabled=False), "skip: autoretry is off"),
        (Kind.DISCONNECT, ctx(is_child=True), "skip: child session"),  # D23
        (Kind.BLANK, ctx(is_child=None), "skip: session parent unknown (fail-closed)"),
        (Kind.BLANK, ctx(live=LiveFacts(child_busy=True)), "skip: waiting on a busy subagent"),
        (Kind.STALL, ctx(live=LiveFacts(permission_pending=True)), "skip: waiting on a permission"),
        (Kind.BLANK, ctx(live=LiveFacts(question_pending=True)), "skip: waiting on a question"),
        (
            Kind.RATE_LIMIT,
            ctx(live=LiveFacts(retrying=True)),
            "skip: OpenCode is retrying itself; waiting for its final error",
        ),
        (Kind.BLANK, ctx(live=LiveFacts(busy=True)), "skip: session is busy"),
    ],
)
def test_gates_skip_with_a_reason_and_spend_nothing(kind, context, reason):
    book = ledger()
    decision, after = decide(book, verdict(kind), context, POLICY, T0)
    assert decision.action is Action.SKIP
    assert decision.reason.startswith(reason)
    assert after == book
    assert not decision.sends


def test_a_verdict_the_classifier_marked_not_retryable_is_skipped():
    decision, _ = decide(ledger(), verdict(Kind.SERVER_ERROR, retryable=False), ctx(), POLICY, T0)
    assert (decision.action, decision.reason) == (
        Action.SKIP,
        "skip: server_error is not retried (test server_error)",
    )


def test_user_abort_marks_the_turn_and_nothing_follows_in_it():  # D1 + R3
    decision, book = decide(ledger(), verdict(Kind.USER_ABORT), ctx(), POLICY, T0)
    assert decision.action is Action.SKIP and book.user_aborted
    for kind in [*ERROR_KINDS, *BLANK_KINDS, Kind.STALL, Kind.RUNAWAY]:
        later, book = decide(book, verdict(kind, "msg_a9"), ctx(), POLICY, T0)
        assert later.reason == "skip: user aborted this turn"


def test_user_abort_is_recorded_even_when_disabled_or_in_a_child():
    _, book = decide(ledger(), verdict(Kind.USER_ABORT), ctx(enabled=False), POLICY, T0)
    assert book.user_aborted


@pytest.mark.parametrize("kind", [Kind.RUNAWAY, Kind.STALL, Kind.REPETITION])
def test_abort_kinds_act_on_a_busy_session(kind):
    decision, _ = decide(ledger(), verdict(kind), ctx(live=LiveFacts(busy=True)), POLICY, T0)
    assert decision.action is Action.ABORT_THEN_INJECT


# --- what each kind sends --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "action", "delay", "text_start"),
    [
        (Kind.BLANK, Action.INJECT, 0, "Continue."),  # D11
        (Kind.THINK_ONLY, Action.INJECT, 0, "Continue."),
        (Kind.FORGED_LENGTH, Action.INJECT, 0, "Continue."),  # D12
        (Kind.TOOL_AS_TEXT, Action.INJECT, 0, "Your last tool call was written as plain text"),
        (Kind.TRUNCATED, Action.INJECT, 0, "Continue exactly where you stopped; do not repeat"),
        (Kind.DISCONNECT, Action.INJECT_AT, 5, "Continue. The previous response was interrupted"),
        (Kind.STREAM_TRUNCATED, Action.INJECT_AT, 5, "Continue. The previous response"),  # D4
        (Kind.TIMEOUT, Action.INJECT_AT, 5, "Continue. The previous response"),  # D7
        (Kind.RATE_LIMIT, Action.INJECT_AT, 5, "Continue. The previous response"),
        (Kind.SERVER_ERROR, Action.INJECT_AT, 5, "Continue. The previous response"),
        (Kind.SILENT, Action.INJECT_AT, 5, "Continue. The previous response"),  # D3
        (Kind.RUNAWAY, Action.ABORT_THEN_INJECT, 5, "Continue. The previous response"),
        (Kind.STALL, Action.ABORT_THEN_INJECT, 0, "The previous response stalled"),  # D25
        (Kind.REPETITION, Action.ABORT_THEN_INJECT, 0, "You are repeating the same output"),
    ],
)
def test_first_failure_of_each_kind(kind, action, delay, text_start):
    decision, book = decide(ledger(), verdict(kind), ctx(), POLICY, T0)
    group = GROUP_OF_KIND[kind]
    assert decision.action is action
    assert decision.due == T0 + timedelta(seconds=delay)
    assert decision.text is not None and decision.text.startswith(text_start)
    assert (decision.kind, decision.group) == (kind, group)
    assert (decision.used_before, decision.used_after) == (0, 1)
    assert book.used_in(group) == 1 and "msg_a1" in book.handled
    assert book.first_failure == T0


@pytest.mark.parametrize(
    ("kind", "label"),
    [
        (Kind.DISCONNECT, "connection lost"),
        (Kind.TIMEOUT, "request timed out"),
        (Kind.RATE_LIMIT, "rate limited"),
        (Kind.SILENT, "stopped without output or error"),
    ],
)
def test_interruption_text_names_the_reason(kind, label):
    decision, _ = decide(ledger(), verdict(kind), ctx(), POLICY, T0)
    assert decision.text == (
        f"Continue. The previous response was interrupted ({label}); pick up where it stopped."
    )


def test_configured_texts_are_used():
    policy = load_policy({"messages": {"blank": "Weiter.", "interruption": "Again ({reason})"}})
    blank, _ = decide(ledger(), verdict(Kind.THINK_ONLY), ctx(), policy, T0)
    error, _ = decide(ledger(), verdict(Kind.TIMEOUT), ctx(), policy, T0)
    assert (blank.text, error.text) == ("Weiter.", "Again (request timed out)")


def test_repetition_reminds_then_replans_then_stops():
    decisions, book = run([Kind.REPETITION] * 4)
    assert [d.action for d in decisions] == [
        Action.ABORT_THEN_INJECT,
        Action.ABORT_THEN_INJECT,
        Action.NOTIFY,
        Action.SKIP,
    ]
    assert decisions[0].text.startswith("You are repeating the same output")
    assert decisions[1].text.startswith("You are still repeating yourself. Abandon")
    assert BudgetGroup.REPETITION in book.exhausted


# --- budgets (D14-D17, D20, M9) ---------------------------------------------------------------


def test_third_interrupt_in_a_turn_is_not_retried():  # D14, D20, M9
    decisions, book = run([Kind.DISCONNECT] * 4)
    assert [d.action for d in decisions] == [
        Action.INJECT_AT,
        Action.INJECT_AT,
        Action.NOTIFY,
        Action.SKIP,
    ]
    assert [d.due for d in decisions[:2]] == [at(5), at(11)]
    assert (decisions[1].used_after, decisions[1].limit) == (2, 2)
    assert "2/2" in decisions[1].reason
    assert decisions[2].text == (
        "autoretry: retried 2 times, still failing (interruptions) — waiting for you."
    )
    assert decisions[3].reason.startswith("skip: disconnect budget exhausted")
    assert book.exhausted == INTERRUPTION_GROUPS


def test_interruptions_share_one_cap_and_one_backoff_ladder():
    decisions, book = run([Kind.DISCONNECT, Kind.TIMEOUT, Kind.SERVER_ERROR, Kind.RATE_LIMIT])
    assert [d.action for d in decisions] == [
        Action.INJECT_AT,
        Action.INJECT_AT,
        Action.NOTIFY,
        Action.SKIP,
    ]
    assert decisions[1].due - T0 == timedelta(seconds=1 + 10)  # second interruption waits 10 s
    assert book.exhausted == INTERRUPTION_GROUPS


def test_blank_budget_is_separate_from_interruptions():  # D15
    decisions, book = run([Kind.DISCONNECT, Kind.BLANK, Kind.DISCONNECT, Kind.BLANK, Kind.BLANK])
    assert [d.action for d in decisions] == [
        Action.INJECT_AT,
        Action.INJECT,
        Action.INJECT_AT,
        Action.INJECT,
        Action.NOTIFY,
    ]
    assert book.exhausted == frozenset({BudgetGroup.BLANK})


def test_truncation_allows_three_continuations():
    decisions, _ = run([Kind.TRUNCATED] * 4)
    assert [d.action for d in decisions] == [Action.INJECT] * 3 + [Action.NOTIFY]


def test_a_per_group_cap_below_the_shared_cap_binds_first():
    policy = load_policy({"budgets": {"rate_limit": {"max_retries": 1}}})
    decisions, book = run([Kind.RATE_LIMIT, Kind.RATE_LIMIT, Kind.TIMEOUT], policy=policy)
    assert [d.action for d in decisions] == [Action.INJECT_AT, Action.NOTIFY, Action.INJECT_AT]
    assert book.exhausted == frozenset({BudgetGroup.RATE_LIMIT})


def test_a_zero_budget_notifies_at_once():
    policy = load_policy({"budgets": {"blank": {"max_retries": 0}}})
    decision, book = decide(ledger(), verdict(Kind.BLANK), ctx(), policy, T0)
    assert decision.action is Action.NOTIFY and BudgetGroup.BLANK in book.exhausted


@pytest.mark.parametrize(
    "later",
    [
        verdict(Kind.DISCONNECT, "msg_a7"),
        verdict(Kind.SILENT, "msg_a8"),
        verdict(Kind.RUNAWAY, "msg_a9"),
        verdict(Kind.SERVER_ERROR, None),
    ],
)
def test_exhausted_is_absorbing_until_a_real_user_message(later):  # D17
    _, book = run([Kind.TIMEOUT] * 3)
    for _ in range(3):  # idle, error, poll ... for ever
        decision, book = decide(book, later, ctx(), POLICY, T0 + timedelta(hours=1))
        assert decision.action is Action.SKIP and "exhausted" in decision.reason
    fresh = new_ledger("ses_a", "msg_u2")  # D16: only a real user message opens a new ledger
    decision, _ = decide(fresh, later, ctx(), POLICY, T0 + timedelta(hours=1))
    assert decision.sends and decision.used_after == 1


def test_the_provider_override_applies_to_its_sessions_only():
    policy = load_policy({"providers": {"slow": {"budgets": {"server": {"initial_delay": 8}}}}})
    mine, _ = decide(ledger(), verdict(Kind.SERVER_ERROR), ctx(provider_id="slow"), policy, T0)
    other, _ = decide(ledger(), verdict(Kind.SERVER_ERROR), ctx(provider_id="fast"), policy, T0)
    assert (mine.due - T0, other.due - T0) == (timedelta(seconds=8), timedelta(seconds=5))


# --- waiting honestly -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("hint_ms", "seconds"), [(None, 5), (2000, 5), (30_000, 30), (3_600_000, 300)]
)
def test_server_hint_wins_when_longer_and_is_clamped(hint_ms, seconds):  # D8
    decision, _ = decide(ledger(), verdict(Kind.RATE_LIMIT, hint=hint_ms), ctx(), POLICY, T0)
    assert decision.due == T0 + timedelta(seconds=seconds)


def test_jitter_uses_the_callers_random_number():
    policy = load_policy({"budgets": {"server": {"jitter_ratio": 0.5}}})
    low, _ = decide(ledger(), verdict(Kind.SERVER_ERROR), ctx(), policy, T0, rand=0.0)
    high, _ = decide(ledger(), verdict(Kind.SERVER_ERROR), ctx(), policy, T0, rand=0.9)
    assert (low.due - T0, high.due - T0) == (timedelta(seconds=2.5), timedelta(seconds=7))


def test_deadline_counts_from_the_turns_first_failure():
    policy = load_policy(
        {
            "budgets": {
                "interruption": {"max_retries": 10},
                "server": {"max_retries": 10, "deadline": 60},
            }
        }
    )
    book = ledger()
    first, book = decide(book, verdict(Kind.SERVER_ERROR, "m1"), ctx(), policy, T0)
    second, book = decide(book, verdict(Kind.SERVER_ERROR, "m2"), ctx(), policy, at(40))
    third, book = decide(book, verdict(Kind.SERVER_ERROR, "m3"), ctx(), policy, at(55))
    fourth, book = decide(book, verdict(Kind.SERVER_ERROR, "m4"), ctx(), policy, at(61))
    assert [d.action for d in (first, second)] == [Action.INJECT_AT, Action.INJECT_AT]
    assert third.action is Action.NOTIFY  # 55 s + 10 s backoff would land past 60 s
    assert "past the 60 s deadline" in third.reason
    assert fourth.reason.startswith("skip: server budget exhausted")
    assert book.first_failure == T0


def test_deadline_already_passed_is_exhausted():
    policy = load_policy({"budgets": {"server": {"deadline": 30}}})
    book = replace(ledger(), first_failure=T0, used={BudgetGroup.BLANK: 1})
    decision, book = decide(book, verdict(Kind.SERVER_ERROR), ctx(), policy, at(31))
    assert decision.action is Action.NOTIFY and "deadline of 30 s" in decision.reason


# --- duplicates and pending retries (D18, D19) --------------------------------------------------


def test_error_then_idle_for_the_same_failure_injects_once():  # D18
    book = ledger()
    first, book = decide(book, verdict(Kind.DISCONNECT), ctx(), POLICY, T0)
    pending = PendingRetry("ses_a", "msg_u1", "msg_a1", BudgetGroup.DISCONNECT, first.due)
    again, after = decide(book, verdict(Kind.DISCONNECT), ctx(pending=pending), POLICY, T0)
    assert first.sends and again.action is Action.SKIP and after == book


def test_a_replayed_failure_after_restart_does_not_spend_twice():
    _, book = decide(ledger(), verdict(Kind.BLANK), ctx(), POLICY, T0)
    decision, after = decide(book, verdict(Kind.BLANK), ctx(), POLICY, at(1))
    assert decision.reason == "skip: failure msg_a1 already handled" and after == book


def test_a_pending_retry_for_another_failure_blocks_a_second_schedule():
    pending = PendingRetry("ses_a", "msg_u1", "msg_a0", BudgetGroup.SERVER, at(5))
    decision, _ = decide(ledger(), verdict(Kind.TIMEOUT), ctx(pending=pending), POLICY, T0)
    assert decision.reason.startswith("skip: a retry is already pending for this turn")


def test_a_pending_retry_of_an_older_turn_does_not_block():
    pending = PendingRetry("ses_a", "msg_u0", "msg_a1", BudgetGroup.SERVER, at(5))
    decision, _ = decide(ledger(), verdict(Kind.TIMEOUT), ctx(pending=pending), POLICY, T0)
    assert decision.action is Action.INJECT_AT


# --- subagents (D22-D24) --------------------------------------------------------------------


def test_root_waiting_on_busy_subagent_is_not_continued():  # D22
    decision, _ = decide(
        ledger(), verdict(Kind.SILENT), ctx(live=LiveFacts(child_busy=True)), POLICY, T0
    )
    assert decision.reason == "skip: waiting on a busy subagent"


@pytest.mark.parametrize("kind", [*ERROR_KINDS, *BLANK_KINDS, Kind.STALL, Kind.REPETITION])
def test_child_sessions_never_get_anything(kind):  # D23
    for is_child in (True, None):
        decision, _ = decide(ledger(), verdict(kind), ctx(is_child=is_child), POLICY, T0)
        assert decision.action is Action.SKIP


def test_blank_after_an_ordinary_tool_step_is_continued():  # D24: no AR-style heuristic here
    decision, _ = decide(ledger(), verdict(Kind.BLANK), ctx(), POLICY, T0)
    assert decision.action is Action.INJECT


def test_decisions_carry_session_and_turn():
    decision, _ = decide(ledger(), verdict(Kind.HEALTHY), ctx(), POLICY, T0)
    assert (decision.session_id, decision.turn_id) == ("ses_a", "msg_u1")


def test_a_deadline_closes_only_its_own_group():
    policy = load_policy({"budgets": {"server": {"deadline": 30}}})
    book = replace(ledger(), first_failure=T0)
    decision, book = decide(book, verdict(Kind.SERVER_ERROR), ctx(), policy, at(31))
    assert decision.action is Action.NOTIFY and book.exhausted == {BudgetGroup.SERVER}
    later, _ = decide(book, verdict(Kind.TIMEOUT, "msg_a2"), ctx(), policy, at(32))
    assert later.action is Action.INJECT_AT


def test_a_ledger_of_another_session_is_refused():
    with pytest.raises(ValueError, match="ledger of ses_a used for ses_b"):
        decide(ledger(), verdict(Kind.BLANK), ctx(session_id="ses_b"), POLICY, T0)
