"""PURE: a goal check's result -> a verdict for the decision core (issue 22).

A goal is a shell command the user set for a session (``/autoretry goal pytest -q``). When a
root turn of the session ends healthy and the reply neither asks nor waits for the user
(``goal_blocker``: the same reply guard as the todo continuation), the daemon runs the check
(``daemon/goals``). A failing check becomes a verdict of kind ``goal`` (budget group ``goal``)
whose text carries the command, its exit status and the tail of its output; a check that
timed out, could not start, or failed with the same output as the previous one (numbers and
times normalised: **stagnation**) carries ``give_up``, so the core sends one notice instead.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from opencode_autoretry.goals.config import EXCERPT_BYTES
from opencode_autoretry.models import Kind, Turn, Verdict
from opencode_autoretry.todos.continuation import (
    aborted_or_overflowed,
    final_text,
    refusal,
    unanswered_question,
)
from opencode_autoretry.todos.reply_intent import Intent, read_intent


@dataclass(frozen=True)
class CheckResult:
    """One run of a goal check."""

    command: str
    exit_code: int | None  # None: it did not end by itself (killed at its timeout, not started)
    duration_s: float
    output: str  # the tail of stdout and stderr, at most ``OUTPUT_CAP_BYTES``
    timed_out: bool = False
    error: str | None = None  # why it could not start

    @property
    def passed(self) -> bool:
        return self.exit_code == 0 and not self.timed_out and self.error is None

    @property
    def status_words(self) -> str:
        if self.error is not None:
            return f"could not start ({self.error})"
        if self.timed_out:
            return f"timed out after {self.duration_s:.0f} s (killed)"
        return "passed" if self.passed else f"exit status {self.exit_code}"


# --- stagnation ----------------------------------------------------------------------------

_HEX = re.compile(r"\b0x[0-9a-fA-F]+\b")
_NUMBER = re.compile(r"\d+(?:[.,:]\d+)*")
_SPACE = re.compile(r"\s+")


def signature(output: str) -> str:
    """The output with numbers, times, durations and addresses replaced, spacing collapsed:
    two runs that failed the same way have the same signature."""
    text = _HEX.sub("#", output)
    text = _NUMBER.sub("#", text)
    return _SPACE.sub(" ", text).strip()


def stagnant(history: Sequence[str]) -> bool:
    """The last two failing runs of the goal have the same signature."""
    return len(history) >= 2 and history[-1] == history[-2]


# --- the reply guard -----------------------------------------------------------------------


def goal_blocker(turn: Turn, *, aborted: str | None = None, refused: str | None = None
                 ) -> str | None:
    """Why this healthy end must not be checked and continued, or None. The guards of a todo
    continuation: the user aborted or refused something, a question is unanswered, the
    context overflowed, or the reply asks or waits for the user (in doubt it does) or says it
    is blocked; unlike there, a reply that says it is done is checked."""
    last = turn.last_step
    if last is None:
        return "the turn has no reply"
    found = aborted or refused or refusal(turn) or aborted_or_overflowed(turn)
    found = found or unanswered_question(last)
    if found:
        return found
    intent = read_intent(final_text(last))
    if intent.intent not in _CHECKED:
        return f"the reply {intent.intent.value}: {intent.reason}"
    return None


#: The replies after which a goal's check runs: one that carries on, and one that says the
#: work is done (the check is there to verify that). One that asks, waits, is in doubt (read
#: as a question) or says it is blocked is the user's to answer.
_CHECKED = frozenset({Intent.CONTINUES, Intent.DONE})


# --- the verdict ---------------------------------------------------------------------------

DEFAULT_MESSAGE = (
    "The goal check `{command}` still fails ({status}). The end of its output:\n"
    "````\n{output}\n````\n"
    "Carry on towards making this check pass. If your last reply asked the user something, "
    "or something outside your reach blocks the check, say so in one line and stop."
)


def excerpt(output: str, limit: int = EXCERPT_BYTES) -> str:
    """The last ``limit`` bytes of the output (whole characters), '…' when cut."""
    data = output.encode("utf-8", errors="replace")
    if len(data) <= limit:
        return output.strip("\n")
    tail = data[-limit:].decode("utf-8", errors="ignore")
    return "…" + tail.strip("\n")


def continuation_text(result: CheckResult) -> str:
    output = excerpt(result.output).replace("````", "```\u200b`") or "(no output)"
    return DEFAULT_MESSAGE.format(command=result.command, status=result.status_words,
                                  output=output)


def goal_verdict(turn: Turn, result: CheckResult, history: Sequence[str]) -> Verdict | None:
    """The verdict for a failing check (None when it passed). ``history`` holds the
    signatures of the goal's failing runs, this one last."""
    last = turn.last_step
    if result.passed or last is None:
        return None
    reason = f"goal check `{_short(result.command)}` {result.status_words}"
    give_up = None
    if result.error is not None or result.timed_out:
        give_up = f"the goal check {result.status_words}"
    elif stagnant(history):
        give_up = "the goal check failed the same way twice in a row (stagnation)"
    return Verdict(Kind.GOAL, True, reason, last.id, text=continuation_text(result),
                   give_up=give_up)


def _short(command: str, limit: int = 80) -> str:
    flat = " ".join(command.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
