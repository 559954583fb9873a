"""Waiting out a usage window (issue 23): ``[quota]``, the budget core's quota wait, its
reason, toast and notification event (pure; the clock is an argument)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from opencode_autoretry.causes import Cause, Facts
from opencode_autoretry.config.settings import ConfigError
from opencode_autoretry.daemon.toasts import recovery_toast
from opencode_autoretry.decisions.budget import DecisionContext, PendingRetry, decide, new_ledger
from opencode_autoretry.decisions.policy import Policy, load_policy
from opencode_autoretry.decisions.quota import QuotaConfig, load_quota
from opencode_autoretry.models import (
    Action,
    BudgetGroup,
    ErrorInfo,
    Kind,
    LiveFacts,
    TurnLedger,
    Verdict,
)
from opencode_autoretry.notifications.events import NotifyEvent, event_for, from_decision

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
QUOTA = QuotaConfig(max_wait=21600, jitter=10)
USAGE = ErrorInfo("APIError", "Usage limit reached, resets in 20 seconds", 429, True)
RATE = ErrorInfo("APIError", "Too many requests", 429, True)


def usage(reset_in: float | None, msg: str = "msg_a1", error: ErrorInfo = USAGE) -> Verdict:
    reset = NOW + timedelta(seconds=reset_in) if reset_in is not None else None
    return Verdict(Kind.TERMINAL, False, "a hard usage limit is reached", msg, error=error,
                   resets_at=reset)


def rate(reset_in: float, msg: str = "msg_a1") -> Verdict:
    return Verdict(Kind.RATE_LIMIT, True, "rate limited", msg, error=RATE,
                   resets_at=NOW + timedelta(seconds=reset_in))


def ctx(**kw: object) -> DecisionContext:
    return DecisionContext(**{"session_id": "ses_a", "is_child": False, "quota": QUOTA,
                              **kw})  # type: ignore[arg-type]


def book() -> TurnLedger:
    return new_ledger("ses_a", "msg_u1")


def test_a_usage_limit_waits_once_for_its_reset_plus_jitter() -> None:
    decision, after = decide(book(), usage(20), ctx(), Policy(), NOW, rand=0.5)
    assert decision.action is Action.INJECT_AT and decision.cause is Cause.QUOTA_WAIT
    assert decision.due == NOW + timedelta(seconds=20 + 1 + 5)
    assert decision.group is BudgetGroup.QUOTA and decision.sends
    assert decision.facts.resets_at == NOW + timedelta(seconds=20)
    assert decision.text == Policy().text("quota")
    assert after.used_in(BudgetGroup.QUOTA) == 1 and "msg_a1" in after.handled
    assert "quota resets at 2026-12-02T12:00:20+00:00" in decision.reason
    # the same failure again (a replayed idle) is already handled; its wait is pending
    pending = PendingRetry("ses_a", "msg_u1", "msg_a1", BudgetGroup.QUOTA, decision.due)
    again, _ = decide(after, usage(19), ctx(pending=pending), Policy(), NOW, rand=0.5)
    assert again.action is Action.SKIP and again.cause is Cause.ALREADY_HANDLED


def test_the_jitter_stays_within_its_bounds() -> None:
    early, _ = decide(book(), usage(20), ctx(), Policy(), NOW, rand=0.0)
    late, _ = decide(book(), usage(20), ctx(), Policy(), NOW, rand=0.999)
    reset = NOW + timedelta(seconds=20)
    assert early.due == reset + timedelta(seconds=1)
    assert reset + timedelta(seconds=1) < (late.due or NOW) < reset + timedelta(seconds=11)


def test_a_reset_beyond_max_wait_gives_up_and_notifies_once() -> None:
    decision, after = decide(book(), usage(7 * 3600), ctx(), Policy(), NOW)
    assert decision.action is Action.NOTIFY and decision.cause is Cause.GAVE_UP
    assert not decision.sends and decision.due is None
    assert "max_wait" in (decision.text or "") and "7.0 h" in (decision.text or "")
    assert BudgetGroup.QUOTA in after.exhausted
    again, _ = decide(after, usage(7 * 3600 - 5, "msg_a2"), ctx(), Policy(), NOW)
    assert again.action is Action.SKIP and again.cause is Cause.GROUP_EXHAUSTED
    assert event_for(decision, is_child=False) is NotifyEvent.GAVE_UP


def test_max_wait_zero_never_waits() -> None:
    decision, _ = decide(book(), usage(20), ctx(quota=QuotaConfig(max_wait=0)), Policy(), NOW)
    assert decision.action is Action.NOTIFY and decision.cause is Cause.GAVE_UP


def test_the_quota_budget_bounds_the_waits_of_a_turn() -> None:
    ledger, actions = book(), []
    for n in range(3):
        decision, ledger = decide(ledger, usage(20, f"msg_a{n}"), ctx(), Policy(), NOW)
        actions.append((decision.action, decision.cause))
    assert actions == [(Action.INJECT_AT, Cause.QUOTA_WAIT)] * 2 + [
        (Action.NOTIFY, Cause.BUDGET_SPENT)]
    one = load_policy({"budgets": {"quota": {"max_retries": 1}}})
    ledger = book()
    first, ledger = decide(ledger, usage(20, "m1"), ctx(), one, NOW)
    second, ledger = decide(ledger, usage(20, "m2"), ctx(), one, NOW)
    assert first.cause is Cause.QUOTA_WAIT and second.cause is Cause.BUDGET_SPENT


def test_a_long_rate_limit_waits_a_short_one_retries_as_before() -> None:
    long, _ = decide(book(), rate(2 * 3600), ctx(), Policy(), NOW)
    assert long.cause is Cause.QUOTA_WAIT and long.due is not None
    assert long.due >= NOW + timedelta(hours=2)
    short, after = decide(book(), rate(60), ctx(), Policy(), NOW)
    assert short.cause is Cause.RETRY and short.group is BudgetGroup.RATE_LIMIT
    assert after.used_in(BudgetGroup.QUOTA) == 0


@pytest.mark.parametrize("context", [
    ctx(enabled=False), ctx(is_child=True), ctx(is_child=None),
    ctx(live=LiveFacts(permission_pending=True)), ctx(live=LiveFacts(question_pending=True)),
    ctx(live=LiveFacts(child_busy=True)), ctx(fallback_ready=True), ctx(quota=None),
])
def test_nothing_waits_where_the_gates_or_a_fallback_say_no(context: DecisionContext) -> None:
    decision, after = decide(book(), usage(20), context, Policy(), NOW)
    assert not decision.sends and decision.cause is not Cause.QUOTA_WAIT
    assert after.used_in(BudgetGroup.QUOTA) == 0


def test_a_user_abort_is_never_waited_out() -> None:
    aborted = replace(book(), user_aborted=True)
    decision, _ = decide(aborted, usage(20), ctx(), Policy(), NOW)
    assert decision.action is Action.SKIP and decision.cause is Cause.USER_ABORT


@pytest.mark.parametrize("verdict", [
    usage(None),  # no reset named: terminal as before
    usage(2),  # a reset OpenCode's own retries already covered
    usage(20, error=ErrorInfo("ProviderAuthError", "bad key")),  # not a usage limit
])
def test_no_known_window_means_the_terminal_skip_of_before(verdict: Verdict) -> None:
    decision, _ = decide(book(), verdict, ctx(), Policy(), NOW)
    assert decision.action is Action.SKIP and decision.cause is Cause.NOT_RETRYABLE


def test_the_toast_and_the_notification_name_the_reset() -> None:
    decision, _ = decide(book(), usage(20), ctx(), Policy(), NOW)
    toast = recovery_toast(decision, NOW)
    local = (NOW + timedelta(seconds=20)).astimezone()
    assert toast == f"autoretry: quota resets at {local:%H:%M} — continuing then"
    assert event_for(decision, is_child=False) is NotifyEvent.WAITING_QUOTA
    assert event_for(decision, is_child=True) is None
    note = from_decision(NotifyEvent.WAITING_QUOTA, decision, 7, None, NOW)
    assert "resets at 2026-12-02 12:00 UTC" in note.summary and "after" not in note.summary
    assert "cancels the wait" in note.resume


def test_the_reset_is_kept_in_the_stored_facts() -> None:
    facts = Facts(resets_at=NOW, delay_s=3.0)
    assert Facts.from_json(facts.to_json()) == facts


@pytest.mark.parametrize(("raw", "message"), [
    ({"max_wait": -1}, "quota.max_wait must be between 0 and 604800 s, got -1"),
    ({"max_wait": True}, "quota.max_wait must be a number of seconds, got bool True"),
    ({"jitter": 4000}, "quota.jitter must be between 0 and 3600 s, got 4000"),
    ({"maxwait": 1}, "quota: unknown key 'maxwait' (known: max_wait, jitter)"),
    ("x", "quota must be a table, got str"),
])
def test_bad_quota_tables_name_the_key(raw: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_quota(raw)


def test_quota_defaults() -> None:
    assert load_quota({}) == QuotaConfig(max_wait=21600.0, jitter=30.0)
    assert load_quota({"max_wait": 60, "jitter": 0}) == QuotaConfig(60.0, 0.0)


def test_the_one_config_carries_quota() -> None:
    from opencode_autoretry.config.load import parse_config
    from opencode_autoretry.config.settings import Settings

    config = parse_config(replace(Settings(), quota={"max_wait": 60}))
    assert config.quota == QuotaConfig(max_wait=60.0)
