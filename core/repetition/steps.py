"""Cross-step loops: the model repeats itself across steps rather than inside one stream.

PURE: no IO, no clock. Fed one ``StepSummary`` at each step end; a new user turn calls
``reset()``. Three shapes, after MiMo and Gemini CLI:

- ``text_loop``: the same normalised text (+ tool signature) in the last 3 steps that had
  text (MiMo text-loop-recovery; steps without text are skipped, not breaking);
- ``reasoning_loop``: the same reasoning fingerprint 3 steps running, even while the tool
  arguments drift (MiMo loop-streak ``reason:`` key; tool-only steps key on the tools);
- ``tool_repeat``: the same tool calls with the same arguments 3 steps running, and
  ``tool_cycle``: a cycle of 2..5 tool steps repeated 4 times (Gemini CLI checks cycles; 4,
  not 3, because alternations such as check/poll pairs are more often legitimate).
  A step without tools breaks both (MiMo stepSignature walks back until one).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, cast

_SPACES = re.compile(r"\s+")
_PREFIXES = ("let me ", "i'll ", "i will ", "let's ")


def canonical_json(value: Any) -> str:
    """Stable JSON: key order never matters, so drifting key order is still the same call."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return cast(str, value)
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def normalise(text: str) -> str:
    """Trim, lower-case, collapse whitespace, drop one leading "let me"-style opener."""
    flat = _SPACES.sub(" ", text.lower()).strip()
    for prefix in _PREFIXES:
        if flat.startswith(prefix):
            return flat[len(prefix) :]
    return flat


@dataclass(frozen=True)
class StepSummary:
    """One finished step: its visible text, its reasoning, its tool calls (name, canonical
    input JSON) in call order."""

    text: str = ""
    reasoning: str = ""
    tools: tuple[tuple[str, str], ...] = ()

    @classmethod
    def build(
        cls,
        texts: Iterable[str] = (),
        reasonings: Iterable[str] = (),
        tools: Iterable[tuple[str, Any]] = (),
    ) -> StepSummary:
        """From a step's parts: fragments are joined before hashing (MiMo joins them too)."""
        return cls(
            text="\n".join(texts),
            reasoning="\n".join(reasonings),
            tools=tuple((name, canonical_json(args)) for name, args in tools),
        )

    @property
    def tool_signature(self) -> str:
        return "\n".join(f"{name}:{args}" for name, args in self.tools)


def text_key(step: StepSummary, limit: int = 200) -> str:
    """Empty when the step has no text (such steps are skipped by the text-loop check)."""
    text = normalise(step.text)[:limit]
    if not text:
        return ""
    return f"{text}\n{step.tool_signature}"


def streak_key(step: StepSummary) -> str:
    """``reason:<sha256/16>`` when there is reasoning, else ``tool:<signature>``, else ""."""
    reasoning = normalise(step.reasoning)
    if reasoning:
        return "reason:" + hashlib.sha256(reasoning.encode()).hexdigest()[:16]
    if step.tools:
        return "tool:" + step.tool_signature
    return ""


@dataclass(frozen=True)
class StepLoop:
    """A cross-step loop: ``streak`` steps (or cycle copies) share ``key``; ``period`` is 1
    for plain repeats and the cycle length for ``tool_cycle``."""

    detector: str
    streak: int
    period: int
    key: str


@dataclass(frozen=True)
class StepLimits:
    text_repeats: int = 3
    reasoning_repeats: int = 3
    tool_repeats: int = 3
    cycle_min: int = 2
    cycle_max: int = 5
    cycle_copies: int = 4
    history: int = 32


def _tail_streak(keys: deque[str]) -> int:
    """How many of the newest keys are equal to the newest one."""
    if not keys:
        return 0
    last, count = keys[-1], 0
    for key in reversed(keys):
        if key != last:
            break
        count += 1
    return count


class CrossStepDetector:
    """Feed every finished step; returns a StepLoop for as long as the loop goes on, so the
    caller can escalate (remind -> replan -> stop)."""

    def __init__(self, limits: StepLimits | None = None) -> None:
        self.limits = limits or StepLimits()
        self.reset()

    def reset(self) -> None:
        size = self.limits.history
        self._texts: deque[str] = deque(maxlen=size)
        self._streaks: deque[str] = deque(maxlen=size)
        self._tools: deque[str] = deque(maxlen=size)
        self._last_streak = ""
        self._last_had_text = False

    def observe(self, step: StepSummary) -> StepLoop | None:
        self._record(step)
        return (
            self._text_loop()
            or self._reasoning_loop(step)
            or self._tool_repeat()
            or self._tool_cycle()
        )

    def _record(self, step: StepSummary) -> None:
        key = text_key(step)
        if key:
            self._texts.append(key)
        self._last_streak = streak_key(step)
        if self._last_streak:
            self._streaks.append(self._last_streak)
        if step.tools:
            self._tools.append(step.tool_signature)
        else:
            self._tools.clear()
        self._last_had_text = bool(key)

    def _text_loop(self) -> StepLoop | None:
        streak = _tail_streak(self._texts)
        if not self._last_had_text or streak < self.limits.text_repeats:
            return None
        return StepLoop("text_loop", streak, 1, self._texts[-1][:120])

    def _reasoning_loop(self, step: StepSummary) -> StepLoop | None:
        # The streak must end at this step: an empty key means the loop already broke.
        if not self._last_streak or not step.reasoning.strip():
            return None
        streak = _tail_streak(self._streaks)
        if streak < self.limits.reasoning_repeats:
            return None
        return StepLoop("reasoning_loop", streak, 1, self._last_streak)

    def _tool_repeat(self) -> StepLoop | None:
        streak = _tail_streak(self._tools)
        if streak < self.limits.tool_repeats:
            return None
        return StepLoop("tool_repeat", streak, 1, self._tools[-1][:120])

    def _tool_cycle(self) -> StepLoop | None:
        seq = list(self._tools)
        copies = self.limits.cycle_copies
        for period in range(self.limits.cycle_min, self.limits.cycle_max + 1):
            span = period * copies
            if len(seq) < span:
                break
            tail = seq[-span:]
            if len(set(tail[:period])) < 2:
                continue  # one signature repeated is tool_repeat's business
            if all(tail[i] == tail[i + period] for i in range(span - period)):
                return StepLoop("tool_cycle", copies, period, " | ".join(tail[:period])[:120])
        return None
