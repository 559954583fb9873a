"""retry_hint_ms: headers, HTTP dates, wording, clamping (MiMo M2-M7 for the hint half)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from opencode_autoretry.decisions.retry_hint import MAX_HINT_MS, MIN_HINT_MS, retry_hint_ms
from opencode_autoretry.models import ErrorInfo

NOW = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)


def error(
    headers: dict[str, str] | None = None, message: str = "", body: str | None = None
) -> ErrorInfo:
    return ErrorInfo("APIError", message, 429, True, response_headers=headers or {},
                     response_body=body)  # fmt: skip


HINT_CASES = [
    ("no hint", error(), None),
    ("M2 retry-after-ms", error({"retry-after-ms": "1500"}), 1500),
    ("retry-after-ms float", error({"retry-after-ms": "1500.7"}), 1500),
    ("M3 retry-after seconds", error({"retry-after": "30"}), 30_000),
    ("1.18 catalogue 429", error({"retry-after": "2"}), 2000),
    ("header case", error({"Retry-After": "2"}), 2000),
    ("header case ms", error({"RETRY-AFTER-MS": "250"}), 250),
    ("ms header wins", error({"retry-after": "30", "retry-after-ms": "700"}), 700),
    ("bad ms header falls back", error({"retry-after-ms": "soon", "retry-after": "3"}), 3000),
    ("M4 http date 20 s ahead", error({"retry-after": "Mon, 30 Nov 2026 12:00:20 GMT"}), 20_000),
    ("M5 garbage", error({"retry-after": "whenever"}), None),
    ("M6 past date", error({"retry-after": "Mon, 30 Nov 2026 11:59:00 GMT"}), None),
    ("date equal to now", error({"retry-after": "Mon, 30 Nov 2026 12:00:00 GMT"}), None),
    ("M7 50 s not capped at 30 s", error({"retry-after": "50"}), 50_000),
    ("M7 700 s capped at 5 min", error({"retry-after-ms": "700000"}), MAX_HINT_MS),
    ("M8 huge", error({"retry-after-ms": "9" * 400}), MAX_HINT_MS),
    ("zero clamps up", error({"retry-after": "0"}), MIN_HINT_MS),
    ("negative ignored", error({"retry-after": "-5"}), None),
    ("empty header", error({"retry-after": " "}), None),
    ("try again in 30s", error(message="Rate limited. Please try again in 30s."), 30_000),
    ("retry after 2 minutes", error(message="retry after 2 minutes"), 120_000),
    ("retrying in 1.5 hours", error(message="Retrying in 1.5 hours"), MAX_HINT_MS),
    ("try again in 250ms", error(message="try again in 250ms"), 250),
    ("milliseconds", error(message="try again in 40 milliseconds"), MIN_HINT_MS),
    ("seconds word", error(message="Try again in 7 seconds"), 7000),
    ("minute abbreviation", error(message="try again in 1 min"), 60_000),
    ("hint in body", error(body='{"error":{"message":"try again in 12s"}}'), 12_000),
    ("header beats text", error({"retry-after": "4"}, "try again in 30s"), 4000),
    ("garbage header, text hint", error({"retry-after": "x"}, "try again in 5s"), 5000),
    ("number without unit", error(message="try again in 5"), None),
    ("unrelated number", error(message="retry 3 of 5 failed"), None),
]  # fmt: skip


@pytest.mark.parametrize(("label", "err", "expected"), HINT_CASES, ids=[c[0] for c in HINT_CASES])
def test_retry_hint(label: str, err: ErrorInfo, expected: int | None) -> None:
    assert retry_hint_ms(err, NOW) == expected


def test_naive_http_date_is_read_as_utc() -> None:
    err = error({"retry-after": "Mon, 30 Nov 2026 12:00:10 -0000"})
    assert retry_hint_ms(err, NOW) == 10_000


def test_naive_now_is_read_as_utc() -> None:
    err = error({"retry-after": "Mon, 30 Nov 2026 12:00:10 GMT"})
    assert retry_hint_ms(err, NOW.replace(tzinfo=None)) == 10_000


header_values = st.one_of(
    st.text(max_size=40),
    st.integers(min_value=-(10**6), max_value=10**12).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(str),
    st.datetimes(timezones=st.just(UTC)).map(lambda d: d.strftime("%a, %d %b %Y %H:%M:%S GMT")),
)

text_hints = st.builds(
    "try again in {:f} {}".format, st.floats(0, 1e12), st.sampled_from(["ms", "s", "m", "h"])
)


@given(
    headers=st.dictionaries(
        st.sampled_from(["retry-after", "Retry-After", "retry-after-ms", "x-other"]), header_values
    ),
    message=st.text(max_size=80) | text_hints,
    body=st.none() | st.text(max_size=80),
)
def test_hint_never_raises_and_stays_in_range(
    headers: dict[str, str], message: str, body: str | None
) -> None:
    hint = retry_hint_ms(error(headers, message, body), NOW)
    assert hint is None or MIN_HINT_MS <= hint <= MAX_HINT_MS
