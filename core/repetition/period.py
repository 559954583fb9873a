"""Tail-period detector: the end of a stream is one block repeated back to back.

PURE: no IO, no clock. One instance per streaming part and channel (text and reasoning
separately); call ``reset()`` at every part/step boundary.

How it stays cheap. MiMo's detector rebuilds a KMP prefix function over its whole 8 KB window
every 256 characters, a per-character loop. Here a check asks only the periods that can
matter: a suffix with period ``p`` ends with a key (the last ``KEY`` characters) that also
occurs ``p`` characters earlier, so ``str.rfind`` (C speed) proposes the candidates and slice
comparisons (C speed, ``memcmp``) verify them. Ordinary prose yields almost no candidates, so a
check costs one ``rfind`` over at most ``max_period`` characters.

Semantics kept from MiMo: a loop is a suffix whose *smallest* period ``p`` repeats at least
``R(p)`` times (so a long run of "-" counts as period 1, never as period 15).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: Characters of layout rather than language: rules, box drawing, tables, digits, whitespace.
#: A block made only of these repeats legitimately (dividers, zero matrices, CSV of numbers),
#: so it keeps MiMo's strict thresholds.
STRUCTURAL_CHARS = (
    " \t\r\n0123456789-=_*~#+|:;,/\\<>[](){}'\"`^"
    + "".join(chr(c) for c in range(0x2500, 0x25A0))  # box drawing and block elements
)

#: Candidate key length. It must not exceed (R(p) - 1) * p for any p, or a loop that is just
#: long enough would never propose its own period: with R(1) = 20 the bound is 19.
KEY = 16

_TICKS = re.compile(r"`+")


@dataclass(frozen=True)
class Detection:
    """A loop found in one stream.

    ``loop_start`` is the char offset (since the last ``reset()``) where the looping tail
    begins as far as the window can see; ``tail_length`` is how many chars from there to the
    end of what had been fed; ``excerpt`` is the text of one period (the first copy).
    """

    detector: str
    period: int
    repeats: int
    loop_start: int
    tail_length: int
    excerpt: str


@dataclass(frozen=True)
class PeriodThresholds:
    """Repeats a smallest period must reach; see ``required_repeats`` for the table."""

    window: int = 4000
    max_period: int = 800
    check_every: int = 128
    short_period_max: int = 12
    short_repeats: int = 20
    sentence_period_max: int = 49
    sentence_repeats: int = 6
    fence_min_period: int = 30
    fence_repeats: int = 24


def _mimo_repeats(period: int) -> int:
    """MiMo's table: tuned for layout-like blocks where repetition is often legitimate."""
    if period == 1:
        return 300
    if period < 5:
        return 80
    if period < 15:
        return 40
    if period < 50:
        return 16
    if period < 200:
        return 8
    return 5


def is_structural(block: str) -> bool:
    return not block.strip(STRUCTURAL_CHARS)


def required_repeats(
    period: int, block: str, in_fence: bool, limits: PeriodThresholds
) -> int | None:
    """How many copies of ``block`` (length ``period``) make a loop; None: never here.

    Why this deviates from MiMo's table (which is kept for structural blocks):
    - a word-like block of <= 12 chars needs 20 copies (the watchdog's short_pattern rule:
      "递归"x20, "loop "x30, "."x25 are loops; MiMo would let "递归" run 80 times);
    - a sentence of 13..49 chars needs 6 copies (the watchdog's duplicate_sentence rule);
      MiMo's own acceptance case (a 72-char sentence x6 is not a loop, x12 is) keeps 8 from
      50 chars up, so the table is not monotone on purpose;
    - inside an open ``` fence only periods >= 30 count, with 24 copies, lowered to what the
      window can hold (window // period) so long periods stay reachable.
    """
    structural = is_structural(block)
    base = _mimo_repeats(period)
    if not structural and period <= limits.short_period_max:
        base = limits.short_repeats
    elif not structural and period <= limits.sentence_period_max:
        base = limits.sentence_repeats
    if in_fence:
        if period < limits.fence_min_period:
            return None
        base = max(base, min(limits.fence_repeats, limits.window // period))
    return base if base * period <= limits.window else None


class FenceTracker:
    """Parity of ``` markers across deltas; a marker may be split between two deltas."""

    def __init__(self) -> None:
        self.markers = 0
        self._open_run = 0  # length of the backtick run touching the end of the text so far

    @property
    def inside(self) -> bool:
        return self.markers % 2 == 1

    def feed(self, text: str) -> None:
        if "`" not in text:  # most text: one C scan instead of a regex iterator (issue 21)
            self._open_run = 0
            return
        end = len(text)
        for match in _TICKS.finditer(text):
            before = self._open_run if match.start() == 0 else 0
            total = before + match.end() - match.start()
            if before < 3 <= total:
                self.markers += 1
            self._open_run = total if match.end() == end else 0
        if not text.endswith("`"):
            self._open_run = 0


def has_period(s: str, period: int, length: int) -> bool:
    """True if the last ``length`` chars of ``s`` have period ``period`` (one memcmp)."""
    n = len(s)
    if length <= period:
        return True
    if length > n:
        return False
    return s[n - length : n - period] == s[n - length + period :]


def periodic_run(s: str, period: int) -> int:
    """Length of the longest suffix of ``s`` with period ``period``: O(log n) slice compares."""
    n = len(s)
    good = period  # any suffix of length <= period trivially has the period
    if not has_period(s, period, good + 1):
        return min(good, n)
    step = max(period, 64)
    probe = good + step
    while probe < n and has_period(s, period, probe):
        good, step = probe, step * 2
        probe = good + step
    if probe >= n:
        if has_period(s, period, n):
            return n
        probe = n
    bad = probe
    while bad - good > 1:
        mid = (good + bad) // 2
        if has_period(s, period, mid):
            good = mid
        else:
            bad = mid
    return good


class _Scan:
    """One check over a window ``s``: walk candidate periods in increasing order."""

    def __init__(self, s: str, in_fence: bool, limits: PeriodThresholds) -> None:
        self.s = s
        self.n = len(s)
        self.in_fence = in_fence
        self.limits = limits
        self.key_len = min(KEY, self.n // 2)
        self.key = s[self.n - self.key_len :]
        self.qmax = min(limits.max_period, self.n // 2)
        self.lowest = max(0, self.n - self.key_len - self.qmax)  # rfind never looks further
        self.best = 0  # longest suffix already explained by a smaller period

    def find(self) -> tuple[int, int, int] | None:
        """(period, run length, repeats) of the first loop, or None."""
        q = self._next_candidate(1)
        while q is not None and q <= self.qmax:
            found = self._evaluate(q)
            if found is not None:
                return found
            q = self._next_candidate(q + 1)
        return None

    def _next_candidate(self, q: int) -> int | None:
        """The smallest period >= q at which the key recurs (and that could still matter)."""
        n, k, s = self.n, self.key_len, self.s
        while q <= self.qmax:
            if q + k > self.best:
                j = s.rfind(self.key, self.lowest, n - q)
                return None if j < 0 else n - k - j
            # Inside a region already periodic with a smaller period: only a q whose char
            # matches the one just before the region can make a longer suffix.
            anchor = n - self.best - 1
            if anchor < 0:
                return None  # the whole window is periodic: nothing longer exists
            x = s.find(s[anchor], anchor + q, n - k)
            if x < 0:
                q = self.best - k + 1
                continue
            q = x - anchor
            if s.startswith(self.key, n - k - q):
                return q
            q += 1
        return None

    def _evaluate(self, q: int) -> tuple[int, int, int] | None:
        s = self.s
        block = s[self.n - q :]
        repeats = required_repeats(q, block, self.in_fence, self.limits)
        if repeats is not None:
            need = max(self.best + 1, repeats * q)
            if need <= self.n and has_period(s, q, need):
                run = periodic_run(s, q)
                return q, run, run // q
        if has_period(s, q, self.best + 1):
            self.best = periodic_run(s, q)
        return None


class TailPeriodDetector:
    """Feed deltas; returns a Detection once the tail is a loop (then keeps returning None
    until ``reset()``, so the caller acts once)."""

    name = "tail_period"

    def __init__(self, limits: PeriodThresholds | None = None) -> None:
        self.limits = limits or PeriodThresholds()
        self.reset()

    def reset(self) -> None:
        self._window = ""
        self._pending: list[str] = []
        self._pending_chars = 0
        self._fed = 0
        self._fence = FenceTracker()
        self._fired = False

    @property
    def fed(self) -> int:
        return self._fed

    @property
    def in_fence(self) -> bool:
        return self._fence.inside

    def feed(self, delta: str) -> Detection | None:
        if not delta or self._fired:
            return None
        self._pending.append(delta)
        self._pending_chars += len(delta)
        self._fed += len(delta)
        if self._pending_chars < self.limits.check_every:
            return None
        return self.check()

    def check(self) -> Detection | None:
        """Run a check now over everything fed (also used at the end of a stream)."""
        if self._fired:
            return None
        new = "".join(self._pending)
        self._pending.clear()
        self._pending_chars = 0
        self._fence.feed(new)
        self._window = (self._window + new)[-self.limits.window :]
        found = _Scan(self._window, self._fence.inside, self.limits).find()
        if found is None:
            return None
        self._fired = True
        period, run, repeats = found
        start = self._fed - run
        window_start = self._fed - len(self._window)
        first = start - window_start
        return Detection(
            detector=self.name,
            period=period,
            repeats=repeats,
            loop_start=start,
            tail_length=run,
            excerpt=self._window[first : first + period],
        )
