"""How long a provider asked us to wait before trying again (pure).

Sources, in order of trust: the ``retry-after-ms`` header, the ``retry-after`` header (seconds
or an HTTP date), then wording such as "try again in 30s" in the error message or body. The
order and the 100 ms floor follow OpenCode's and MiMo's retry code; unlike OpenCode we also cap
every hint at 5 minutes, because a continuation scheduled further out is better replaced by a
notification (the budget code decides that, with this hint as input).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from datetime import UTC, datetime

from opencode_autoretry.models import ErrorInfo

MIN_HINT_MS = 100
MAX_HINT_MS = 300_000

_NUMBER = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*$")

# "try again in 30s", "retry after 2 minutes", "retrying in 1.5 hours". Longer unit names come
# first so that "ms" is not read as "m" and "minutes" not as "m".
_TEXT_HINT = re.compile(
    r"(?:try again|retry(?:ing)?)\s+(?:in|after)\s+(\d+(?:\.\d+)?)\s*"
    r"(milliseconds?|ms|seconds?|secs?|s|minutes?|mins?|m|hours?|hrs?|h)\b",
    re.IGNORECASE,
)

_MS_PER_UNIT_INITIAL = {"s": 1000, "m": 60_000, "h": 3_600_000}


def retry_hint_ms(error: ErrorInfo, now: datetime) -> int | None:
    """The provider's requested wait in ms, clamped to 100 ms .. 5 min; None when it gave none."""
    headers = _lowercase_keys(error.response_headers)
    for raw in (
        _number(headers.get("retry-after-ms")),
        _retry_after_ms(headers.get("retry-after"), now),
        _text_hint_ms(error.message),
        _text_hint_ms(error.response_body),
    ):
        if raw is not None:
            return clamp_hint_ms(raw)
    return None


def clamp_hint_ms(raw: float) -> int:
    return int(max(MIN_HINT_MS, min(MAX_HINT_MS, raw)))


def _lowercase_keys(headers: Mapping[str, object]) -> dict[str, str]:
    # HTTP header names are case-insensitive; OpenCode stores whatever the SDK handed it.
    return {str(key).lower(): str(value) for key, value in headers.items()}


def _number(raw: str | None) -> float | None:
    if raw is None:
        return None
    match = _NUMBER.match(raw)
    if match is None:
        return None
    value = float(match.group(1))
    return value if math.isfinite(value) else MAX_HINT_MS


def _retry_after_ms(raw: str | None, now: datetime) -> float | None:
    """``Retry-After`` is either delta-seconds or an HTTP date; dates in the past are ignored."""
    seconds = _number(raw)
    if seconds is not None:
        return seconds * 1000
    if raw is None or not raw.strip():
        return None
    from email.utils import parsedate_to_datetime  # HTTP dates only: the reports never parse

    try:
        when = parsedate_to_datetime(raw.strip())
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    delta_ms = (_as_utc(when) - _as_utc(now)).total_seconds() * 1000
    return delta_ms if delta_ms > 0 else None


def _as_utc(moment: datetime) -> datetime:
    # "-0000" dates parse as naive; a naive ``now`` would be a caller's slip, read both as UTC.
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _text_hint_ms(text: str | None) -> float | None:
    if not text:
        return None
    match = _TEXT_HINT.search(text)
    if match is None:
        return None
    amount = float(match.group(1))
    unit = match.group(2).lower()
    if unit.startswith(("ms", "milli")):
        return amount
    return amount * _MS_PER_UNIT_INITIAL[unit[0]]
