"""README's configuration reference is the Config's (issue 18): every key the Config accepts is
listed there with its default, and README lists no key the Config refuses."""

from __future__ import annotations

import json
import re
from dataclasses import fields
from pathlib import Path

from opencode_autoretry.config.settings import STALL_KEYS, Settings
from opencode_autoretry.decisions.policy import (
    DEFAULT_INTERRUPTION_CAP,
    MESSAGE_KEYS,
    SHARED_CAP_KEY,
    GroupBudget,
)
from opencode_autoretry.decisions.quota import QuotaConfig
from opencode_autoretry.models import BudgetGroup
from opencode_autoretry.notifications.config import EVENTS, NotifyConfig
from opencode_autoretry.repetition.penalties import PENALTY_RANGES
from opencode_autoretry.todos.continuation import TodoConfig

README = Path(__file__).resolve().parent.parent / "README.md"
RAW_TABLES = {"policy", "repetition", "todos", "notify", "fallback", "quota"}
TEXTS = {"message", "stagnation_notice", "exhausted_notice"}


def section() -> str:
    text = README.read_text()
    start = text.index("\n## Configuration\n")
    return text[start:text.index("\n## ", start + 1)]


def documented() -> dict[str, str]:
    """Key -> its default cell, from every table row of the section."""
    rows: dict[str, str] = {}
    for line in section().splitlines():
        if line.startswith("| `"):
            cells = [c.strip() for c in line.strip("|").split(" | ")]
            for key in re.findall(r"`([^`]+)`", cells[0]):
                rows[key] = cells[1]
    return rows


def shown(value: object) -> str | None:
    """How README writes a default, None where it is a description (a path, a text)."""
    if isinstance(value, bool):
        return "`true`" if value else "`false`"
    if isinstance(value, int | float):
        return f"`{value:g}`"
    if isinstance(value, tuple | frozenset):
        ordered = [e for e in EVENTS if e in value] if isinstance(value, frozenset) else value
        return f"`{json.dumps(list(ordered))}`"
    if isinstance(value, str) and len(value) < 10:
        return f'`"{value}"`'
    return None


def accepted() -> dict[str, str | None]:
    """Every key path the Config accepts -> its default as README shows it (None: any)."""
    keys: dict[str, str | None] = {}
    defaults = Settings()
    for f in fields(Settings):
        if f.name not in RAW_TABLES and f.name not in STALL_KEYS.values():
            value = getattr(defaults, f.name)
            keys[f.name] = None if isinstance(value, Path) else shown(value)
    for key, name in STALL_KEYS.items():
        keys[f"stall.{key}"] = shown(getattr(defaults, name))
    for prefix in ("budgets", "providers.<provider>.budgets"):
        keys[f"{prefix}.{SHARED_CAP_KEY}.max_retries"] = (
            shown(DEFAULT_INTERRUPTION_CAP) if prefix == "budgets" else None)
        for f in fields(GroupBudget):
            keys[f"{prefix}.<group>.{f.name}"] = (
                "`0`" if prefix == "budgets" and f.name == "jitter_ratio" else None)
    keys.update({f"messages.{key}": None for key in MESSAGE_KEYS})
    keys.update({f"repetition.penalties.<provider>.{key}": None for key in PENALTY_RANGES})
    todos, notify = TodoConfig(), NotifyConfig()
    for f in fields(TodoConfig):
        keys[f"todos.{f.name}"] = None if f.name in TEXTS else shown(getattr(todos, f.name))
    for f in fields(NotifyConfig):
        keys[f"notify.{f.name}"] = shown(getattr(notify, f.name))
    keys.update({'fallback."<provider/model>"': None, 'fallback."*"': None})
    quota = QuotaConfig()
    keys.update({f"quota.{f.name}": shown(getattr(quota, f.name)) for f in fields(QuotaConfig)})
    return keys


def test_every_key_the_config_accepts_is_in_the_readme_with_its_default() -> None:
    rows = documented()
    missing = sorted(set(accepted()) - set(rows))
    assert missing == [], f"not in README's Configuration section: {missing}"
    wrong = {key: (rows[key], default) for key, default in accepted().items()
             if default is not None and default not in rows[key]}
    assert wrong == {}, "README default differs (README, Config): " + repr(wrong)
    assert all(rows[key] for key in accepted()), "a key without a default"


def test_the_readme_names_no_key_the_config_does_not_accept() -> None:
    extra = sorted(set(documented()) - set(accepted()))
    assert extra == [], f"README documents keys the Config refuses: {extra}"


def test_every_budget_group_is_named() -> None:
    groups = {g.value for g in BudgetGroup} - {"todos"}  # [todos] sets that one
    row = next(line for line in section().splitlines() if "`budgets.<group>.max_retries`" in line)
    assert {g for g in groups if f"`{g}`" in row} == groups
