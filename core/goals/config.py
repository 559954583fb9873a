"""``[goal]`` in config.toml (issue 22), validated by ``load_goal_config``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from opencode_autoretry.config.settings import SettingsError, checked_table
from opencode_autoretry.decisions.caps import Caps
from opencode_autoretry.decisions.policy import DEFAULT_BUDGETS, GroupBudget, Policy, PolicyError
from opencode_autoretry.models import BudgetGroup

#: What of a check's output is kept in memory (its tail); the continuation carries 2 KB of it.
OUTPUT_CAP_BYTES = 64 * 1024
EXCERPT_BYTES = 2048
MAX_COMMAND_CHARS = 2000


@dataclass(frozen=True)
class GoalConfig:
    timeout: float = 600.0  # seconds a check may run before its process group is killed
    max_continuations: int = 10  # goal continuations per user turn
    max_minutes: float = 120.0  # minutes from the user's message: the goal's own time cap

    def caps(self, caps: Caps) -> Caps:
        """The caps a goal turn runs under: ``[caps]`` and the goal's own time, whichever is
        lower (a goal always has one, even with ``[caps]`` off)."""
        minutes = caps.max_turn_minutes
        own = self.max_minutes if minutes is None else min(minutes, self.max_minutes)
        return replace(caps, max_turn_minutes=own)


_RANGES: Mapping[str, tuple[float, float]] = {
    "timeout": (1.0, 86400.0), "max_continuations": (0, 1000), "max_minutes": (1.0, 10080.0),
}


def load_goal_config(raw: object) -> GoalConfig:
    """Validate the raw ``[goal]`` table; a bad key or value raises SettingsError naming it."""
    values: dict[str, Any] = {}
    for key, value in checked_table(raw, "goal", _RANGES).items():
        low, high = _RANGES[key]
        whole = key == "max_continuations"
        kinds = int if whole else int | float
        if isinstance(value, bool) or not isinstance(value, kinds) or not low <= value <= high:
            what = "a whole number" if whole else "a number"
            raise SettingsError(f"goal.{key} must be {what} from {low:g} to {high:g}, "
                                f"got {value!r}")
        values[key] = value if whole else float(value)
    return replace(GoalConfig(), **values)


def with_goal_budget(policy: Policy, config: GoalConfig) -> Policy:
    """The policy whose ``goal`` group is ``max_continuations`` sends, at once (every
    provider: whether the check passes is not a provider's business)."""
    default = DEFAULT_BUDGETS[BudgetGroup.GOAL]
    tables = [("budgets", policy.budgets)] + [
        (f"providers.{pid}.budgets", groups) for pid, groups in policy.providers.items()
    ]
    for path, groups in tables:
        if groups.get(BudgetGroup.GOAL, default) != default:
            raise PolicyError(f"{path}.goal: set [goal] max_continuations instead")
    budget = GroupBudget(config.max_continuations)
    providers = {pid: {**groups, BudgetGroup.GOAL: budget}
                 for pid, groups in policy.providers.items()}
    return replace(policy, budgets={**policy.budgets, BudgetGroup.GOAL: budget},
                   providers=providers)
