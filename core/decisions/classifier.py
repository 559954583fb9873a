"""PURE: an assistant turn snapshot (plus what the live process knows) -> a Verdict.

The signatures come from OpenCode 1.18's failure catalogue (reference §2.6-2.8) and MiMo's
step classifier and retry decider. The order of checks is the contract:

1. runaway: OpenCode loops forever on steps that end with finish ``unknown`` and no output, and
   stays busy while doing so, so this is checked before the live facts;
2. live busy / retry (and waiting on a permission, a question or a child session) -> running;
3. no step yet -> orphan; a follow-up user message newer than the last step -> running;
4. the last step's error (abort, terminal, transient kinds) wins over its finish;
5. the finish, the tool parts and the visible text of the last step. OpenCode starts another
   step after finish ``unknown``, so without live facts that is running; a live idle owner
   turns it into truncated (output > 0) or silent.

An error whose text matches nothing specific but which OpenCode marked retryable is classed
``server_error`` ("unrecognised transient error"): it spends the server budget, which is bounded.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime

from opencode_autoretry.causes import Cause
from opencode_autoretry.decisions.error_kinds import classify_error
from opencode_autoretry.decisions.gates import waiting_on_user
from opencode_autoretry.decisions.retry_hint import retry_hint_ms
from opencode_autoretry.models import (
    ErrorInfo,
    Kind,
    LiveFacts,
    Message,
    Part,
    PartType,
    ToolStatus,
    Turn,
    Verdict,
)

__all__ = ["RETRYABLE_KINDS", "classify", "classify_error", "is_retryable", "retry_hint_ms"]

#: Kinds that a continuation can fix. REPETITION and STALL are produced by other detectors.
_NEVER_RETRYABLE = {Kind.HEALTHY, Kind.RUNNING, Kind.TERMINAL, Kind.USER_ABORT, Kind.ORPHAN}
RETRYABLE_KINDS: frozenset[Kind] = frozenset(Kind) - _NEVER_RETRYABLE


def is_retryable(kind: Kind) -> bool:
    return kind in RETRYABLE_KINDS


# --------------------------------------------------------------------------- steps

# Older OpenCode versions and raw provider values, mapped onto the AI SDK's finish reasons.
_FINISH_ALIASES = {
    **dict.fromkeys(("stop", "end_turn", "stop_sequence", "other"), "stop"),
    **dict.fromkeys(("tool-calls", "tool_calls", "tool_use"), "tool-calls"),
    **dict.fromkeys(("length", "max_tokens"), "length"),
    **dict.fromkeys(("content-filter", "content_filter"), "content-filter"),
    "unknown": "unknown",
    "error": "error",
}

_TOOL_MARKUP = re.compile(
    r"<invoke\b|</invoke>|<function_calls>|<tool_call>|<function=|<parameter name="
    r"|\{\s*\"type\"\s*:\s*\"function\"",
    re.IGNORECASE,
)


def classify(
    turn: Turn, live: LiveFacts | None = None, *, now: datetime, runaway_steps: int = 6
) -> Verdict:
    """Classify the turn's latest state. ``live`` is None when no live owner is known."""
    last = turn.last_step
    message_id = last.id if last is not None else None
    current = _steps_since_followup(turn)
    looping = _trailing_runaway(current, runaway_steps)
    if looping:
        reason = f"{looping} steps in a row ended with no finish reason and no output"
        return _verdict(Kind.RUNAWAY, reason, message_id)
    waiting = _live_wait(live)
    if waiting is not None:
        return _verdict(Kind.RUNNING, waiting, message_id)
    if last is None:
        return _verdict(Kind.ORPHAN, "no assistant reply and no process working on it", None)
    if not current:
        return _verdict(Kind.RUNNING, "a newer follow-up message is waiting for its reply", last.id)
    if last.error is not None:
        kind, reason = classify_error(last.error)
        hint = retry_hint_ms(last.error, now)
        return _verdict(kind, reason, last.id, hint=hint, error=last.error)
    kind, reason = _classify_step(last, live)
    return _verdict(kind, reason, last.id)


def _verdict(
    kind: Kind,
    reason: str,
    message_id: str | None,
    *,
    hint: int | None = None,
    error: ErrorInfo | None = None,
) -> Verdict:
    return Verdict(kind, is_retryable(kind), reason, message_id, hint, error)


def _steps_since_followup(turn: Turn) -> tuple[Message, ...]:
    """Steps newer than the latest follow-up user message (OpenCode ids sort by creation)."""
    if not turn.followups:
        return turn.steps
    latest = max(message.id for message in turn.followups)
    return tuple(step for step in turn.steps if step.id > latest)


def _trailing_runaway(steps: Sequence[Message], threshold: int) -> int:
    """How many steps at the end are empty ``unknown`` finishes, if at least ``threshold``.

    A step still being written at the end is skipped: while OpenCode loops, a fresh row
    usually exists at the moment we look.
    """
    finished = list(steps)
    if finished and _in_progress(finished[-1]):
        finished.pop()
    count = 0
    for step in reversed(finished):
        if _finish(step) != "unknown" or step.tokens.output != 0 or step.error is not None:
            break
        count += 1
    return count if count >= max(1, threshold) else 0


def _in_progress(step: Message) -> bool:
    return _finish(step) is None and step.error is None and step.time_completed is None


def _live_wait(live: LiveFacts | None) -> str | None:
    if live is None:
        return None
    if live.retrying:
        return "OpenCode is retrying the request itself"
    if live.busy:
        return "OpenCode is working on the turn"
    waiting = waiting_on_user(live)
    return None if waiting is None else _WAITING_WORDS[waiting]


_WAITING_WORDS = {
    Cause.WAITING_PERMISSION: "waiting for a permission answer",
    Cause.WAITING_QUESTION: "waiting for the user to answer a question",
    Cause.WAITING_CHILD: "a subagent session is still busy",
}


def _finish(step: Message) -> str | None:
    known = _FINISH_ALIASES.get(step.finish or "")  # nearly always: called ~4 times a step
    if known is not None:
        return known
    raw = (step.finish or "").strip().lower()
    if not raw:
        return None
    return _FINISH_ALIASES.get(raw, "stop")  # unseen values: judged by the visible output


def _classify_step(step: Message, live: LiveFacts | None) -> tuple[Kind, str]:
    finish = _finish(step)
    tools = _client_tools(step)
    if any(t.tool_status in (ToolStatus.PENDING, ToolStatus.RUNNING) for t in tools):
        return Kind.RUNNING, "a tool call is still pending or running"
    if finish is None:
        if step.time_completed is not None:
            if live is not None and live.stopped_in_retry:
                return Kind.USER_ABORT, "stopped by the user during OpenCode's retry back-off"
            return Kind.SILENT, "no finish and no error (likely aborted in a retry back-off)"
        return Kind.ORPHAN, "the step never completed and no process is working on it"
    if finish == "tool-calls":
        if not tools and _has_tool_markup(step):
            return Kind.TOOL_AS_TEXT, "the model wrote its tool call as text"
        return Kind.RUNNING, "OpenCode continues after tool calls"
    if finish == "unknown":
        return _classify_unknown_finish(step, live)
    if finish == "length":
        return _classify_length(step)
    if finish == "content-filter":
        return Kind.TERMINAL, "the provider's content filter stopped the reply"
    if finish == "error":
        return Kind.TERMINAL, "the provider ended the step with an error"
    return _classify_answer(step, tools)


def _classify_unknown_finish(step: Message, live: LiveFacts | None) -> tuple[Kind, str]:
    # OpenCode starts another step after ``unknown``; only a live idle owner proves it did not.
    if live is None:
        return Kind.RUNNING, "OpenCode continues after a step with no finish reason"
    output = step.tokens.output
    if output > 0:
        return Kind.TRUNCATED, f"the stream ended with no finish reason after {output} tokens"
    return Kind.SILENT, "the stream ended with no finish reason and no output"


def _classify_length(step: Message) -> tuple[Kind, str]:
    output, given = step.tokens.output, step.tokens.input
    if output == 0:
        return Kind.FORGED_LENGTH, f"finish 'length' with 0 output tokens ({given} input)"
    return Kind.TRUNCATED, f"the reply hit the output length limit after {output} tokens"


def _classify_answer(step: Message, tools: Sequence[Part]) -> tuple[Kind, str]:
    texts = _visible(step, PartType.TEXT)
    if not tools and _has_tool_markup(step):
        return Kind.TOOL_AS_TEXT, "the model wrote its tool call as text"
    if texts or tools:
        return Kind.HEALTHY, "the reply finished with text" if texts else "the reply used tools"
    if _visible(step, PartType.REASONING) or step.tokens.reasoning > 0:
        return Kind.THINK_ONLY, "the reply holds only reasoning, no answer"
    output = step.tokens.output
    if output == 0:
        return Kind.BLANK, "the reply finished with no output"
    return Kind.BLANK, f"the reply finished with {output} output tokens but no visible text"


def _client_tools(step: Message) -> tuple[Part, ...]:
    """Tool parts that OpenCode runs; provider-executed tools (MiMo C8) do not count."""
    return tuple(
        part
        for part in step.parts
        if part.type is PartType.TOOL
        and not part.data.get("providerExecuted")
        and not part.metadata.get("providerExecuted")
    )


def _visible(step: Message, part_type: PartType) -> tuple[Part, ...]:
    return tuple(
        part
        for part in step.parts
        if part.type is part_type and not part.synthetic and part.text.strip()
    )


def _has_tool_markup(step: Message) -> bool:
    return any(_TOOL_MARKUP.search(part.text) for part in _visible(step, PartType.TEXT))
