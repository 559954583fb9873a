"""README's configuration reference is the Config's (issues 18 and 24).

README holds ONE annotated ``config.toml`` (the TOML block after ``<!-- config-reference -->``).
Its uncommented lines set keys to their defaults; a line ``# key = value`` (or ``# [table]``) is
a key with no default, or an example. Checked here against the one configuration object:

- the uncommented block parses to exactly the default ``Config``: every value shown is the true
  default;
- the block with every ``# key = value`` line uncommented is accepted as a whole: no key the
  code refuses, no bad example;
- the keys of that block are exactly the keys the code accepts, read from the code (the fields
  of ``Settings`` and of each table's dataclass, the policy's groups and message keys, ...). A
  key added to the code without a line here fails; so does a new table of ``Config`` or a new
  raw table of ``Settings`` until ``KEYS_OF`` below knows how to list its keys.

A new table is a few lines: its keys in README's block and one entry in ``KEYS_OF``.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import fields, is_dataclass, replace
from pathlib import Path
from typing import Any

from opencode_autoretry.config.load import Config, parse_config
from opencode_autoretry.config.settings import STALL_KEYS, STALL_TABLE, Settings, resolve
from opencode_autoretry.decisions.caps import Caps
from opencode_autoretry.decisions.policy import (
    DEFAULT_MESSAGES,
    MESSAGE_KEYS,
    SHARED_CAP_KEY,
    GroupBudget,
    Policy,
)
from opencode_autoretry.decisions.quota import QuotaConfig
from opencode_autoretry.goals.config import GoalConfig
from opencode_autoretry.models import BudgetGroup
from opencode_autoretry.notifications.config import NotifyConfig
from opencode_autoretry.repetition.penalties import PENALTY_RANGES
from opencode_autoretry.telemetry.config import TelemetryConfig
from opencode_autoretry.todos.config import TodoConfig

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
#: Where "…" points: the built-in texts, and the [todos] texts with their defaults.
BUILT_IN_TEXTS = ROOT / "docs" / "how-it-decides.md"
TODOS_PAGE = ROOT / "docs" / "todos.md"
MARKER = "<!-- config-reference -->"
#: A commented-out key or table header (prose comments never start with ``word = `` or ``[``).
COMMENTED = re.compile(r'^# ?(\[[^\]]+\](?:\s+#.*)?|[A-Za-z0-9_"*./-]+ = .+)$')
HEADER = re.compile(r"^\[([^\]]+)\]")
#: Stands for a built-in text in a commented line (README: "…" stands for the built-in text).
BUILT_IN = "…"
#: ``[budgets.todos]`` is set by ``[todos]`` (max_continuations, countdown), ``[budgets.goal]``
#: by ``[goal]`` (max_continuations), not by hand.
DOCUMENTED_GROUPS = tuple(g.value for g in BudgetGroup
                          if g not in (BudgetGroup.TODOS, BudgetGroup.GOAL))


def reference() -> str:
    """The annotated config.toml in README."""
    text = README.read_text(encoding="utf-8")
    assert text.count(MARKER) == 1, f"README needs exactly one {MARKER} before its config.toml"
    after = text.split(MARKER, 1)[1]
    match = re.match(r"\s*```toml\n(.*?)\n```", after, re.S)
    assert match, f"no ```toml block right after {MARKER} in README"
    return match.group(1)


def uncommented(block: str) -> str:
    """The block with every commented-out key and table header made live."""
    return "\n".join(m.group(1) if (m := COMMENTED.match(line)) else line
                     for line in block.splitlines())


def commented_keys(block: str) -> dict[str, str]:
    """Key path -> its raw TOML value, for each ``# key = value`` line (under its table)."""
    keys: dict[str, str] = {}
    table = ""
    for line in block.splitlines():
        live = COMMENTED.match(line)
        text = live.group(1) if live else line.split("#", 1)[0].strip()
        if header := HEADER.match(text):
            table = header.group(1).strip()
        elif live and " = " in text:
            key, _, value = text.partition(" = ")
            value = value.split("  #", 1)[0].strip()
            keys[f"{table}.{key}" if table else key] = value
    return keys


def flatten(table: Mapping[str, Any], prefix: str = "") -> set[str]:
    keys: set[str] = set()
    for key, value in table.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping):
            keys |= flatten(value, f"{path}.")
        else:
            keys.add(path)
    return keys


def generic(path: str) -> str:
    """A key path with its free names (provider ids, models) replaced by placeholders."""
    parts = path.split(".")
    if parts[0] == "providers" and len(parts) > 2:
        return "providers.<provider>.budgets"  # the same keys as [budgets], tested there
    if parts[:2] == ["repetition", "penalties"] and len(parts) == 4:
        return f"repetition.penalties.<provider>.{parts[3]}"
    if parts[0] == "fallback":
        return "fallback.<model>"
    return path


# --- the keys the code accepts, table by table ----------------------------------------------


def raw_tables() -> set[str]:
    """Settings fields that hold a raw table (validated into one of Config's tables)."""
    defaults = Settings()
    return {f.name for f in fields(Settings) if isinstance(getattr(defaults, f.name), Mapping)}


def settings_keys() -> set[str]:
    """The top-level keys and ``[stall]``: every Settings field that is not a raw table."""
    inner = raw_tables() | set(STALL_KEYS.values())
    return ({f.name for f in fields(Settings) if f.name not in inner}
            | {f"{STALL_TABLE}.{key}" for key in STALL_KEYS})


def policy_keys() -> set[str]:
    """``[budgets]``, ``[providers.<id>.budgets]`` and ``[messages]``."""
    budget = {f"budgets.{group}.{f.name}" for group in DOCUMENTED_GROUPS
              for f in fields(GroupBudget)}
    return (budget | {f"budgets.{SHARED_CAP_KEY}.max_retries", "providers.<provider>.budgets"}
            | {f"messages.{key}" for key in MESSAGE_KEYS})


def dataclass_keys(table: str, cls: type) -> Callable[[], set[str]]:
    """A table whose TOML keys are its dataclass's fields (``[todos]``, ``[notify]``, ...)."""
    assert is_dataclass(cls)
    return lambda: {f"{table}.{f.name}" for f in fields(cls)}


#: Config field -> the key paths it accepts. A new table of Config needs an entry here.
KEYS_OF: Mapping[str, Callable[[], set[str]]] = {
    "settings": settings_keys,
    "policy": policy_keys,
    "todos": dataclass_keys("todos", TodoConfig),
    "notify": dataclass_keys("notify", NotifyConfig),
    "fallback": lambda: {"fallback.<model>"},
    "penalties": lambda: {f"repetition.penalties.<provider>.{key}" for key in PENALTY_RANGES},
    "telemetry": dataclass_keys("telemetry", TelemetryConfig),
    "goal": dataclass_keys("goal", GoalConfig),  # issue 22
    "caps": dataclass_keys("caps", Caps),
    "quota": dataclass_keys("quota", QuotaConfig),  # issue 23
}
#: Settings' raw tables, each validated into one of Config's tables (listed by KEYS_OF).
RAW_TABLES = {"policy", "repetition", "todos", "notify", "fallback", "telemetry", "goal", "caps",
              "quota"}


def accepted() -> set[str]:
    return set().union(*(keys() for keys in KEYS_OF.values()))


def config_from(text: str, tmp_path: Path) -> Config:
    """The Config a config.toml with ``text`` gives (no AUTORETRY_* variable, no flag)."""
    path = tmp_path / "config.toml"
    path.write_text(text, encoding="utf-8")
    return parse_config(resolve(environ={}, config_path=path))


def without_raw_tables(config: Config) -> Config:
    """The Config without Settings' raw copies of the tables (their parsed forms stay)."""
    return replace(config, settings=replace(config.settings, **{
        name: {} for name in raw_tables()}))


# --- tests ---------------------------------------------------------------------------------


def test_every_table_of_the_config_is_listed_here() -> None:
    tables = {f.name for f in fields(Config)}
    assert tables == set(KEYS_OF), (
        f"Config's tables {sorted(tables)} differ from this test's {sorted(KEYS_OF)}: document "
        "the new table's keys in README's config.toml and list them in KEYS_OF")
    assert raw_tables() == RAW_TABLES, (
        f"Settings' raw tables {sorted(raw_tables())} differ from {sorted(RAW_TABLES)}: a new "
        "table needs its keys in README's config.toml and an entry in KEYS_OF")


def test_the_uncommented_values_are_the_defaults(tmp_path: Path) -> None:
    block = reference()
    live = tomllib.loads(block)
    assert live, "README's config.toml sets nothing"
    shown = without_raw_tables(config_from(block, tmp_path))
    default = without_raw_tables(config_from("", tmp_path))
    differ = [f.name for f in fields(Config) if getattr(shown, f.name) != getattr(default, f.name)]
    assert differ == [], f"README's config.toml sets a value that is not the default in {differ}"
    # The values are there, not only equal by omission: each uncommented key is set.
    assert "stall_timeout" in live and live["budgets"]["length"]["max_retries"] == 3


def test_every_commented_line_is_accepted(tmp_path: Path) -> None:
    text = uncommented(reference())
    config = config_from(text, tmp_path)
    assert config.notify.webhook and config.fallback, "the examples were not read"
    assert config.caps.any, "the [caps] examples were not read"
    assert config.penalties and config.policy.providers


def test_the_reference_lists_exactly_the_keys_the_code_accepts() -> None:
    documented = {generic(key) for key in flatten(tomllib.loads(uncommented(reference())))}
    missing = sorted(accepted() - documented)
    assert missing == [], f"keys the code accepts, missing from README's config.toml: {missing}"
    extra = sorted(documented - accepted())
    assert extra == [], f"keys in README's config.toml the code does not accept: {extra}"


def test_a_commented_text_is_the_built_in_one_or_stands_for_it() -> None:
    """``# blank = "Continue."`` must be the real default text, or ``"…"``."""
    policy, todos = Policy(), TodoConfig()
    texts = {**{f"messages.{key}": policy.text(key) for key in MESSAGE_KEYS},
             **{f"todos.{f.name}": getattr(todos, f.name) for f in fields(TodoConfig)
                if isinstance(getattr(todos, f.name), str)}}
    commented = commented_keys(reference())
    shown = {key: tomllib.loads(f"v = {value}")["v"]
             for key, value in commented.items() if key in texts}
    assert {f"messages.{key}" for key in MESSAGE_KEYS} <= set(shown), "a message is not listed"
    wrong = {key: value for key, value in shown.items() if value not in (BUILT_IN, texts[key])}
    assert wrong == {}, f"README shows a text that is not the built-in one: {wrong}"


def test_the_built_in_texts_are_where_the_reference_points() -> None:
    """README's "…" stands for a text docs/ shows word for word: [messages] in
    how-it-decides.md, [todos] in todos.md (its config.toml example)."""
    page = BUILT_IN_TEXTS.read_text(encoding="utf-8")
    missing = [key for key, text in DEFAULT_MESSAGES.items() if f'- `{key}`: "{text}"' not in page]
    assert missing == [], f"built-in texts not shown in {BUILT_IN_TEXTS.name}: {missing}"
    blocks = re.findall(r"```toml\n(.*?)```", TODOS_PAGE.read_text(encoding="utf-8"), re.S)
    shown = next(tomllib.loads(b)["todos"] for b in blocks if "[todos]" in b)
    defaults = TodoConfig()
    texts = [f.name for f in fields(TodoConfig) if isinstance(getattr(defaults, f.name), str)]
    assert texts and {key: shown.get(key) for key in texts} == {
        key: getattr(defaults, key) for key in texts}


def test_every_budget_group_is_in_the_reference() -> None:
    budgets = tomllib.loads(reference())["budgets"]
    assert set(budgets) == {*DOCUMENTED_GROUPS, SHARED_CAP_KEY}


def test_the_check_finds_a_missing_and_an_unknown_key() -> None:
    """The check itself: a misspelt key is both missing (the real one) and unknown."""
    block = reference().replace("\nverbose = false", "\nverbos = false", 1)
    documented = {generic(key) for key in flatten(tomllib.loads(uncommented(block)))}
    assert "verbose" in accepted() - documented
    assert "verbos" in documented - accepted()
