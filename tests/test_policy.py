"""Policy loading/validation and the delay arithmetic (backoff, Retry-After hints)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from opencode_autoretry.decisions.budget import load_policy as load_policy_via_budget
from opencode_autoretry.decisions.policy import (
    DEFAULT_MESSAGES,
    HINT_MAX_SECONDS,
    INTERRUPTION_GROUPS,
    MESSAGE_KEYS,
    GroupBudget,
    Policy,
    PolicyError,
    backoff_seconds,
    fill,
    hint_seconds,
    load_policy,
    retry_delay,
)
from opencode_autoretry.models import BudgetGroup, Kind

SEED = GroupBudget(max_retries=2, initial_delay=5.0, max_delay=10.0)
MIMO_STREAM = GroupBudget(max_retries=5, initial_delay=2.0, max_delay=30.0)


# --- defaults ------------------------------------------------------------------------------


def test_empty_config_gives_the_seed_defaults():
    policy = load_policy({})
    assert policy.interruption_cap == 2
    for group in INTERRUPTION_GROUPS:
        assert policy.budget_for(group) == SEED
    assert policy.budget_for(BudgetGroup.BLANK) == GroupBudget(max_retries=2)
    assert policy.budget_for(BudgetGroup.LENGTH) == GroupBudget(max_retries=3)
    assert policy.budget_for(BudgetGroup.REPETITION).max_retries == 2
    assert policy.budget_for(BudgetGroup.STALL).max_retries == 2
    assert policy == Policy()


def test_load_policy_is_reexported_from_budget_as_settings_documents():
    assert load_policy_via_budget is load_policy


# --- valid overrides -----------------------------------------------------------------------


def test_group_override_changes_only_named_fields():
    policy = load_policy({"budgets": {"rate_limit": {"max_retries": 5, "max_delay": 60}}})
    assert policy.budget_for(BudgetGroup.RATE_LIMIT) == GroupBudget(
        max_retries=5, initial_delay=5.0, max_delay=60.0
    )
    assert policy.budget_for(BudgetGroup.SERVER) == SEED


def test_shared_interruption_cap_is_configurable():
    assert load_policy({"budgets": {"interruption": {"max_retries": 4}}}).interruption_cap == 4


def test_provider_override_layers_on_the_global_group():
    raw = {
        "budgets": {"server": {"initial_delay": 2, "max_delay": 20}},
        "providers": {
            "openrouter": {
                "budgets": {"server": {"max_retries": 1}, "interruption": {"max_retries": 3}}
            }
        },
    }
    policy = load_policy(raw)
    assert policy.budget_for(BudgetGroup.SERVER, "openrouter") == GroupBudget(1, 2.0, 20.0)
    assert policy.budget_for(BudgetGroup.SERVER, "other") == GroupBudget(2, 2.0, 20.0)
    assert policy.budget_for(BudgetGroup.SERVER) == GroupBudget(2, 2.0, 20.0)
    assert policy.cap_for("openrouter") == 3
    assert policy.cap_for("other") == 2


def test_deadline_zero_switches_an_inherited_deadline_off():
    raw = {
        "budgets": {"unknown": {"deadline": 600}},
        "providers": {"p": {"budgets": {"unknown": {"deadline": 0}}}},
    }
    policy = load_policy(raw)
    assert policy.budget_for(BudgetGroup.UNKNOWN).deadline == 600.0
    assert policy.budget_for(BudgetGroup.UNKNOWN, "p").deadline is None


def test_messages_override_a_kind_and_its_family():
    policy = load_policy({"messages": {"blank": "Go on.", "disconnect": "Reconnected: {reason}"}})
    assert policy.text("blank") == "Go on."
    assert policy.text("think_only") == "Go on."  # family falls back to blank
    assert policy.text("disconnect") == "Reconnected: {reason}"
    assert policy.text("timeout") == DEFAULT_MESSAGES["interruption"]
    assert policy.text("stall") == DEFAULT_MESSAGES["stall"]


def test_every_sending_kind_has_a_text():
    policy = Policy()
    sending = [k for k in Kind if k.value in MESSAGE_KEYS]
    assert Kind.BLANK in sending and Kind.TOOL_AS_TEXT in sending and Kind.RUNAWAY in sending
    for kind in sending:
        assert policy.text(kind.value).strip()


def test_fill_replaces_known_placeholders_and_leaves_other_braces():
    assert fill("a {reason} b {x} {", reason="r") == "a r b {x} {"


# --- invalid configs: the error names the key path -----------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({"budget": {}}, "config: unknown key 'budget'"),
        ({"budgets": []}, "budgets must be a table"),
        ({"budgets": {"blanks": {}}}, "budgets: unknown key 'blanks'"),
        ({"budgets": {"blank": {"retries": 1}}}, "budgets.blank: unknown key 'retries'"),
        ({"budgets": {"blank": {"max_retries": "2"}}}, "budgets.blank.max_retries must be an int"),
        ({"budgets": {"blank": {"max_retries": True}}}, "budgets.blank.max_retries must be an int"),
        ({"budgets": {"blank": {"max_retries": 2.0}}}, "budgets.blank.max_retries must be an int"),
        ({"budgets": {"blank": {"max_retries": -1}}}, "budgets.blank.max_retries must be between"),
        ({"budgets": {"blank": {"max_retries": 101}}}, "budgets.blank.max_retries must be between"),
        ({"budgets": {"server": {"initial_delay": -1}}}, "budgets.server.initial_delay must be"),
        ({"budgets": {"server": {"initial_delay": "5s"}}}, "budgets.server.initial_delay must be"),
        ({"budgets": {"server": {"max_delay": 1e9}}}, "budgets.server.max_delay must be between"),
        ({"budgets": {"server": {"max_delay": float("nan")}}}, "budgets.server.max_delay must be"),
        ({"budgets": {"server": {"max_delay": 3}}}, "budgets.server: max_delay (3 s) is less"),
        ({"budgets": {"server": {"jitter_ratio": 1.5}}}, "budgets.server.jitter_ratio must be"),
        ({"budgets": {"server": {"jitter_ratio": -0.1}}}, "budgets.server.jitter_ratio must be"),
        ({"budgets": {"server": {"deadline": -5}}}, "budgets.server.deadline must be between"),
        ({"budgets": {"interruption": {"initial_delay": 1}}}, "budgets.interruption: unknown key"),
        ({"budgets": {"interruption": {}}}, "budgets.interruption: max_retries is required"),
        ({"providers": {"p": {"retry": {}}}}, "providers.p: unknown key 'retry'"),
        ({"providers": {"p": "x"}}, "providers.p must be a table"),
        (
            {"providers": {"p": {"budgets": {"server": {"jitter_ratio": 2}}}}},
            "providers.p.budgets.server.jitter_ratio must be between 0 and 1",
        ),
        (
            {"providers": {"p": {"budgets": {"server": {"max_delay": 1}}}}},
            "providers.p.budgets.server: max_delay (1 s) is less than initial_delay (5 s)",
        ),
        ({"messages": {"blanc": "x"}}, "messages: unknown key 'blanc'"),
        ({"messages": {"blank": 3}}, "messages.blank must be a string"),
        ({"messages": {"blank": "   "}}, "messages.blank must not be empty"),
        ({"messages": {"blank": "x" * 2001}}, "messages.blank is longer than 2000"),
    ],
)
def test_invalid_config_names_the_key_path(raw, expected):
    with pytest.raises(PolicyError) as caught:
        load_policy(raw)
    assert expected in str(caught.value)
    assert isinstance(caught.value, ValueError)


# --- backoff and hints (seed D20; MiMo M1-M8 adapted) -------------------------------------


@pytest.mark.parametrize(
    ("attempt", "seconds"), [(1, 5.0), (2, 10.0), (3, 10.0), (10, 10.0), (500, 10.0)]
)
def test_seed_backoff_is_5_then_10_clamped(attempt, seconds):  # D20
    assert backoff_seconds(SEED, attempt) == seconds


@pytest.mark.parametrize(
    ("attempt", "seconds"), [(1, 2), (2, 4), (3, 8), (4, 16), (5, 30), (6, 30)]
)
def test_doubling_backoff_caps_at_max_delay(attempt, seconds):  # M1 with MiMo's stream budget
    assert retry_delay(MIMO_STREAM, attempt) == timedelta(seconds=seconds)


@pytest.mark.parametrize(
    ("rand", "seconds"), [(0.0, 4.0), (0.5, 5.0), (0.75, 5.5), (0.999999, 5.999998)]
)
def test_jitter_is_driven_by_the_callers_random_number(rand, seconds):
    budget = GroupBudget(max_retries=2, initial_delay=5.0, max_delay=10.0, jitter_ratio=0.2)
    assert backoff_seconds(budget, 1, rand) == pytest.approx(seconds)


def test_jitter_never_exceeds_max_delay():
    budget = GroupBudget(max_retries=2, initial_delay=5.0, max_delay=10.0, jitter_ratio=0.5)
    assert backoff_seconds(budget, 2, 0.99) == 10.0


@pytest.mark.parametrize(("rand", "attempt"), [(-0.1, 1), (1.0, 1), (0.0, 0)])
def test_out_of_range_inputs_are_refused(rand, attempt):
    with pytest.raises(ValueError):
        backoff_seconds(SEED, attempt, rand)


@pytest.mark.parametrize(
    ("hint_ms", "attempt", "expected"),
    [
        (None, 1, 5.0),  # no hint: our backoff
        (1500, 4, 10.0),  # M2 adapted: a hint shorter than our backoff does not shorten it
        (30_000, 1, 30.0),  # M3: retry-after 30 s wins
        (20_000, 2, 20.0),  # M4: a date hint 20 s ahead arrives as 20 000 ms
        (50_000, 1, 50.0),  # M7: hints are not capped at max_delay
        (700_000, 1, 300.0),  # M7 adapted: but are capped at 5 minutes
        (2**31 - 1, 1, 300.0),  # M8 adapted: MiMo clamps to 2^31-1 ms; we clamp to 5 min
        (10**15, 1, 300.0),
        (-1, 1, 5.0),  # M5/M6: a garbage or past hint is ignored
    ],
)
def test_delay_is_the_longer_of_backoff_and_clamped_hint(hint_ms, attempt, expected):
    assert retry_delay(SEED, attempt, hint_ms) == timedelta(seconds=expected)


@pytest.mark.parametrize(
    ("hint_ms", "seconds"), [(0, 0.1), (1, 0.1), (100, 0.1), (250, 0.25), (None, None)]
)
def test_hints_are_clamped_to_at_least_100_ms(hint_ms, seconds):
    assert hint_seconds(hint_ms) == seconds


def test_a_tiny_hint_with_an_immediate_budget_waits_100_ms():
    assert retry_delay(GroupBudget(max_retries=2), 1, 5) == timedelta(milliseconds=100)


def test_hint_ceiling_is_five_minutes():
    assert HINT_MAX_SECONDS == 300.0
