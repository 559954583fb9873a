"""Properties: classify never raises on arbitrary rows, and retryable always matches the kind."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from opencode_autoretry.decisions.classifier import RETRYABLE_KINDS, classify, classify_error
from opencode_autoretry.models import (
    ErrorInfo,
    Kind,
    LiveFacts,
    Message,
    Part,
    PartType,
    Role,
    Tokens,
    Turn,
)

T0 = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
NOW = datetime(2026, 11, 30, 12, 5, 0, tzinfo=UTC)
SES = "ses_prop"

# The brief's table, written out literally so that a change to RETRYABLE_KINDS shows up here.
EXPECTED_RETRYABLE = {
    Kind.BLANK, Kind.THINK_ONLY, Kind.FORGED_LENGTH, Kind.TRUNCATED, Kind.TOOL_AS_TEXT,
    Kind.DISCONNECT, Kind.STREAM_TRUNCATED, Kind.TIMEOUT, Kind.RATE_LIMIT, Kind.SERVER_ERROR,
    Kind.SILENT, Kind.RUNAWAY,
}  # fmt: skip
NEVER_RETRYABLE = {Kind.HEALTHY, Kind.RUNNING, Kind.TERMINAL, Kind.USER_ABORT, Kind.ORPHAN}
FROM_OTHER_DETECTORS = {Kind.REPETITION, Kind.STALL, Kind.UNFINISHED_TODOS, Kind.SUBAGENT_STALL,
                        Kind.GOAL}

texts = st.one_of(
    st.text(max_size=30),
    st.sampled_from(
        ["", "  ", "answer", '<invoke name="x">', '{"type": "function"}', "<tool_call>"]
    ),
)
words = st.one_of(
    st.text(max_size=30),
    st.sampled_from(
        ["ECONNRESET", "fetch failed", "SSE read timed out", "rate limit", "overloaded",
         "JSON Parse error", "usage limit", "Agent not found", "server_error", "try again in 3s"]
    ),
)  # fmt: skip
error_names = st.one_of(
    st.text(max_size=20),
    st.sampled_from(
        ["APIError", "MessageAbortedError", "AbortError", "ProviderAuthError", "UnknownError",
         "ContextOverflowError", "OutputLengthError", "FreeUsageLimitError"]
    ),
)  # fmt: skip
errors = st.builds(
    ErrorInfo,
    name=error_names,
    message=words,
    status_code=st.none() | st.integers(-1, 1000),
    is_retryable=st.none() | st.booleans(),
    code=st.none() | words,
    response_headers=st.dictionaries(
        st.sampled_from(["retry-after", "Retry-After-Ms", "x"]), st.text(max_size=30), max_size=2
    ),
    response_body=st.none() | words,
)
parts = st.builds(
    lambda kind, text, flag, status, provider: Part(
        "", "", SES, kind, T0,
        {"text": text, "synthetic": flag, "state": {"status": status},
         "providerExecuted": provider},
    ),
    st.sampled_from(list(PartType)),
    texts,
    st.booleans(),
    st.sampled_from(["pending", "running", "completed", "error", "?", None]),
    st.booleans(),
)  # fmt: skip
finishes = st.one_of(
    st.none(),
    st.text(max_size=12),
    st.sampled_from(
        ["stop", "tool-calls", "length", "unknown", "other", "content-filter", "error", "end_turn",
         "max_tokens", "tool_use", "STOP"]
    ),
)  # fmt: skip
counts = st.integers(-5, 10**7)
steps = st.builds(
    lambda finish, out, inp, think, error, done, body: Message(
        "", SES, Role.ASSISTANT, T0, T0 if done else None, None, finish,
        Tokens(input=inp, output=out, reasoning=think), error, parts=tuple(body),
    ),
    finishes, counts, counts, counts, st.none() | errors, st.booleans(),
    st.lists(parts, max_size=4),
)  # fmt: skip
# Runaway needs long runs of one exact shape, which random steps almost never produce.
empty_unknown = st.just(Message("", SES, Role.ASSISTANT, T0, T0, None, "unknown"))
followups = st.builds(lambda: Message("", SES, Role.USER, T0))
lives = st.none() | st.builds(
    LiveFacts,
    busy=st.booleans(),
    retrying=st.booleans(),
    permission_pending=st.booleans(),
    question_pending=st.booleans(),
    child_busy=st.booleans(),
)


def place(messages: list[Message]) -> Turn:
    user = Message("msg_0000", SES, Role.USER, T0)
    placed = [
        replace(m, id=f"msg_{i:04d}", time_created=T0 + timedelta(seconds=i))
        for i, m in enumerate(messages, start=1)
    ]
    return Turn(
        SES,
        user,
        tuple(m for m in placed if m.role is Role.ASSISTANT),
        tuple(m for m in placed if m.role is Role.USER),
    )


@settings(max_examples=400)
@given(
    messages=st.lists(st.one_of(steps, steps, empty_unknown, followups), max_size=10),
    live=lives,
    runaway_steps=st.integers(-1, 8),
)
def test_classify_never_raises_and_retryable_matches_kind(
    messages: list[Message], live: LiveFacts | None, runaway_steps: int
) -> None:
    t = place(messages)
    verdict = classify(t, live, now=NOW, runaway_steps=runaway_steps)
    assert verdict.kind not in FROM_OTHER_DETECTORS
    assert verdict.retryable is (verdict.kind in EXPECTED_RETRYABLE)
    assert verdict.reason.strip()
    assert verdict.message_id == (t.last_step.id if t.last_step else None)
    assert verdict.retry_after_ms is None or 100 <= verdict.retry_after_ms <= 300_000
    if live is not None and (live.busy or live.retrying):
        assert verdict.kind in (Kind.RUNNING, Kind.RUNAWAY)


@given(error=errors)
def test_classify_error_never_raises_and_never_names_a_step_kind(error: ErrorInfo) -> None:
    kind, reason = classify_error(error)
    step_only = {Kind.HEALTHY, Kind.RUNNING, Kind.BLANK, Kind.THINK_ONLY, Kind.FORGED_LENGTH,
                 Kind.TOOL_AS_TEXT, Kind.SILENT, Kind.ORPHAN, Kind.RUNAWAY}  # fmt: skip
    assert kind not in step_only
    assert reason.strip()


def test_retryable_table_is_exactly_the_briefs() -> None:
    assert RETRYABLE_KINDS - FROM_OTHER_DETECTORS == EXPECTED_RETRYABLE
    assert not RETRYABLE_KINDS & NEVER_RETRYABLE
    assert set(Kind) == EXPECTED_RETRYABLE | NEVER_RETRYABLE | FROM_OTHER_DETECTORS
