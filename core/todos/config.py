"""``[todos]`` in config.toml (issue 9), validated by ``load_todo_config``; the verdict that
uses it is ``continuation``'s (apart, so that loading the config loads no todo judge)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from opencode_autoretry.config.settings import SettingsError
from opencode_autoretry.decisions.policy import DEFAULT_BUDGETS, GroupBudget, Policy, PolicyError
from opencode_autoretry.models import BudgetGroup

MAX_TEXT_CHARS = 2000

DEFAULT_MESSAGE = (
    "Your todo list still has {count} unfinished item(s):\n{todos}\n"
    "If your last reply asked the user for a decision, an approval, a file or any other input, "
    "do not act: restate that question in one line and stop. Otherwise carry on with the next "
    "item; if something blocks it, say what it is and stop."
)
DEFAULT_STAGNATION_NOTICE = (
    "autoretry: {count} todos still open, but the last {stagnation} continuations changed none "
    "of them — stopping; waiting for you."
)
DEFAULT_EXHAUSTED_NOTICE = (
    "autoretry: continued {used} times for unfinished todos — waiting for you."
)


@dataclass(frozen=True)
class TodoConfig:
    """``[todos]`` in config.toml, validated by ``load_todo_config``."""

    enabled: bool = False  # off by default: docs/todos.md, "How well it holds"
    max_continuations: int = 3
    stagnation: int = 2  # continuations in a row without a status change before giving up
    countdown: float = 5.0  # seconds between the toast and the send
    skip_agents: tuple[str, ...] = ("plan",)
    message: str = DEFAULT_MESSAGE
    stagnation_notice: str = DEFAULT_STAGNATION_NOTICE
    exhausted_notice: str = DEFAULT_EXHAUSTED_NOTICE


# --- config --------------------------------------------------------------------------------

_TEXT_KEYS = ("message", "stagnation_notice", "exhausted_notice")
_KEYS = ("enabled", "max_continuations", "stagnation", "countdown", "skip_agents", *_TEXT_KEYS)


def load_todo_config(raw: object) -> TodoConfig:
    """Validate the raw ``[todos]`` table; a bad key or value raises SettingsError naming it."""
    if not isinstance(raw, Mapping):
        raise SettingsError(f"todos must be a table, got {type(raw).__name__}")
    unknown = sorted(str(k) for k in raw if k not in _KEYS)
    if unknown:
        known = ", ".join(_KEYS)
        raise SettingsError(f"todos: unknown key(s) {', '.join(unknown)} (known: {known})")
    values: dict[str, Any] = {}
    for key, value in raw.items():
        values[key] = _value(str(key), value, f"todos.{key}")
    return replace(TodoConfig(), **values)


def _value(key: str, value: object, path: str) -> object:
    if key == "enabled":
        if not isinstance(value, bool):
            raise SettingsError(f"{path} must be true or false, got {value!r}")
        return value
    if key in ("max_continuations", "stagnation"):
        low = 0 if key == "max_continuations" else 1
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= 100:
            raise SettingsError(f"{path} must be an integer from {low} to 100, got {value!r}")
        return value
    if key == "countdown":
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 600:
            raise SettingsError(f"{path} must be a number of seconds from 0 to 600, got {value!r}")
        return float(value)
    if key == "skip_agents":
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise SettingsError(f"{path} must be a list of agent names, got {value!r}")
        return tuple(value)
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_TEXT_CHARS:
        raise SettingsError(f"{path} must be a non-empty string of at most {MAX_TEXT_CHARS} chars")
    return value


def with_todo_budget(policy: Policy, config: TodoConfig) -> Policy:
    """The policy whose ``todos`` group is ``max_continuations`` sends, each after the
    countdown (for every provider: the todo list is not a provider's business)."""
    default = DEFAULT_BUDGETS[BudgetGroup.TODOS]
    tables = [("budgets", policy.budgets)] + [
        (f"providers.{pid}.budgets", groups) for pid, groups in policy.providers.items()
    ]
    for path, groups in tables:
        if groups.get(BudgetGroup.TODOS, default) != default:
            raise PolicyError(f"{path}.todos: set [todos] max_continuations and countdown instead")
    budget = GroupBudget(config.max_continuations, config.countdown, config.countdown)
    providers = {
        pid: {**groups, BudgetGroup.TODOS: budget} for pid, groups in policy.providers.items()
    }
    budgets = {**policy.budgets, BudgetGroup.TODOS: budget}
    return replace(policy, budgets=budgets, providers=providers)
