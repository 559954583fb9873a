"""PURE: the soak's fault menu and what each fault must lead to (issue 11).

Each turn of the soak draws one ``Fault`` (seeded). A fault says how the driver plays the turn
(``how``), which fake-provider marker its prompt carries, and what the daemon must do about it
(``expect``): recover it with one continuation of an allowed kind, or leave it alone. The checker
(``soak_checks``) judges every observed turn against this, so the expected outcome of a turn
follows from its fault alone, never from what the daemon happened to do.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from enum import StrEnum

_TAG = re.compile(r"Soak turn (t[0-9a-z]+):")


class How(StrEnum):
    """How the driver plays a turn."""

    PROMPT = "prompt"  # a prompt with the marker; nothing else
    ABORT = "abort"  # the prompt stalls; the user aborts it once the provider has it
    PERMISSION = "permission"  # a tool asks a permission; answered later ("once")
    BACKOFF_MESSAGE = "backoff_message"  # a user message arrives while a retry waits
    OFF = "off"  # `/autoretry off here`, the fault, `/autoretry on here`
    SUBAGENT = "subagent"  # the root delegates with `task`; the child gets the fault


class Expect(StrEnum):
    HEALTHY = "healthy"  # nothing to do: no decision needed, nothing sent
    RECOVER = "recover"  # exactly one continuation, then a clean answer
    LEAVE = "leave"  # a decision not to act; nothing sent
    CANCEL = "cancel"  # the pending retry gives way to the user's message


@dataclass(frozen=True)
class Fault:
    name: str
    marker: str  # the fake provider behaviour, "" for a plain answer
    how: How
    expect: Expect
    kinds: frozenset[str] = frozenset()  # the decision kinds that are right for it
    #: Kinds also right when the daemon lost the turn's live stream (it was SIGKILLed, or its
    #: bridge's socket cut, while the turn ran): what it saw of the stream died with it.
    if_stream_lost: frozenset[str] = frozenset()
    slow: bool = False  # OpenCode's own retries take about a minute: the long soak only
    weight: int = 2

    @property
    def needs_decision(self) -> bool:
        return self.expect is not Expect.HEALTHY


def _f(name: str, marker: str, how: How, expect: Expect, *kinds: str, **extra: object) -> Fault:
    return Fault(name, marker, how, expect, frozenset(kinds), **extra)  # type: ignore[arg-type]


P, R = How.PROMPT, Expect.RECOVER
MENU: tuple[Fault, ...] = (
    _f("healthy", "", P, Expect.HEALTHY, weight=4),
    _f("tool", "tool", P, Expect.HEALTHY, weight=3),
    _f("blank", "blank", P, R, "blank"),
    _f("forged_length", "length", P, R, "forged_length"),
    _f("reasoning_only", "reasoning", P, R, "think_only"),
    _f("tool_as_text", "toolastext", P, R, "tool_as_text"),
    _f("truncated", "truncated", P, R, "truncated"),
    _f("disconnect", "http400_disconnect", P, R, "disconnect"),
    _f("rate_limit", "http429:0.1", P, R, "rate_limit"),
    _f("server_503", "http503", P, R, "server_error"),
    _f("server_500", "http500", P, R, "server_error", slow=True, weight=1),
    _f("reset_chunked", "reset_chunked", P, R, "disconnect", "stream_truncated", slow=True,
       weight=1),
    # A close-delimited body cut by a RST reads as a clean stream without a finish reason, so
    # OpenCode loops on it like ``noreason`` (fake_faults.py).
    _f("reset", "reset", P, R, "runaway", "truncated", "silent"),
    _f("noreason_loop", "noreason", P, R, "runaway"),
    _f("stall", "stall:30", P, R, "stall"),
    # The loop's evidence is in its deltas only (OpenCode's DB holds "" while a part streams),
    # and the fake holds a loop at its 300th word until it is stopped: a daemon that lost the
    # deltas it had (killed with them unread, a socket cut) sees a stream that stopped moving,
    # a stall. (A real loop keeps streaming, so a restarted daemon finds it in what follows.)
    _f("repetition_loop", "loop", P, R, "repetition", if_stream_lost=frozenset({"stall"})),
    _f("unauthorized", "http401", P, Expect.LEAVE, "terminal", weight=1),
    _f("quota", "quota429", P, Expect.LEAVE, "terminal", weight=1),
    _f("user_abort", "stall:30", How.ABORT, Expect.LEAVE, "user_abort"),
    _f("permission_wait", "read_outside", How.PERMISSION, Expect.HEALTHY),
    _f("message_in_backoff", "http400_disconnect", How.BACKOFF_MESSAGE, Expect.CANCEL,
       "disconnect"),
    _f("off_here", "blank", How.OFF, Expect.LEAVE, "blank"),
    _f("subagent_blank", "task:blank", How.SUBAGENT, Expect.HEALTHY),
    _f("subagent_rate_limit", "task:http429-0.1", How.SUBAGENT, Expect.HEALTHY),
    _f("subagent_healthy", "task:normal", How.SUBAGENT, Expect.HEALTHY, weight=1),
)
BY_NAME = {fault.name: fault for fault in MENU}


def menu(short: bool) -> tuple[Fault, ...]:
    """The faults a run draws from: the short (e2e) run leaves out the minute-long ones."""
    return tuple(f for f in MENU if not (short and f.slow))


def draw(rng: random.Random, faults: tuple[Fault, ...]) -> Fault:
    return rng.choices(faults, weights=[f.weight for f in faults])[0]


def lane_rng(seed: int, lane: int) -> random.Random:
    """Each lane's own draws: a seed gives the same faults per lane whatever the speed."""
    return random.Random(f"{seed}:lane:{lane}")


def first_draws(seed: int, lanes: int, faults: tuple[Fault, ...], turns: int) -> list[Fault]:
    """The faults the first ``turns`` turns of every lane draw: a run in which every lane played
    that many turns has at least these (the soak's floor per family follows from them)."""
    drawn: list[Fault] = []
    for lane in range(lanes):
        rng = lane_rng(seed, lane)
        drawn += [draw(rng, faults) for _ in range(turns)]
    return drawn


def prompt_text(tag: str, fault: Fault) -> str:
    """The user message of a turn: its tag (how the checker finds it) and its marker."""
    marker = f" [[s:{fault.marker}]]" if fault.marker else ""
    return f"Soak turn {tag}: say hello{marker}"


def tag_of(text: str) -> str | None:
    """The turn tag in a user message written by ``prompt_text``, if any (searched, not
    matched at the start: OpenCode may wrap a user message's text when it sends it on)."""
    found = _TAG.search(text)
    return found[1] if found else None
