"""The quota reset parser (pure): headers, words, zones, past times and garbage."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from opencode_autoretry.decisions.reset_time import quota_reset
from opencode_autoretry.models import ErrorInfo

NOW = datetime(2026, 12, 2, 12, 0, 0, tzinfo=UTC)
H, M, S = timedelta(hours=1), timedelta(minutes=1), timedelta(seconds=1)


def err(message: str = "", body: str | None = None, **headers: str) -> ErrorInfo:
    return ErrorInfo("APIError", message, 429, True,
                     response_headers={k.replace("_", "-"): v for k, v in headers.items()},
                     response_body=body)


AHEAD = [
    # headers
    (err(retry_after="20"), 20 * S),
    (err(retry_after_ms="1500"), timedelta(milliseconds=1500)),
    (err(**{"Retry-After": "Wed, 02 Dec 2026 14:05:00 GMT"}), 2 * H + 5 * M),
    (err(x_ratelimit_reset_requests="2h13m20s", x_ratelimit_remaining_requests="0"),
     2 * H + 13 * M + 20 * S),
    (err(x_ratelimit_reset_tokens="6m0s"), 6 * M),
    (err(x_ratelimit_reset_tokens="250ms"), timedelta(milliseconds=250)),
    (err(x_ratelimit_reset="1796220000"), datetime.fromtimestamp(1796220000, UTC) - NOW),
    (err(x_ratelimit_reset="90"), 90 * S),
    (err(anthropic_ratelimit_unified_reset="1796220000"),
     datetime.fromtimestamp(1796220000, UTC) - NOW),
    (err(anthropic_ratelimit_requests_reset="2026-12-02T13:00:00Z",
         anthropic_ratelimit_requests_remaining="0"), 1 * H),
    # the latest wins: a short retry-after beside a long window
    (err("usage limit reached, resets in 5 hours", retry_after_ms="100"), 5 * H),
    # words
    (err("Rate limited. Try again in 2h 13m."), 2 * H + 13 * M),
    (err("try again in 30 seconds"), 30 * S),
    (err("Please retry after 1.5 hours"), 90 * M),
    (err("Your limit resets in 3 days"), 72 * H),
    (err("You've hit your usage limit. Try again in 4 hours, 20 minutes and 5 seconds"),
     4 * H + 20 * M + 5 * S),
    (err("使用上限已达到，5小时后重置"), 5 * H),
    (err("额度已用完，2小时13分钟后重置"), 2 * H + 13 * M),
    (err("Usage limit reached for 5 hour. Your limit will reset at 2026-12-02 14:05:13"),
     2 * H + 5 * M + 13 * S),
    (err("resets at 2026-12-02T14:05:13Z"), 2 * H + 5 * M + 13 * S),
    (err("resets at 2026-12-02T14:05:13+02:00"), 5 * M + 13 * S),
    (err("将在 2026-12-02 15:00:00 重置"), 3 * H),
    (err("Claude usage limit reached. Your limit will reset at 3pm (America/Los_Angeles)."),
     datetime(2026, 12, 2, 15, tzinfo=ZoneInfo("America/Los_Angeles")) - NOW),
    (err("Your limit will reset at 3pm"), 3 * H),
    (err("limit resets at 3:30 PM UTC"), 3 * H + 30 * M),
    (err("limit resets at 13:15"), 1 * H + 15 * M),
    (err("limit resets at 11am"), 23 * H),  # already past today: tomorrow
    (err("limit resets at 12am"), 12 * H),  # midnight
    (err("reset at 14:00 UTC+8"), 18 * H),  # 06:00 UTC already past: tomorrow
    (err(body='{"error":{"type":"usage_limit_reached","resets_in_seconds":8000}}'), 8000 * S),
    (err(body='{"error":{"message":"limit","resets_at":1796220000}}'),
     datetime.fromtimestamp(1796220000, UTC) - NOW),
    (err(body='{"error":{"resetsAt":"2026-12-02T13:00:00Z"}}'), 1 * H),
]


@pytest.mark.parametrize(("error", "ahead"), AHEAD)
def test_reads_the_reset(error: ErrorInfo, ahead: timedelta) -> None:
    assert quota_reset(error, NOW) == NOW + ahead


NONE = [
    err(),
    err("Too many requests"),
    err("rate limit exceeded, please slow down"),
    err("resets at 2026-12-01 10:00:00"),  # in the past
    err(retry_after="Wed, 02 Dec 2026 10:00:00 GMT"),  # in the past
    err(anthropic_ratelimit_unified_reset="1000000000"),  # 2001
    err(x_ratelimit_reset="99999999999999999999"),  # garbage epoch
    err(retry_after="soon"),
    err(retry_after="nan"),
    err(x_ratelimit_reset_tokens="6m0s", x_ratelimit_remaining_tokens="1200"),  # not binding
    err("try again in a while"),
    err("reset at 5 attempts"),  # a count, not a clock time
    err("reset at 25:00"),
    err("reset at 13pm"),
    err("resets at 3pm (Mars/Olympus_Mons)"),  # unknown zone
    err("reset at 14:00 UTC+99"),
    err("try again in 400 days"),  # beyond believable
    err(body='{"resets_at":"not a time"}'),
    err(body="<html>5 hours</html>"),
]


@pytest.mark.parametrize("error", NONE)
def test_no_reset(error: ErrorInfo) -> None:
    assert quota_reset(error, NOW) is None


def test_a_time_without_zone_is_read_in_the_given_zone() -> None:
    berlin = ZoneInfo("Europe/Berlin")
    error = err("Your limit will reset at 2026-12-02 14:05:13")
    assert quota_reset(error, NOW, berlin) == datetime(2026, 12, 2, 14, 5, 13, tzinfo=berlin)
    assert quota_reset(err("resets at 3pm"), NOW, berlin) == datetime(
        2026, 12, 2, 15, tzinfo=berlin)
    plus8 = timezone(timedelta(hours=8))  # Beijing: 14:05 is 06:05 UTC, already past
    assert quota_reset(error, NOW, plus8) is None


def test_no_error_no_reset() -> None:
    assert quota_reset(None, NOW) is None


#: Crafted words that made the first patterns backtrack for minutes (found by timing them):
#: every repetition is bounded now, and only the first MAX_TEXT_CHARS of a text are read.
CRAFTED = [
    ("try again in " + "1h " * 5000, NOW + 6 * H),  # the first six amounts: bounded
    ("5小时" * 5000 + "后重置", NOW + 30 * H),
    ("resets in " + "1" * 10000 + "x", None),
    ("reset at " + " " * 20000 + "3", None),
    ('"resets_at": "' + "9" * 10000, None),
    ("reset at 2026-12-02 " + "1" * 20000, None),
    ("1 and " * 4000, None),
    ("retry after " * 2000, None),
]


@pytest.mark.parametrize(("text", "expected"), CRAFTED)
def test_crafted_words_end(text: str, expected: datetime | None) -> None:
    error = ErrorInfo("APIError", text, 429, True, response_body=text,
                      response_headers={"x-ratelimit-reset": "1" * 100_000})
    assert quota_reset(error, NOW) == expected


def test_only_the_start_of_a_long_body_is_read() -> None:
    from opencode_autoretry.decisions.reset_time import MAX_TEXT_CHARS

    late = " " * MAX_TEXT_CHARS + "try again in 2 hours"
    assert quota_reset(err(body=late), NOW) is None
    assert quota_reset(err(body="try again in 2 hours" + late), NOW) == NOW + 2 * H
