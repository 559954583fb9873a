"""PURE: spend caps per user turn (``[caps]``, issue 22) and what a turn has spent.

A user turn is its real user message and every continuation since (``Turn``: the assistant
steps of the message and of its followups). Its spend is read from OpenCode's own figures
on each assistant message (``cost`` in USD, ``tokens``) and from the clock (minutes since the
user's message). Once a turn has used more than a cap, nothing more is sent in it: the
decision path (``Judge.decide``) turns any send into one notice and closes every group.
Off by default; the model cannot raise a cap (only config.toml sets them).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

from opencode_autoretry.causes import Facts, spend_words
from opencode_autoretry.config.settings import SettingsError, checked_table
from opencode_autoretry.models import Turn

MAX_COST = 1_000_000.0
MAX_TOKENS = 10**12
MAX_MINUTES = 7 * 24 * 60.0


@dataclass(frozen=True)
class Caps:
    """``[caps]``: None is no cap."""

    max_turn_cost: float | None = None  # USD
    max_turn_tokens: int | None = None
    max_turn_minutes: float | None = None

    @property
    def any(self) -> bool:
        return any(v is not None for v in (self.max_turn_cost, self.max_turn_tokens,
                                           self.max_turn_minutes))


@dataclass(frozen=True)
class TurnSpend:
    cost_usd: float
    tokens: int
    minutes: float

    def facts(self) -> Facts:
        return Facts(cost_usd=round(self.cost_usd, 6), tokens=self.tokens,
                     minutes=round(self.minutes, 2))


def turn_spend(turn: Turn, now: datetime) -> TurnSpend:
    """What the user turn used so far: every assistant step of it (its own and those that
    answer its continuations), by OpenCode's per-message figures."""
    cost = sum(step.cost for step in turn.steps)
    tokens = sum(_tokens(step.tokens) for step in turn.steps)
    minutes = max(0.0, (now - turn.user.time_created).total_seconds() / 60.0)
    return TurnSpend(cost, tokens, minutes)


def _tokens(tokens: object) -> int:
    """OpenCode's ``total`` when it gives one, else the sum of its parts."""
    total = int(getattr(tokens, "total", 0) or 0)
    if total:
        return total
    return sum(int(getattr(tokens, name, 0) or 0) for name in (
        "input", "output", "reasoning", "cache_read", "cache_write"))


def over_cap(spend: TurnSpend, caps: Caps) -> str | None:
    """The first cap the spend is over ('max_turn_tokens = 1000'), or None."""
    if caps.max_turn_cost is not None and spend.cost_usd > caps.max_turn_cost:
        return f"max_turn_cost = {caps.max_turn_cost:g} USD"
    if caps.max_turn_tokens is not None and spend.tokens > caps.max_turn_tokens:
        return f"max_turn_tokens = {caps.max_turn_tokens}"
    if caps.max_turn_minutes is not None and spend.minutes > caps.max_turn_minutes:
        return f"max_turn_minutes = {caps.max_turn_minutes:g}"
    return None


def caps_line(spend: TurnSpend, caps: Caps) -> str:
    """'spend $0.0120 / $1, 1200 / 5000 tokens, 2.0 / 30 min' (no cap: '-')."""
    def of(value: object) -> str:
        return "-" if value is None else f"{value:g}" if isinstance(value, float) else str(value)
    return (f"spend ${spend.cost_usd:.4g} / {of(caps.max_turn_cost)}, {spend.tokens} / "
            f"{of(caps.max_turn_tokens)} tokens, {spend.minutes:.1f} / "
            f"{of(caps.max_turn_minutes)} min")


# --- config --------------------------------------------------------------------------------

_KEYS = {"max_turn_cost": MAX_COST, "max_turn_tokens": MAX_TOKENS,
         "max_turn_minutes": MAX_MINUTES}


def load_caps(raw: object) -> Caps:
    """Validate the raw ``[caps]`` table; a bad key or value raises SettingsError naming it."""
    values: dict[str, object] = {}
    for key, value in checked_table(raw, "caps", _KEYS).items():
        top = _KEYS[key]
        whole = key == "max_turn_tokens"
        kinds = int if whole else int | float
        if isinstance(value, bool) or not isinstance(value, kinds) or not 0 < value <= top:
            what = "a whole number" if whole else "a number"
            raise SettingsError(f"caps.{key} must be {what} above 0 and at most {top:g}, "
                                f"got {value!r}")
        values[key] = value if whole else float(value)
    return replace(Caps(), **values)  # type: ignore[arg-type]


def cap_notice(spend: TurnSpend, cap: str) -> str:
    """The toast and notification text once a turn is over a cap."""
    used = spend_words(spend.facts())
    return f"autoretry: {used} — over {cap}; sending nothing more in this turn, waiting for you."
