"""PURE: ``[quota]`` — waiting out a provider's usage window instead of giving up (issue 23).

A root turn that ends on a usage limit (or a rate limit whose reset lies past the 5-minute clamp
of ordinary retries) with a known reset (``reset_time.quota_reset``) gets ONE continuation at
the reset plus a little jitter, decided by the budget core (``budget.decide``) and spent from
the ``quota`` budget group (``[budgets.quota] max_retries``, default 2 per user turn). A reset
further away than ``max_wait`` gives up and notifies instead.

    [quota]
    max_wait = 21600   # seconds; a longer wait gives up (gave_up) instead; 0 never waits
    jitter = 30        # seconds of random delay after the reset (plus a 1 s margin)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from opencode_autoretry.config.settings import ConfigError
from opencode_autoretry.decisions.error_kinds import usage_limited
from opencode_autoretry.models import Kind, Verdict

DEFAULT_MAX_WAIT_S = 21600.0
DEFAULT_JITTER_S = 30.0
MAX_WAIT_CEILING_S = 7 * 86400.0
MAX_JITTER_S = 3600.0
#: Past the reset the provider's clock and ours may differ by a second.
MARGIN_S = 1.0
#: A reset closer than this is no window to wait for: OpenCode's own retries already waited on
#: such hints (a 0.1 s Retry-After of a hard quota is noise, not a reset).
MIN_AHEAD = timedelta(seconds=5)
#: A rate limit is waited out only past the ordinary retries' 5-minute clamp
#: (``policy.HINT_MAX_SECONDS``); nearer, its ordinary backoff honours the hint.
RATE_LIMIT_MIN_AHEAD = timedelta(seconds=300)
_KEYS = ("max_wait", "jitter")


class QuotaError(ConfigError):
    """Bad ``[quota]`` table; names the key."""


@dataclass(frozen=True)
class QuotaConfig:
    max_wait: float = DEFAULT_MAX_WAIT_S
    jitter: float = DEFAULT_JITTER_S

    def due(self, reset: datetime, rand: float) -> datetime:
        """When to continue: the reset, a margin, and ``rand`` (0..1) of the jitter."""
        return reset + timedelta(seconds=MARGIN_S + rand * self.jitter)


def load_quota(raw: object) -> QuotaConfig:
    if not isinstance(raw, Mapping):
        raise QuotaError(f"quota must be a table, got {type(raw).__name__}")
    table: Mapping[str, Any] = raw
    for key in table:
        if key not in _KEYS:
            raise QuotaError(f"quota: unknown key {key!r} (known: {', '.join(_KEYS)})")
    max_wait = _seconds(table.get("max_wait", DEFAULT_MAX_WAIT_S), MAX_WAIT_CEILING_S,
                        "quota.max_wait")
    jitter = _seconds(table.get("jitter", DEFAULT_JITTER_S), MAX_JITTER_S, "quota.jitter")
    return QuotaConfig(max_wait=max_wait, jitter=jitter)


def _seconds(value: object, ceiling: float, path: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        raise QuotaError(f"{path} must be a number of seconds, got {type(value).__name__} "
                         f"{value!r}")
    if not 0 <= value <= ceiling:
        raise QuotaError(f"{path} must be between 0 and {ceiling:g} s, got {value}")
    return float(value)


def waits_for_reset(verdict: Verdict, now: datetime) -> bool:
    """The verdict is a usage window with a known reset beyond OpenCode's own retries: a hard
    usage limit (terminal), or a rate limit whose reset lies past the ordinary clamp."""
    reset, error = verdict.resets_at, verdict.error
    if reset is None or error is None:
        return False
    if verdict.kind is Kind.TERMINAL and usage_limited(error):
        return reset - now >= MIN_AHEAD
    return verdict.kind is Kind.RATE_LIMIT and reset - now > RATE_LIMIT_MIN_AHEAD
