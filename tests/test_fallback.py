"""Model fallback: the pure revision of a decision (fake clock), the config, the start-up check,
and the loop sending the continuation on the next model."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime

import pytest
from daemon_fakes import Harness
from opencode_rows import api_error

from opencode_autoretry.causes import Cause
from opencode_autoretry.decisions.budget import DecisionContext, decide, new_ledger
from opencode_autoretry.decisions.classifier import classify
from opencode_autoretry.decisions.fallback import (
    FallbackError,
    check_models,
    load_fallback,
    revise,
)
from opencode_autoretry.decisions.policy import load_policy
from opencode_autoretry.models import (
    Action,
    BudgetGroup,
    ErrorInfo,
    Kind,
    LiveFacts,
    Message,
    Role,
    Turn,
    Verdict,
)
from opencode_autoretry.plugin_bridge import protocol

NOW = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
POLICY = load_policy({})
CHAINS = load_fallback({"fake/fake-model": ["fake/fake-b", "other/c"]})
ROOT = DecisionContext(session_id="ses_a", is_child=False)
QUOTA = ErrorInfo("APIError", "You exceeded your current quota (insufficient_quota)",
                  status_code=429, is_retryable=True)
AUTH = ErrorInfo("APIError", "Invalid API key", status_code=401, is_retryable=False)


def step(mid: str, model: str = "fake-model", provider: str = "fake",
         error: ErrorInfo | None = None) -> Message:
    return Message(mid, "ses_a", Role.ASSISTANT, NOW, NOW, parent_id="msg_u", provider_id=provider,
                   model_id=model, error=error)


def turn(*steps: Message) -> Turn:
    user = Message("msg_u", "ses_a", Role.USER, NOW, provider_id="fake", model_id="fake-model")
    return Turn("ses_a", user, steps=steps)


def decide_and_revise(t: Turn, ledger=None, context=ROOT):
    ledger = ledger or new_ledger("ses_a", "msg_u")
    verdict = classify(t, LiveFacts(), now=NOW)
    decision, updated = decide(ledger, verdict, context, POLICY, NOW)
    return revise(decision, updated, verdict, t, context, CHAINS, POLICY, NOW), verdict


@pytest.mark.parametrize("error, cause", [(QUOTA, "usage limit"), (AUTH, "auth failure")])
def test_a_model_bound_terminal_error_switches_to_the_next_model(error, cause):
    (decision, ledger), verdict = decide_and_revise(turn(step("msg_1", error=error)))
    assert verdict.kind is Kind.TERMINAL
    assert decision.action is Action.INJECT and decision.model == "fake/fake-b"
    assert f"{cause} on fake/fake-model: switched fake/fake-model → fake/fake-b" in decision.reason
    assert (decision.used_after, decision.limit) == (1, 2)
    assert decision.switch is not None
    assert (decision.switch.from_model, decision.switch.to_model) == (
        "fake/fake-model", "fake/fake-b")
    assert "msg_1" in ledger.handled
    again = revise(replace(decision, action=Action.SKIP, cause=Cause.NOT_RETRYABLE),
                   ledger, verdict, turn(step("msg_1", error=error)), ROOT, CHAINS, POLICY, NOW)
    assert again[0].action is Action.SKIP and "already handled" in again[0].reason


def test_the_next_failure_goes_down_the_chain_then_gives_up():
    t = turn(step("msg_1", error=QUOTA), step("msg_2", "fake-b", error=QUOTA))
    (decision, _), _ = decide_and_revise(t)
    assert decision.model == "other/c" and "switched fake/fake-b → other/c" in decision.reason
    t = turn(*t.steps, step("msg_3", "c", "other", error=QUOTA))
    (decision, _), _ = decide_and_revise(t)
    assert decision.action is Action.NOTIFY and decision.model is None
    assert "fallback chain used up (fake/fake-model → fake/fake-b → other/c)" in decision.reason


def test_an_exhausted_transient_budget_switches_with_a_fresh_budget():
    rate = ErrorInfo("APIError", "Rate limit exceeded", status_code=429, is_retryable=True)
    spent = replace(new_ledger("ses_a", "msg_u"), used={BudgetGroup.RATE_LIMIT: 2},
                    first_failure=NOW)
    (decision, ledger), _ = decide_and_revise(turn(step("msg_1", error=rate)), spent)
    assert decision.action is Action.INJECT and decision.model == "fake/fake-b"
    assert "rate_limit budget exhausted on fake/fake-model" in decision.reason
    assert ledger.used == {} and ledger.exhausted == frozenset()


@pytest.mark.parametrize("context", [
    replace(ROOT, is_child=True), replace(ROOT, is_child=None), replace(ROOT, enabled=False),
    replace(ROOT, live=LiveFacts(question_pending=True)),
])
def test_never_switches_in_a_child_when_off_or_waiting_on_the_user(context):
    (decision, _), _ = decide_and_revise(turn(step("msg_1", error=QUOTA)), context=context)
    assert decision.action is Action.SKIP and decision.model is None


def test_other_failures_and_other_models_are_left_alone():
    overflow = ErrorInfo("ContextOverflowError", "prompt is too long")
    (decision, _), _ = decide_and_revise(turn(step("msg_1", error=overflow)))
    assert decision.action is Action.SKIP
    (decision, _), _ = decide_and_revise(turn(Message(
        "msg_1", "ses_a", Role.ASSISTANT, NOW, NOW, parent_id="msg_u", provider_id="fake",
        model_id="fake-model", finish="stop")))
    assert decision.model is None
    verdict = Verdict(Kind.TERMINAL, False, "a hard usage limit is reached", "msg_1", error=QUOTA)
    lone = turn(step("msg_1", "x", "solo", error=QUOTA))
    lone = replace(lone, user=replace(lone.user, provider_id="solo", model_id="x"))
    decision, _ = decide(new_ledger("ses_a", "msg_u"), verdict, ROOT, POLICY, NOW)
    assert revise(decision, new_ledger("ses_a", "msg_u"), verdict, lone, ROOT, CHAINS, POLICY,
                  NOW)[0] == decision


def test_the_wildcard_chain_applies_to_any_other_model():
    chains = load_fallback({"*": ["fake/fake-b"]})
    verdict = Verdict(Kind.TERMINAL, False, "a hard usage limit is reached", "msg_1", error=QUOTA)
    decision, ledger = decide(new_ledger("ses_a", "msg_u"), verdict, ROOT, POLICY, NOW)
    switched, _ = revise(decision, ledger, verdict, turn(step("msg_1", error=QUOTA)), ROOT,
                         chains, POLICY, NOW)
    assert switched.model == "fake/fake-b"


@pytest.mark.parametrize("table, message", [
    ({"fake": ["fake/b"]}, 'fallback."fake": the key must be "provider/model"'),
    ({"fake/a": []}, 'fallback."fake/a" must be a non-empty list'),
    ({"fake/a": ["b"]}, 'fallback."fake/a"[0] must be "provider/model"'),
    ({"fake/a": ["fake/a"]}, "falls back to itself"),
])
def test_bad_tables_name_the_key(table, message):
    with pytest.raises(FallbackError, match=message.replace("[", r"\[")):
        load_fallback(table)


def test_start_up_refuses_a_model_opencodes_config_does_not_list(tmp_path):
    (tmp_path / "opencode.json").write_text(json.dumps({"provider": {"fake": {"models": {
        "fake-model": {}, "fake-b": {}}}}}))
    check_models(load_fallback({"fake/fake-model": ["fake/fake-b", "anthropic/x"]}), {}, tmp_path)
    with pytest.raises(FallbackError, match="OpenCode does not know fake/nope"):
        check_models(load_fallback({"*": ["fake/nope"]}), {}, tmp_path)
    check_models(load_fallback({"*": ["fake/nope"]}), {}, tmp_path / "missing")  # unreadable


def test_the_loop_continues_on_the_next_model(tmp_path):
    h = Harness(tmp_path, fallback={"fake/fake-model": ["fake/fake-b"]})
    h.hello()
    sid, user = h.busy_turn()
    quota = api_error("You exceeded your current quota (insufficient_quota)", status=429)
    h.failed_step(sid, user, quota)
    h.error_then_idle(sid, quota)
    [prompt] = h.prompts()
    assert prompt.model == protocol.ModelRef("fake", "fake-b") and prompt.variant is None
    assert any("switched fake/fake-model → fake/fake-b" in t for t in h.toasts())
    [decision] = h.store.decisions(sid)
    assert decision.action == "inject" and "switched" in decision.reason
