"""The retry policy: per-group budgets, per-provider overrides and the texts autoretry sends.

Built once from the raw ``[budgets]``, ``[providers]`` and ``[messages]`` tables of config.toml
(``Settings.policy``) and validated here, so a typo fails at start-up with the key path in the
message instead of silently falling back to a default. The defaults are the seed's: at most two
recoveries per user turn for interruptions, backoff 5 s then 10 s, blank completions continued at
once (2), truncated output continued up to 3 times.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from datetime import timedelta
from typing import Any

from opencode_autoretry.config.settings import ConfigError
from opencode_autoretry.models import BudgetGroup, Kind

#: Error groups that share the per-turn "interruption" cap on top of their own caps.
INTERRUPTION_GROUPS: frozenset[BudgetGroup] = frozenset(
    {
        BudgetGroup.DISCONNECT,
        BudgetGroup.TIMEOUT,
        BudgetGroup.STREAM,
        BudgetGroup.SERVER,
        BudgetGroup.RATE_LIMIT,
        BudgetGroup.UNKNOWN,
    }
)
#: The pseudo-group under ``[budgets]`` / ``[providers.<id>.budgets]`` holding the shared cap.
SHARED_CAP_KEY = "interruption"
DEFAULT_INTERRUPTION_CAP = 2
MAX_RETRIES_CEILING = 100  # a bigger number is a typo, not a policy
MAX_DELAY_CEILING = 24 * 3600.0
MAX_MESSAGE_CHARS = 2000


class PolicyError(ConfigError):
    """Bad ``[budgets]`` / ``[providers]`` / ``[messages]`` configuration; names the key path."""


@dataclass(frozen=True)
class GroupBudget:
    """How often and how patiently one budget group may recover within one user turn."""

    max_retries: int
    initial_delay: float = 0.0  # seconds before the first retry
    max_delay: float = 0.0  # seconds; the doubling backoff is clamped here
    jitter_ratio: float = 0.0  # 0..1; the caller supplies the random number
    deadline: float | None = None  # seconds since the turn's first failure; None = no deadline


_INTERRUPTION = GroupBudget(max_retries=2, initial_delay=5.0, max_delay=10.0)
_AT_ONCE_2 = GroupBudget(max_retries=2)

DEFAULT_BUDGETS: Mapping[BudgetGroup, GroupBudget] = {
    **{group: _INTERRUPTION for group in INTERRUPTION_GROUPS},
    BudgetGroup.BLANK: _AT_ONCE_2,
    BudgetGroup.LENGTH: GroupBudget(max_retries=3),
    BudgetGroup.REPETITION: _AT_ONCE_2,
    BudgetGroup.STALL: _AT_ONCE_2,
    # Set from ``[todos]`` max_continuations and countdown (core/todos/continuation.py), 3 and 5 s.
    BudgetGroup.TODOS: GroupBudget(max_retries=3, initial_delay=5.0, max_delay=5.0),
    # Set from ``[goal] max_continuations`` (core/goals/config.py): 10, at once.
    BudgetGroup.GOAL: GroupBudget(max_retries=10),
    # Waits for a usage window to reset (issue 23; ``[quota]``): the delay is the reset's.
    BudgetGroup.QUOTA: _AT_ONCE_2,
}

#: Server hints (Retry-After) are honoured but kept sane: at least 100 ms, at most 5 minutes.
#: MiMo clamps to 2^31-1 ms; a "continue" queued for weeks helps nobody, so we stop at 5 min.
HINT_MIN_SECONDS = 0.1
HINT_MAX_SECONDS = 300.0


# --- delays --------------------------------------------------------------------------------


def backoff_seconds(budget: GroupBudget, attempt: int, rand: float = 0.0) -> float:
    """``initial * 2^(attempt-1)`` clamped to ``max_delay``, then ± ``jitter_ratio``.

    ``rand`` in [0, 1) comes from the caller (0.5 = no jitter; the default 0.0 with the
    default jitter 0 gives exactly 5 s, 10 s, 10 s...).
    """
    if not 0.0 <= rand < 1.0:
        raise ValueError(f"rand must be in [0, 1), got {rand}")
    if attempt < 1:
        raise ValueError(f"attempt counts from 1, got {attempt}")
    # Cap the exponent: 2**attempt overflows floats long before any sane max_delay matters.
    raw = budget.initial_delay * 2.0 ** min(attempt - 1, 64)
    base = min(budget.max_delay, raw)
    jittered = base * (1.0 + budget.jitter_ratio * (2.0 * rand - 1.0))
    return max(0.0, min(budget.max_delay, jittered))


def hint_seconds(retry_after_ms: int | None) -> float | None:
    """A server's Retry-After hint in seconds, clamped to 100 ms ... 5 min; None if absent."""
    if retry_after_ms is None or retry_after_ms < 0:
        return None
    return min(HINT_MAX_SECONDS, max(HINT_MIN_SECONDS, retry_after_ms / 1000.0))


def retry_delay(
    budget: GroupBudget, attempt: int, retry_after_ms: int | None = None, rand: float = 0.0
) -> timedelta:
    """Wait honestly: the longer of our backoff and the server's (clamped) hint."""
    backoff = backoff_seconds(budget, attempt, rand)
    hint = hint_seconds(retry_after_ms)
    return timedelta(seconds=backoff if hint is None else max(backoff, hint))


# --- message texts -------------------------------------------------------------------------

_BLANK_TEXT = "Continue."
_INTERRUPTED_TEXT = (
    "Continue. The previous response was interrupted ({reason}); pick up where it stopped."
)
DEFAULT_MESSAGES: Mapping[str, str] = {
    "blank": _BLANK_TEXT,
    "truncated": "Continue exactly where you stopped; do not repeat what you already wrote.",
    "tool_as_text": (
        "Your last tool call was written as plain text, so it did not run. "
        "Make that call again as a real tool call."
    ),
    "interruption": _INTERRUPTED_TEXT,
    "repetition_remind": (
        "You are repeating the same output. Stop repeating: change your wording or your "
        "approach, or say what is blocking you."
    ),
    "repetition_replan": (
        "You are still repeating yourself. Abandon the current plan, say briefly why it is not "
        "working, then make a new plan and continue with it."
    ),
    "stall": (
        "The previous response stalled with no progress and was stopped. "
        "Continue from where it stopped."
    ),
    "exhausted": "autoretry: retried {used} times, still failing ({group}) — waiting for you.",
    "quota": "Continue. The usage limit has reset; pick up where you stopped.",
    # Only a fallback: the todo guard sends ``[todos] message`` with the todos named.
    "unfinished_todos": (
        "If your last reply asked the user for a decision, an approval, a file or any other "
        "input, do not act: restate that question in one line and stop. Otherwise continue with "
        "the next unfinished todo, or say what blocks it."
    ),
    # Only a fallback: the goal guard sends the check's command, status and output (issue 22).
    "goal": (
        "The goal's check still fails. Carry on towards making it pass; if something outside "
        "your reach blocks it, say so in one line and stop."
    ),
}
#: A kind-specific key falls back to its family key, then to the built-in text.
_FAMILY: Mapping[str, str] = {
    Kind.THINK_ONLY.value: "blank",
    Kind.FORGED_LENGTH.value: "blank",
    Kind.DISCONNECT.value: "interruption",
    Kind.STREAM_TRUNCATED.value: "interruption",
    Kind.TIMEOUT.value: "interruption",
    Kind.RATE_LIMIT.value: "interruption",
    Kind.SERVER_ERROR.value: "interruption",
    Kind.SILENT.value: "interruption",
    Kind.RUNAWAY.value: "interruption",
}
MESSAGE_KEYS: frozenset[str] = frozenset({*DEFAULT_MESSAGES, *_FAMILY})


@dataclass(frozen=True)
class Policy:
    """Validated retry policy; ``load_policy({})`` gives the seed's defaults."""

    budgets: Mapping[BudgetGroup, GroupBudget] = field(
        default_factory=lambda: dict(DEFAULT_BUDGETS)
    )
    interruption_cap: int = DEFAULT_INTERRUPTION_CAP
    providers: Mapping[str, Mapping[BudgetGroup, GroupBudget]] = field(default_factory=dict)
    provider_caps: Mapping[str, int] = field(default_factory=dict)
    messages: Mapping[str, str] = field(default_factory=dict)  # overrides only

    def budget_for(self, group: BudgetGroup, provider_id: str | None = None) -> GroupBudget:
        override = self.providers.get(provider_id or "", {})
        return override.get(group) or self.budgets.get(group) or DEFAULT_BUDGETS[group]

    def cap_for(self, provider_id: str | None = None) -> int:
        return self.provider_caps.get(provider_id or "", self.interruption_cap)

    def text(self, key: str) -> str:
        """The configured text for ``key`` (a kind or message key), following its family."""
        for candidate in (key, _FAMILY.get(key)):
            if candidate and candidate in self.messages:
                return self.messages[candidate]
        for candidate in (key, _FAMILY.get(key)):
            if candidate and candidate in DEFAULT_MESSAGES:
                return DEFAULT_MESSAGES[candidate]
        raise KeyError(key)


def fill(template: str, **values: object) -> str:
    """Replace ``{name}`` placeholders we know; leave any other braces in user text alone."""
    text = template
    for name, value in values.items():
        text = text.replace("{" + name + "}", str(value))
    return text


# --- validation ----------------------------------------------------------------------------

_BUDGET_FIELDS = tuple(f.name for f in fields(GroupBudget))
_GROUP_KEYS = tuple(g.value for g in BudgetGroup)


def _table(value: object, path: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise PolicyError(f"{path} must be a table, got {type(value).__name__} {value!r}")
    return value


def _known_keys(table: Mapping[str, Any], allowed: tuple[str, ...], path: str) -> None:
    for key in table:
        if key not in allowed:
            choices = ", ".join(sorted(allowed))
            raise PolicyError(f"{path}: unknown key {key!r} (known: {choices})")


def _number(value: object, path: str) -> float:
    # TOML booleans are ints in Python; "true" seconds is a mistake, not 1 second.
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise PolicyError(f"{path} must be a number, got {type(value).__name__} {value!r}")
    if value != value:  # NaN
        raise PolicyError(f"{path} must be a number, got nan")
    return float(value)


def _count(value: object, path: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise PolicyError(f"{path} must be an integer, got {type(value).__name__} {value!r}")
    if not 0 <= value <= MAX_RETRIES_CEILING:
        raise PolicyError(f"{path} must be between 0 and {MAX_RETRIES_CEILING}, got {value}")
    return value


def _seconds(value: object, path: str) -> float:
    seconds = _number(value, path)
    if not 0 <= seconds <= MAX_DELAY_CEILING:
        raise PolicyError(f"{path} must be between 0 and {MAX_DELAY_CEILING:g} s, got {value}")
    return seconds


def _field_value(name: str, value: object, path: str) -> object:
    if name == "max_retries":
        return _count(value, path)
    if name == "jitter_ratio":
        ratio = _number(value, path)
        if not 0 <= ratio <= 1:
            raise PolicyError(f"{path} must be between 0 and 1, got {value}")
        return ratio
    if name == "deadline":
        seconds = _seconds(value, path)
        return seconds or None  # deadline = 0 switches an inherited deadline off
    return _seconds(value, path)


def _budget(raw: object, base: GroupBudget, path: str) -> GroupBudget:
    table = _table(raw, path)
    _known_keys(table, _BUDGET_FIELDS, path)
    changes = {name: _field_value(name, value, f"{path}.{name}") for name, value in table.items()}
    budget = replace(base, **changes)  # type: ignore[arg-type]
    if budget.max_delay < budget.initial_delay:
        raise PolicyError(
            f"{path}: max_delay ({budget.max_delay:g} s) is less than "
            f"initial_delay ({budget.initial_delay:g} s)"
        )
    return budget


def _cap(raw: object, path: str) -> int:
    table = _table(raw, path)
    _known_keys(table, ("max_retries",), path)
    if "max_retries" not in table:
        raise PolicyError(f"{path}: max_retries is required")
    return _count(table["max_retries"], f"{path}.max_retries")


def _budgets(
    raw: object, base: Mapping[BudgetGroup, GroupBudget], cap: int, path: str
) -> tuple[dict[BudgetGroup, GroupBudget], int]:
    table = _table(raw, path)
    _known_keys(table, (*_GROUP_KEYS, SHARED_CAP_KEY), path)
    budgets = dict(base)
    for key, value in table.items():
        if key == SHARED_CAP_KEY:
            cap = _cap(value, f"{path}.{key}")
        else:
            group = BudgetGroup(key)
            budgets[group] = _budget(value, base[group], f"{path}.{key}")
    return budgets, cap


def _providers(
    raw: object, base: Mapping[BudgetGroup, GroupBudget], cap: int
) -> tuple[dict[str, dict[BudgetGroup, GroupBudget]], dict[str, int]]:
    providers: dict[str, dict[BudgetGroup, GroupBudget]] = {}
    caps: dict[str, int] = {}
    for provider_id, entry in _table(raw, "providers").items():
        path = f"providers.{provider_id}"
        table = _table(entry, path)
        _known_keys(table, ("budgets",), path)
        budgets, provider_cap = _budgets(table.get("budgets", {}), base, cap, f"{path}.budgets")
        providers[str(provider_id)] = budgets
        caps[str(provider_id)] = provider_cap
    return providers, caps


def _messages(raw: object) -> dict[str, str]:
    table = _table(raw, "messages")
    _known_keys(table, tuple(MESSAGE_KEYS), "messages")
    messages: dict[str, str] = {}
    for key, value in table.items():
        path = f"messages.{key}"
        if not isinstance(value, str):
            raise PolicyError(f"{path} must be a string, got {type(value).__name__} {value!r}")
        if not value.strip():
            raise PolicyError(f"{path} must not be empty")
        if len(value) > MAX_MESSAGE_CHARS:
            raise PolicyError(f"{path} is longer than {MAX_MESSAGE_CHARS} characters")
        messages[key] = value
    return messages


def load_policy(raw: Mapping[str, Any]) -> Policy:
    """Validate ``Settings.policy`` (the raw TOML tables) into a Policy; raises PolicyError."""
    table = _table(raw, "config")
    _known_keys(table, ("budgets", "providers", "messages"), "config")
    budgets, cap = _budgets(
        table.get("budgets", {}), DEFAULT_BUDGETS, DEFAULT_INTERRUPTION_CAP, "budgets"
    )
    providers, caps = _providers(table.get("providers", {}), budgets, cap)
    return Policy(
        budgets=budgets,
        interruption_cap=cap,
        providers=providers,
        provider_caps=caps,
        messages=_messages(table.get("messages", {})),
    )
