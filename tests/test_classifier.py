"""Turn-level classification: AR cases D1-D13, MiMo classify cases C1-C20, and the 1.18 catalogue.

MiMo's outcomes map to our kinds as final->healthy, continue->running, invalid->blank,
think-only->think_only, failed->the error's kind (or terminal), text-tool-call->tool_as_text.
Where our semantics deliberately differ, the case says so.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from opencode_autoretry.decisions.classifier import classify
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
SES = "ses_test"
IDLE = LiveFacts()  # a live owner that reports the session idle
RETRYABLE = {
    "blank", "think_only", "forged_length", "truncated", "tool_as_text", "disconnect",
    "stream_truncated", "timeout", "rate_limit", "server_error", "silent", "runaway",
}  # fmt: skip


# --------------------------------------------------------------------------- builder


def _part(kind: PartType, **data: Any) -> Part:
    return Part("", "", SES, kind, T0, {"type": str(kind), **data})


def text(value: str, **extra: Any) -> Part:
    return _part(PartType.TEXT, text=value, **extra)


def reasoning(value: str) -> Part:
    return _part(PartType.REASONING, text=value)


def tool(status: str = "completed", name: str = "bash", **extra: Any) -> Part:
    return _part(PartType.TOOL, tool=name, callID="call_1", state={"status": status}, **extra)


def step_start() -> Part:
    return _part(PartType.STEP_START)


def err(name: str = "APIError", message: str = "", **fields: Any) -> ErrorInfo:
    return ErrorInfo(name, message, **fields)


def step(
    *parts: Part,
    finish: str | None = "stop",
    out: int = 10,
    inp: int = 100,
    think: int = 0,
    error: ErrorInfo | None = None,
    completed: bool = True,
    **fields: Any,
) -> Message:
    tokens = Tokens(input=inp, output=out, reasoning=think, total=inp + out + think)
    done = T0 if completed else None
    return Message(
        "", SES, Role.ASSISTANT, T0, done, None, finish, tokens, error, parts=parts, **fields
    )


def followup(words: str = "continue") -> Message:
    return Message("", SES, Role.USER, T0, parts=(text(words),))


def turn(*messages: Message) -> Turn:
    """Give the user message and ``messages`` ascending ids and times, as OpenCode does."""
    user = Message("msg_0000", SES, Role.USER, T0, parts=(text("do the task"),))
    steps: list[Message] = []
    followups: list[Message] = []
    for index, message in enumerate(messages, start=1):
        mid = f"msg_{index:04d}"
        created = T0 + timedelta(seconds=index)
        parts = tuple(
            replace(p, id=f"prt_{index:04d}_{n}", message_id=mid, time_created=created)
            for n, p in enumerate(message.parts)
        )
        done = created if message.time_completed is not None else None
        placed = replace(message, id=mid, time_created=created, time_completed=done, parts=parts)
        if message.role is Role.ASSISTANT:
            steps.append(replace(placed, parent_id=user.id))
        else:
            followups.append(placed)
    return Turn(SES, user, tuple(steps), tuple(followups))


def names(rows: list[tuple[Any, ...]]) -> list[str]:
    return [row[0] for row in rows]


def check(t: Turn, kind: Kind, live: LiveFacts | None = None, **kwargs: Any) -> None:
    verdict = classify(t, live, now=NOW, **kwargs)
    assert verdict.kind is kind, verdict.reason
    assert verdict.retryable is (kind.value in RETRYABLE)
    assert verdict.reason.strip()
    assert verdict.message_id == (t.last_step.id if t.last_step else None)


ANSWER = text("Here is the answer.")
ECONNRESET = err("APIError", "Connection reset by server", is_retryable=True, code="ECONNRESET")
ABORTED = err("MessageAbortedError", "Aborted")


# --------------------------------------------------------------------------- AR: D1-D13

AR_CASES = [
    ("D1 user abort", turn(step(ANSWER, finish=None, error=ABORTED)), None, Kind.USER_ABORT),
    # D2: OpenCode starts another step after `unknown`; only an idle live owner proves the
    # stream was cut off. Without live facts the same row means "running" (next case).
    ("D2 unknown, idle", turn(step(ANSWER, finish="unknown", out=40)), IDLE, Kind.TRUNCATED),
    ("D2 unknown, no live", turn(step(ANSWER, finish="unknown", out=40)), None, Kind.RUNNING),
    # D3: AR retries every silent row; we split it: time.completed set -> silent (retry),
    # never completed and no live owner -> orphan (no process to send to, so no retry).
    ("D3 silent", turn(step(finish=None, out=0)), None, Kind.SILENT),
    ("D3 orphan", turn(step(finish=None, out=0, completed=False)), None, Kind.ORPHAN),
    ("D3 orphan idle", turn(step(finish=None, out=0, completed=False)), IDLE, Kind.ORPHAN),
    ("D4 json", turn(step(finish=None, error=err(message="JSON Parse error: Unterminated string"))),
     None, Kind.STREAM_TRUNCATED),
    ("D5", turn(step(finish=None, error=err(
        message="Connection failed: Server disconnected without sending a response."))),
     None, Kind.DISCONNECT),
    ("D6 econnreset", turn(step(finish=None, error=ECONNRESET)), None, Kind.DISCONNECT),
    ("D6 fetch", turn(step(finish=None, error=err(message="fetch failed"))), None, Kind.DISCONNECT),
    ("D6 hang up", turn(step(finish=None, error=err(message="socket hang up"))), None,
     Kind.DISCONNECT),
    ("D7", turn(step(finish=None, error=err(message="Request timed out"))), None, Kind.TIMEOUT),
    ("D8 429", turn(step(finish=None, error=err(message="429 Too Many Requests"))), None,
     Kind.RATE_LIMIT),
    ("D8 rate", turn(step(finish=None, error=err(message="rate limit hit"))), None,
     Kind.RATE_LIMIT),
    ("D8 quota", turn(step(finish=None, error=err(message="quota exceeded for this minute"))),
     None, Kind.RATE_LIMIT),
    # D9: AR refuses to retry "provider errors"; we class them server_error (retryable) and let
    # the bounded server budget and back-off decide.
    ("D9", turn(step(finish=None, error=err(message="502 upstream provider error"))), None,
     Kind.SERVER_ERROR),
    ("D10", turn(step(finish=None, error=err(message="400 invalid request"))), None, Kind.TERMINAL),
    ("D10 status", turn(step(finish=None, error=err(message="Bad Request", status_code=400,
                                                     is_retryable=False))), None, Kind.TERMINAL),
    ("D11 blank", turn(step(step_start(), finish="stop", out=0)), IDLE, Kind.BLANK),
    ("D12 fake length", turn(step(finish="length", out=0, inp=5000)), None, Kind.FORGED_LENGTH),
    ("D12 after tools", turn(step(tool(), finish="tool-calls"), step(finish="length", out=0)),
     None, Kind.FORGED_LENGTH),
    ("D13 text", turn(step(ANSWER)), IDLE, Kind.HEALTHY),
    ("D13 tool", turn(step(tool(), finish="stop", out=0)), None, Kind.HEALTHY),
]  # fmt: skip


@pytest.mark.parametrize(("label", "t", "live", "kind"), AR_CASES, ids=names(AR_CASES))
def test_ar_cases(label: str, t: Turn, live: LiveFacts | None, kind: Kind) -> None:
    check(t, kind, live)


# --------------------------------------------------------------------------- MiMo: C1-C20

INVOKE = text('<invoke name="bash"><parameter name="command">ls</parameter></invoke>')
PROVIDER_TOOL = tool(name="web_search", providerExecuted=True)
INTERRUPTED = tool("error", metadata={"interrupted": True}, error="Tool execution aborted")

MIMO_CASES = [
    ("C1", turn(step(ANSWER)), None, Kind.HEALTHY),
    ("C2 other+text", turn(step(ANSWER, finish="other")), None, Kind.HEALTHY),
    ("C3 other+empty", turn(step(finish="other", out=0)), None, Kind.BLANK),
    ("C4 other+reasoning", turn(step(reasoning("hmm"), finish="other")), None, Kind.THINK_ONLY),
    ("C5 stop+pending", turn(step(ANSWER, tool("pending"))), None, Kind.RUNNING),
    ("C5 other+running", turn(step(tool("running"), finish="other")), None, Kind.RUNNING),
    ("C5 length+pending", turn(step(tool("pending"), finish="length")), None, Kind.RUNNING),
    ("C5 filter+pending", turn(step(tool("pending"), finish="content-filter")), None,
     Kind.RUNNING),
    ("C6", turn(step(tool(), finish="tool-calls")), None, Kind.RUNNING),
    # C7: MiMo continues on a missing finish (it runs inside the loop); from outside we know
    # the row is final unless the live owner is busy: silent / orphan / running.
    ("C7 completed", turn(step(ANSWER, finish=None)), None, Kind.SILENT),
    ("C7 live busy", turn(step(ANSWER, finish=None, completed=False)), LiveFacts(busy=True),
     Kind.RUNNING),
    ("C8 with text", turn(step(PROVIDER_TOOL, ANSWER)), None, Kind.HEALTHY),
    ("C8 without text", turn(step(PROVIDER_TOOL, out=0)), None, Kind.BLANK),
    # C9/C10: MiMo "filtered" / "failed"; a filtered or errored finish is not continued.
    ("C9", turn(step(ANSWER, finish="content-filter")), None, Kind.TERMINAL),
    ("C10", turn(step(ANSWER, finish="error")), None, Kind.TERMINAL),
    ("C11 transient", turn(step(ANSWER, error=ECONNRESET)), None, Kind.DISCONNECT),
    ("C11 abort", turn(step(ANSWER, error=ABORTED)), None, Kind.USER_ABORT),
    ("C11 401", turn(step(ANSWER, error=err(message="Invalid API key", status_code=401,
                                             is_retryable=False))), None, Kind.TERMINAL),
    ("C12 stop+reasoning", turn(step(reasoning("thinking"))), None, Kind.THINK_ONLY),
    # C12: MiMo accepts reasoning-only GPT replies as final; we do not special-case models: an
    # answer with no visible text leaves the user with nothing, so it is think_only for all.
    ("C12 gpt", turn(step(reasoning("thinking"), model_id="gpt-5")), None, Kind.THINK_ONLY),
    ("C12 openai/gpt other", turn(step(reasoning("thinking"), finish="other",
                                       model_id="openai/gpt-5.5")), None, Kind.THINK_ONLY),
    ("C13", turn(step(finish="stop", out=0)), None, Kind.BLANK),
    ("C14 synthetic", turn(step(text("x", synthetic=True), out=0)), None, Kind.BLANK),
    ("C14 ignored", turn(step(text("x", ignored=True), out=0)), None, Kind.BLANK),
    ("C14 whitespace", turn(step(text(" \n\t "), out=0)), None, Kind.BLANK),
    ("C15 stale", turn(step(finish="stop", out=0), followup()), None, Kind.RUNNING),
    ("C16 fresh", turn(step(finish="stop", out=0), followup(), step(ANSWER)), None, Kind.HEALTHY),
    # C17: structured output does not exist in our model; a compaction summary is an answer.
    ("C17 summary", turn(step(text("Summary of the work"), summary=True, mode="compaction")),
     None, Kind.HEALTHY),
    ("C18", turn(step(INTERRUPTED, finish=None, error=ABORTED)), None, Kind.USER_ABORT),
    ("C19 tool-calls", turn(step(tool("error", error="File not found"), finish="tool-calls")),
     None, Kind.RUNNING),
    ("C19 stop", turn(step(tool("error", error="File not found"))), None, Kind.HEALTHY),
    ("C20", turn(step(INVOKE, finish="tool-calls")), None, Kind.TOOL_AS_TEXT),
    ("C20 real tool", turn(step(INVOKE, tool(), finish="tool-calls")), None, Kind.RUNNING),
    ("C20 no markup", turn(step(ANSWER, finish="tool-calls")), None, Kind.RUNNING),
    ("C20 has error", turn(step(INVOKE, finish="tool-calls", error=ECONNRESET)), None,
     Kind.DISCONNECT),
    ("C20 stale", turn(step(INVOKE, finish="tool-calls"), followup()), None, Kind.RUNNING),
]  # fmt: skip


@pytest.mark.parametrize(("label", "t", "live", "kind"), MIMO_CASES, ids=names(MIMO_CASES))
def test_mimo_cases(label: str, t: Turn, live: LiveFacts | None, kind: Kind) -> None:
    check(t, kind, live)


# --------------------------------------------------------------------------- OpenCode 1.18 rows

EMPTY_TEXT = text("")
UNKNOWN = step(step_start(), finish="unknown", out=0)
RST_FINAL = err("APIError", "Connection reset by server", is_retryable=True, code="ECONNRESET")
HTTP_429 = err(
    "APIError", "Too Many Requests", status_code=429, is_retryable=True,
    response_headers={"retry-after": "2"}, response_body='{"error":"rate limited"}',
)  # fmt: skip

CATALOGUE_CASES = [
    ("normal text", turn(step(step_start(), ANSWER)), Kind.HEALTHY),
    ("tool then stop", turn(step(tool(), finish="tool-calls"), step(ANSWER)), Kind.HEALTHY),
    ("rst x6", turn(step(step_start(), EMPTY_TEXT, step_start(), text("part"), finish=None,
                         error=RST_FINAL)), Kind.DISCONNECT),
    ("rst once then ok", turn(step(step_start(), EMPTY_TEXT, step_start(), ANSWER)), Kind.HEALTHY),
    ("stop 0 output", turn(step(step_start(), out=0)), Kind.BLANK),
    ("length 0 output", turn(step(finish="length", out=0)), Kind.FORGED_LENGTH),
    ("length with output", turn(step(ANSWER, finish="length", out=4096)), Kind.TRUNCATED),
    ("429", turn(step(finish=None, error=HTTP_429)), Kind.RATE_LIMIT),
    ("500", turn(step(finish=None, error=err(message="Internal Server Error", status_code=500,
                                              is_retryable=True))), Kind.SERVER_ERROR),
    ("missing key", turn(step(finish=None, error=err("ProviderAuthError",
                                                     "OpenAI API key is missing."))),
     Kind.TERMINAL),
    ("abort during back-off", turn(step(finish=None, out=0)), Kind.SILENT),
    ("kill -9 mid-stream", turn(step(EMPTY_TEXT, finish=None, out=0, completed=False)),
     Kind.ORPHAN),
    ("overflow row then compaction", turn(
        step(finish=None, out=0), followup("compaction"),
        step(text("summary"), summary=True, mode="compaction"), followup("Continue if you have"),
        step(ANSWER)), Kind.HEALTHY),
    ("looping", turn(*[UNKNOWN] * 6), Kind.RUNAWAY),
    ("end_turn alias", turn(step(ANSWER, finish="end_turn")), Kind.HEALTHY),
    ("max_tokens alias", turn(step(finish="max_tokens", out=0)), Kind.FORGED_LENGTH),
    ("tool_use alias", turn(step(tool(), finish="tool_use")), Kind.RUNNING),
    ("finish in capitals, spaced", turn(step(finish=" MAX_TOKENS ", out=0)), Kind.FORGED_LENGTH),
    ("unseen finish, no text", turn(step(finish="done", out=0)), Kind.BLANK),
    ("hidden reasoning tokens", turn(step(out=50, think=50)), Kind.THINK_ONLY),
    ("output but no text", turn(step(out=50)), Kind.BLANK),
]  # fmt: skip


@pytest.mark.parametrize(("label", "t", "kind"), CATALOGUE_CASES, ids=names(CATALOGUE_CASES))
def test_catalogue_rows(label: str, t: Turn, kind: Kind) -> None:
    check(t, kind, IDLE)


MARKUPS = [
    '<invoke name="read">',
    "<function_calls>\n<invoke>",
    '<tool_call>{"name": "bash"}</tool_call>',
    '{"type": "function", "function": {"name": "bash"}}',
    "<function=bash>ls</function>",
    '<parameter name="path">x</parameter>',
]


@pytest.mark.parametrize("markup", MARKUPS)
def test_tool_markup_in_a_stop_reply_is_tool_as_text(markup: str) -> None:
    check(turn(step(text(f"I'll look.\n{markup}"))), Kind.TOOL_AS_TEXT, IDLE)


def test_tool_markup_next_to_a_real_tool_part_is_healthy() -> None:
    check(turn(step(text(MARKUPS[0]), tool())), Kind.HEALTHY, IDLE)


# --------------------------------------------------------------------------- live facts

LIVE_CASES = [
    ("busy beats error", LiveFacts(busy=True), turn(step(finish=None, error=ECONNRESET))),
    ("retrying beats blank", LiveFacts(retrying=True, retry_next=NOW), turn(step(out=0))),
    ("permission", LiveFacts(permission_pending=True), turn(step(tool("pending"), finish=None))),
    ("question", LiveFacts(question_pending=True), turn(step(out=0))),
    ("child busy", LiveFacts(child_busy=True), turn(step(tool(name="task")))),
    ("no step yet", LiveFacts(busy=True), turn()),
]


@pytest.mark.parametrize(("label", "live", "t"), LIVE_CASES, ids=names(LIVE_CASES))
def test_live_waits_are_running(label: str, live: LiveFacts, t: Turn) -> None:
    check(t, Kind.RUNNING, live)


@pytest.mark.parametrize("live", [None, IDLE])
def test_no_step_and_nobody_busy_is_orphan(live: LiveFacts | None) -> None:
    check(turn(), Kind.ORPHAN, live)


# --------------------------------------------------------------------------- runaway

RUNAWAY_CASES = [
    ("six", [UNKNOWN] * 6, {}, LiveFacts(busy=True), Kind.RUNAWAY),
    ("five", [UNKNOWN] * 5, {}, LiveFacts(busy=True), Kind.RUNNING),
    ("five, no live", [UNKNOWN] * 5, {}, None, Kind.RUNNING),
    ("five, idle", [UNKNOWN] * 5, {}, IDLE, Kind.SILENT),
    ("six + row in progress", [*[UNKNOWN] * 6, step(finish=None, out=0, completed=False)], {},
     LiveFacts(busy=True), Kind.RUNAWAY),
    ("threshold 3", [UNKNOWN] * 3, {"runaway_steps": 3}, None, Kind.RUNAWAY),
    ("output breaks the run", [*[UNKNOWN] * 3, step(finish="unknown", out=5), *[UNKNOWN] * 3],
     {}, LiveFacts(busy=True), Kind.RUNNING),
    ("before a follow-up", [*[UNKNOWN] * 6, followup(), step(ANSWER)], {}, None, Kind.HEALTHY),
    ("ends in an error", [*[UNKNOWN] * 6, step(finish=None, error=ABORTED)], {}, None,
     Kind.USER_ABORT),
]  # fmt: skip


@pytest.mark.parametrize(
    ("label", "messages", "kwargs", "live", "kind"), RUNAWAY_CASES, ids=names(RUNAWAY_CASES)
)
def test_runaway(label: str, messages: list[Message], kwargs: dict[str, int],
                 live: LiveFacts | None, kind: Kind) -> None:  # fmt: skip
    check(turn(*messages), kind, live, **kwargs)


# --------------------------------------------------------------------------- verdict fields


def test_error_verdict_carries_error_hint_and_last_step_id() -> None:
    t = turn(step(tool(), finish="tool-calls"), step(finish=None, error=HTTP_429))
    verdict = classify(t, IDLE, now=NOW)
    assert (verdict.message_id, verdict.retry_after_ms) == ("msg_0002", 2000)
    assert verdict.error == HTTP_429
    assert verdict.reason == "rate limited by the provider (HTTP 429)"


def test_econnreset_reason_names_the_code() -> None:
    verdict = classify(turn(step(finish=None, error=ECONNRESET)), None, now=NOW)
    assert verdict.reason == "connection reset by the provider (ECONNRESET)"
    assert verdict.retry_after_ms is None


def test_non_error_verdict_has_no_hint_or_error() -> None:
    verdict = classify(turn(step(out=0)), IDLE, now=NOW)
    assert (verdict.retry_after_ms, verdict.error) == (None, None)


def test_a_stop_pressed_in_opencodes_retry_back_off_is_a_user_abort() -> None:
    # The same row (no finish, no error, completed) is silent without the live facts.
    row = turn(step(finish=None, out=0))
    assert classify(row, LiveFacts(stopped_in_retry=True), now=NOW).kind is Kind.USER_ABORT
    assert classify(row, LiveFacts(), now=NOW).kind is Kind.SILENT
    assert classify(row, None, now=NOW).kind is Kind.SILENT
