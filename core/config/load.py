"""The one configuration: config.toml, ``AUTORETRY_*`` and the flags, validated ONCE (issue 18).

``load_config`` resolves the settings (flags > env > file > defaults) and parses every table
into its typed, frozen dataclass; ``run``, ``exec``, ``doctor``, ``status`` and ``notify test``
all call it, so a key one of them refuses is refused by all of them, with the same line::

    ~/.config/opencode-autoretry/config.toml: notify.timeout must be between 0.1 and 60 s, got 99

Each table keeps its validator next to the code that uses it (``load_policy``, ``load_notify``,
``load_todo_config``, ``load_fallback``, ``load_penalties``, ``load_telemetry``,
``load_goal_config``, ``load_caps``); this module is the only caller.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from opencode_autoretry.config import paths
from opencode_autoretry.config.settings import (
    ConfigError,
    Settings,
    config_file_for,
    resolve,
)
from opencode_autoretry.decisions.caps import Caps, load_caps
from opencode_autoretry.decisions.fallback import FallbackChains, check_models, load_fallback
from opencode_autoretry.decisions.policy import Policy, load_policy
from opencode_autoretry.decisions.quota import QuotaConfig, load_quota
from opencode_autoretry.goals.config import GoalConfig, load_goal_config, with_goal_budget
from opencode_autoretry.notifications.config import NotifyConfig, load_notify
from opencode_autoretry.repetition.penalties import load_penalties
from opencode_autoretry.telemetry.config import TelemetryConfig, load_telemetry
from opencode_autoretry.todos.config import TodoConfig, load_todo_config, with_todo_budget

#: The exit status of every command for a bad configuration (a usage error, as click's).
EXIT_BAD_CONFIG = 2


@dataclass(frozen=True)
class Config:
    """Everything config.toml (and the environment and flags) says, validated.

    ``settings`` holds the top-level keys, ``[stall]`` and the paths; ``policy`` is the retry
    policy of ``[budgets]``, ``[providers]`` and ``[messages]`` with the ``todos`` group set from
    ``[todos]``; the rest are their tables."""

    settings: Settings = field(default_factory=Settings)
    policy: Policy = field(default_factory=Policy)
    todos: TodoConfig = field(default_factory=TodoConfig)
    notify: NotifyConfig = field(default_factory=NotifyConfig)
    fallback: FallbackChains = field(default_factory=FallbackChains)
    penalties: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    telemetry: TelemetryConfig = field(default_factory=TelemetryConfig)
    goal: GoalConfig = field(default_factory=GoalConfig)  # issue 22
    caps: Caps = field(default_factory=Caps)  # issue 22: spend caps per user turn
    quota: QuotaConfig = field(default_factory=QuotaConfig)  # [quota] (issue 23)


def parse_config(settings: Settings) -> Config:
    """The typed tables of resolved ``settings`` (pure: reads no file); raises ConfigError."""
    todos = load_todo_config(settings.todos)
    goal = load_goal_config(settings.goal)
    return Config(
        settings=settings,
        policy=with_goal_budget(with_todo_budget(load_policy(settings.policy), todos), goal),
        todos=todos,
        notify=load_notify(settings.notify),
        fallback=load_fallback(settings.fallback),
        penalties=load_penalties(settings.repetition),
        telemetry=load_telemetry(settings.telemetry),
        goal=goal,
        caps=load_caps(settings.caps),
        quota=load_quota(settings.quota),
    )


def load_config(
    flags: Mapping[str, object] | None = None,
    environ: Mapping[str, str] | None = None,
    config_path: Path | None = None,
    opencode_config_dir: Path | None = None,
) -> Config:
    """Resolve, parse and check the configuration; raises ConfigError with one line that
    names the file (or variable, or flag), the key path, what was found and what is expected.

    The check beyond the file: every ``[fallback]`` model must be one OpenCode's own config
    lists (when it lists that provider's models), read from ``opencode_config_dir``."""
    env = os.environ if environ is None else environ
    origin = str(config_file_for(env, config_path))
    settings = resolve(flags, env, config_path)  # its errors name their origin already
    try:
        config = parse_config(settings)
        check_models(config.fallback, env, opencode_config_dir or paths.opencode_config_dir())
    except ConfigError as exc:
        raise ConfigError(f"{origin}: {exc}") from exc
    return config

