"""Repetition guard: the public face of the loop detectors.

PURE: no IO, no clock. The bridge keeps one ``StreamGuard`` per streaming part and channel
(text and reasoning separately), calls ``reset()`` at every part/step boundary and feeds each
delta; at each step end it feeds a ``StepSummary`` to one ``CrossStepDetector`` per session
turn. ``trim_repeated_tail`` keeps a detected loop out of the model's next context.

The detectors live in ``repetition_period`` (tail period), ``repetition_tokens`` (token
block) and ``repetition_steps`` (cross-step); this module re-exports them.
"""

from __future__ import annotations

from opencode_autoretry.repetition.period import (
    Detection,
    PeriodThresholds,
    TailPeriodDetector,
    required_repeats,
)
from opencode_autoretry.repetition.steps import (
    CrossStepDetector,
    StepLimits,
    StepLoop,
    StepSummary,
    canonical_json,
    normalise,
    streak_key,
    text_key,
)
from opencode_autoretry.repetition.tokens import (
    TokenBlockDetector,
    TokenBlockLimits,
    is_table_heavy,
    tokenize,
)

__all__ = [
    "TRIM_NOTICE",
    "CrossStepDetector",
    "Detection",
    "PeriodThresholds",
    "StepLimits",
    "StepLoop",
    "StepSummary",
    "StreamGuard",
    "TailPeriodDetector",
    "TokenBlockDetector",
    "TokenBlockLimits",
    "canonical_json",
    "is_table_heavy",
    "normalise",
    "required_repeats",
    "streak_key",
    "text_key",
    "tokenize",
    "trim_repeated_tail",
]

TRIM_NOTICE = "[autoretry: repeated text trimmed]"


class StreamGuard:
    """Both live detectors over one stream; the first Detection wins and is returned once.

    Deltas are gathered here and handed on in batches of ``tail_period.limits.check_every``
    chars, so a delta costs one list append (most deltas are 30-60 chars)."""

    def __init__(
        self,
        period: PeriodThresholds | None = None,
        tokens: TokenBlockLimits | None = None,
    ) -> None:
        self.tail_period = TailPeriodDetector(period)
        self.token_block = TokenBlockDetector(tokens)
        self._batch = self.tail_period.limits.check_every
        self.reset()

    def reset(self) -> None:
        self.tail_period.reset()
        self.token_block.reset()
        self.detection: Detection | None = None
        self._pending: list[str] = []
        self._pending_chars = 0

    def feed(self, delta: str) -> Detection | None:
        if self.detection is not None or not delta:
            return None
        self._pending.append(delta)
        self._pending_chars += len(delta)
        if self._pending_chars < self._batch:
            return None
        return self._keep(self._hand_on())

    def finish(self) -> Detection | None:
        """Check what is still buffered (between two periodic checks) at a stream's end."""
        if self.detection is not None:
            return None
        found = self._hand_on() if self._pending else None
        return self._keep(found or self.tail_period.check() or self.token_block.check(final=True))

    def _hand_on(self) -> Detection | None:
        batch = "".join(self._pending)
        self._pending.clear()
        self._pending_chars = 0
        return self.tail_period.feed(batch) or self.token_block.feed(batch)

    def _keep(self, found: Detection | None) -> Detection | None:
        if found is not None:
            self.detection = found
        return found


def trim_repeated_tail(text: str, where: Detection | int, keep_one_period: bool = True) -> str:
    """Cut the loop out of ``text`` (a stream's text since its ``reset()``).

    With a Detection, the first copy of the block is kept (``keep_one_period``) so the reader
    sees what was repeated; with a bare offset, the text is cut there. A notice is appended
    so nobody mistakes the result for a complete answer.
    """
    start = where.loop_start if isinstance(where, Detection) else where
    start = max(0, min(start, len(text)))
    kept = text[:start]
    if keep_one_period and isinstance(where, Detection):
        kept += text[start : start + len(where.excerpt)]
    if start >= len(text):
        return text  # nothing of the loop is in this text
    separator = "" if not kept or kept.endswith(("\n", " ")) else " "
    return f"{kept}{separator}{TRIM_NOTICE}"
