"""PURE: when a provider's usage or rate limit resets, read from an OpenCode error.

A usage window (a subscription's 5-hour limit, a coding plan's quota) says when it resets in a
header or in its words. Sources, all read, the latest future one wins (continuing before the
window reopens only fails again):

- headers OpenCode keeps in ``error.data.responseHeaders``: ``retry-after-ms``, ``retry-after``
  (seconds or an HTTP date), ``x-ratelimit-reset-{requests,tokens}`` (OpenAI's ``6m0s``),
  ``x-ratelimit-reset`` (epoch or delta seconds), ``anthropic-ratelimit-*-reset`` (RFC 3339 or
  epoch seconds). A reset header whose own ``remaining`` header says something is left is not
  the limit that bound, and is skipped;
- the error's text and body: "try again in 2h 13m", "resets in 5 hours", "resets at 3pm
  (America/Los_Angeles)", "will reset at 2026-12-02 14:05:13", "5小时后重置", JSON fields such
  as ``"resets_in_seconds": 8000`` or ``"resets_at": 1764684000``.

A time without a zone is read in ``zone`` (the caller's choice; default ``now``'s zone); a time
of day already past today means tomorrow; an absolute time in the past, or garbage, is no reset.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping
from datetime import UTC, date, datetime, time, timedelta, timezone, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from opencode_autoretry.models import ErrorInfo

#: Nothing a provider says is believed beyond this (a typo'd epoch, a 2^31 ms clamp).
MAX_AHEAD = timedelta(days=31)

_UNIT_SECONDS: tuple[tuple[str, float], ...] = (
    ("ms", 0.001), ("milli", 0.001), ("d", 86400.0), ("h", 3600.0), ("小时", 3600.0),
    ("分", 60.0), ("秒", 1.0), ("天", 86400.0), ("m", 60.0), ("s", 1.0),
)
_UNIT = (r"(?:milliseconds?|ms|days?|d|hours?|hrs?|h|minutes?|mins?|m|seconds?|secs?|s"
         r"|小时|分钟|分|秒钟|秒|天)")
# Every repetition is bounded: the words come from a provider (a body can be a whole HTML page)
# and an unbounded pattern tried at every position backtracks for minutes on crafted text.
_NUM = r"\d{1,9}(?:\.\d{1,6})?"
_SP = r"[ \t]{0,3}"
_AMOUNT = rf"{_NUM}{_SP}{_UNIT}(?![a-z])"
_DURATION = rf"{_AMOUNT}(?:(?:{_SP},{_SP}|\s{{1,3}}and\s{{1,3}}|{_SP}){_AMOUNT}){{0,5}}"
_ONE_AMOUNT = re.compile(rf"({_NUM}){_SP}({_UNIT})(?![a-z])", re.IGNORECASE)
#: What is read of a message or body: a reset is said near the start, not in a page's tail.
MAX_TEXT_CHARS = 20_000
MAX_HEADER_CHARS = 200

# "try again in 2h 13m", "resets in 5 hours", "retry after 30 seconds", "available in 3 days"
_IN_TEXT = re.compile(
    rf"(?:try(?:ing)? again|retry(?:ing)?|resets?|reset(?:ting)?|available(?: again)?|"
    rf"refresh(?:es)?|renews?)\s{{1,3}}(?:in|after)\s{{1,3}}(?:about\s{{1,3}}|approximately\s{{1,3}}"
    rf"|~\s{{0,3}})?({_DURATION})",
    re.IGNORECASE,
)
# "5小时后重置", "2小时13分钟后重置", "30分钟后再试"
_CJK_TEXT = re.compile(rf"({_DURATION})\s{{0,3}}(?:之?后)\s{{0,3}}(?:重置|恢复|再试|重试)",
                       re.IGNORECASE)

_ZONE = (r"(?:\s{0,3}\(?\s{0,3}(?P<zone>(?:UTC|GMT)\s{0,3}[+-]\d{1,2}(?::?\d{2})?"
         r"|[+-]\d{2}:?\d{2}|Z|UTC|GMT"
         r"|[A-Za-z]{1,20}/[A-Za-z_]{1,30}(?:/[A-Za-z_]{1,30})?)\s{0,3}\)?)?")
_STAMP = (r"(?P<date>\d{4}-\d{2}-\d{2})[ T](?P<hms>\d{1,2}:\d{2}(?::\d{2}(?:\.\d{1,9})?)?)"
          + _ZONE)
_CLOCK = r"(?P<hour>\d{1,2})(?::(?P<minute>\d{2}))?\s{0,3}(?P<ampm>[ap]\.?m\.?)?" + _ZONE
_AT_LEAD = (r"(?:resets?|reset(?:ting)?|try(?:ing)? again|retry|available(?: again)?|"
            r"refresh(?:es)?|renews?)\s{1,3}(?:at|after|on|from)\s{1,3}")
# "will reset at 2026-12-02 14:05:13", "resets at 2026-12-02T14:05:13Z"
_AT_STAMP = re.compile(_AT_LEAD + _STAMP, re.IGNORECASE)
# "resets at 3pm", "reset at 15:00 (Europe/Berlin)", "try again at 3:30 PM UTC"
_AT_CLOCK = re.compile(_AT_LEAD + r"(?!\d{4}-)" + _CLOCK + r"(?![\d-])", re.IGNORECASE)
# "将在 2026-12-02 14:05:13 重置"
_CJK_STAMP = re.compile(_STAMP + r"\s{0,3}(?:之?后)?\s{0,3}(?:重置|恢复)", re.IGNORECASE)
# JSON fields in the body: "resets_in_seconds": 8000, "resets_at": 1764684000 or "…Z"
_JSON_IN = re.compile(r'"(?:resets?|reset)_?in_?(?:seconds|s)"\s{0,3}:\s{0,3}"?('
                      + _NUM + ")", re.IGNORECASE)
_JSON_AT = re.compile(r'"(?:resets?_?at|resetsAt|reset_?time|resetTime)"\s{0,3}:\s{0,3}"?'
                      r'([^",}\s]{1,40}(?: \d{1,2}:\d{2}(?::\d{2})?)?)', re.IGNORECASE)

_OPENAI_DURATION = re.compile(r"^\s*(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m(?!s))?"
                              r"(?:(\d+(?:\.\d+)?)s)?(?:(\d+(?:\.\d+)?)ms)?\s*$")
_NUMBER = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*$")
_RESET_HEADER = re.compile(r"^(?:x-ratelimit-reset(?:-(?P<x>[a-z0-9-]+))?|"
                           r"anthropic-ratelimit-(?P<a>[a-z0-9-]+)-reset)$")


def quota_reset(error: ErrorInfo | None, now: datetime, zone: tzinfo | None = None
                ) -> datetime | None:
    """The latest reset the error names that lies ahead of ``now``, or None."""
    if error is None:
        return None
    local = zone or now.tzinfo or UTC
    found = [t for t in (*_from_headers(error.response_headers, now),
                         *_from_text(error.message, now, local),
                         *_from_text(error.response_body, now, local))
             if t is not None and now < t <= now + MAX_AHEAD]
    return max(found) if found else None


# --- headers ---------------------------------------------------------------------------------


def _from_headers(raw: Mapping[str, object], now: datetime) -> Iterator[datetime | None]:
    headers = {str(k).lower(): str(v) for k, v in raw.items()
               if len(str(v)) <= MAX_HEADER_CHARS}
    ms = _number(headers.get("retry-after-ms"))
    if ms is not None:
        yield now + timedelta(milliseconds=ms)
    yield _retry_after(headers.get("retry-after"), now)
    for name, value in headers.items():
        match = _RESET_HEADER.match(name)
        if match is None or not _binds(headers, match):
            continue
        yield _reset_value(value, now)


def _binds(headers: Mapping[str, str], match: re.Match[str]) -> bool:
    """A reset header counts unless its ``remaining`` twin says some is left."""
    if match["a"] is not None:
        remaining = headers.get(f"anthropic-ratelimit-{match['a']}-remaining")
    else:
        suffix = f"-{match['x']}" if match["x"] else ""
        remaining = headers.get(f"x-ratelimit-remaining{suffix}")
    number = _number(remaining)
    return number is None or number <= 0


def _retry_after(raw: str | None, now: datetime) -> datetime | None:
    seconds = _number(raw)
    if seconds is not None:
        return now + timedelta(seconds=seconds)
    if raw is None or not raw.strip():
        return None
    from email.utils import parsedate_to_datetime  # HTTP dates only: most headers are seconds

    try:
        when = parsedate_to_datetime(raw.strip())
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


def _reset_value(raw: str, now: datetime) -> datetime | None:
    """``6m0s`` (OpenAI), epoch seconds or ms, delta seconds, or an RFC 3339 time."""
    number = _number(raw)
    if number is not None:
        return _epoch_or_delta(number, now)
    duration = _openai_duration(raw)
    if duration is not None:
        return now + duration
    return _iso(raw.strip(), UTC)


def _epoch_or_delta(number: float, now: datetime) -> datetime | None:
    if number >= 1e12:  # epoch milliseconds
        return _from_epoch(number / 1000)
    if number >= 1e9:  # epoch seconds
        return _from_epoch(number)
    return now + timedelta(seconds=number)


def _from_epoch(seconds: float) -> datetime | None:
    try:
        return datetime.fromtimestamp(seconds, tz=UTC)
    except (OverflowError, OSError, ValueError):
        return None


def _openai_duration(raw: str) -> timedelta | None:
    match = _OPENAI_DURATION.match(raw)
    if match is None or not any(match.groups()):
        return None
    hours, minutes, seconds, millis = (float(g) if g else 0.0 for g in match.groups())
    return timedelta(hours=hours, minutes=minutes, seconds=seconds, milliseconds=millis)


def _number(raw: str | None) -> float | None:
    if raw is None:
        return None
    match = _NUMBER.match(raw)
    if match is None:
        return None
    value = float(match.group(1))
    return value if math.isfinite(value) else None


# --- words -----------------------------------------------------------------------------------


def _from_text(text: str | None, now: datetime, zone: tzinfo) -> Iterator[datetime | None]:
    if not text:
        return
    text = text[:MAX_TEXT_CHARS]
    for pattern in (_IN_TEXT, _CJK_TEXT):
        for match in pattern.finditer(text):
            duration = _duration(match.group(1))
            yield now + duration if duration is not None else None
    for pattern in (_AT_STAMP, _CJK_STAMP):
        for match in pattern.finditer(text):
            yield _stamp(match, zone)
    for match in _AT_CLOCK.finditer(text):
        yield _clock(match, now, zone)
    for match in _JSON_IN.finditer(text):
        yield now + timedelta(seconds=float(match.group(1)))
    for match in _JSON_AT.finditer(text):
        yield _json_at(match.group(1), now, zone)


def _duration(text: str) -> timedelta | None:
    total = 0.0
    for amount, unit in _ONE_AMOUNT.findall(text):
        total += float(amount) * _unit_seconds(unit.lower())
    return timedelta(seconds=total) if total > 0 and math.isfinite(total) else None


def _unit_seconds(unit: str) -> float:
    for prefix, seconds in _UNIT_SECONDS:
        if unit.startswith(prefix):
            return seconds
    return 0.0


def _zone(name: str | None, default: tzinfo) -> tzinfo | None:
    """A zone as providers write it; None for one we cannot read (then no reset)."""
    if not name:
        return default
    name = name.strip()
    if name.upper() in ("Z", "UTC", "GMT"):
        return UTC
    offset = re.fullmatch(r"(?:UTC|GMT)?\s*([+-])(\d{1,2}):?(\d{2})?", name, re.IGNORECASE)
    if offset is not None:
        sign = 1 if offset.group(1) == "+" else -1
        delta = timedelta(hours=int(offset.group(2)), minutes=int(offset.group(3) or 0))
        if delta >= timedelta(hours=24):
            return None
        return timezone(sign * delta)
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return None


def _stamp(match: re.Match[str], default: tzinfo) -> datetime | None:
    zone = _zone(match["zone"], default)
    if zone is None:
        return None
    return _iso(f"{match['date']}T{match['hms']}", zone)


def _iso(text: str, default: tzinfo) -> datetime | None:
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return when if when.tzinfo is not None else when.replace(tzinfo=default)


def _clock(match: re.Match[str], now: datetime, default: tzinfo) -> datetime | None:
    """A time of day: today in its zone, or tomorrow when that is already past."""
    zone = _zone(match["zone"], default)
    hour, minute = int(match["hour"]), int(match["minute"] or 0)
    ampm = (match["ampm"] or "").replace(".", "").lower()
    if zone is None or minute > 59 or (not ampm and match["minute"] is None):
        return None  # "reset at 5" is a count, not a time; "at 3pm" and "at 15:00" are times
    if ampm:
        if not 1 <= hour <= 12:
            return None
        hour = hour % 12 + (12 if ampm == "pm" else 0)
    if hour > 23:
        return None
    today: date = now.astimezone(zone).date()
    when = datetime.combine(today, time(hour, minute), tzinfo=zone)
    return when if when > now else when + timedelta(days=1)


def _json_at(raw: str, now: datetime, zone: tzinfo) -> datetime | None:
    number = _number(raw)
    if number is not None:
        return _from_epoch(number / 1000 if number >= 1e12 else number) if number >= 1e9 else None
    return _iso(raw.replace(" ", "T", 1), zone)
