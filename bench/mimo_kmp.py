"""Benchmark baseline: a straightforward Python port of MiMo's windowed KMP loop detector.

Benchmark-only (never imported by the package). Behaviour per prior-art.md §b2: the last
8192 chars are kept; every 256 new chars the tail is reversed and a KMP prefix function gives
the smallest period of every suffix; a suffix whose period p repeats often enough is a loop
(p=1 >=300, p<5 >=80, p<15 >=40, p<50 >=16, p<200 >=8, else >=5; inside an open ``` fence
only p >= 30 with >= 24 copies). Fence parity counts ``` with a 2-char carry.
"""

from __future__ import annotations

WINDOW = 8192
CHECK_INTERVAL = 256


def is_loop(period: int, count: int, in_code: bool) -> bool:
    if in_code:
        return period >= 30 and count >= 24
    if period == 1:
        return count >= 300
    if period < 5:
        return count >= 80
    if period < 15:
        return count >= 40
    if period < 50:
        return count >= 16
    if period < 200:
        return count >= 8
    return count >= 5


class MimoKmpDetector:
    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.buffer = ""
        self.pending = 0
        self.fences = 0
        self.carry = ""

    def append(self, text: str) -> tuple[int, int] | None:
        """(period, count) when the tail loops, else None."""
        if not text:
            return None
        scan = self.carry + text
        self.fences += scan.count("```")
        self.carry = scan[-2:]
        self.buffer += text
        if len(self.buffer) > WINDOW * 2:
            self.buffer = self.buffer[-WINDOW:]
        self.pending += len(text)
        if self.pending < CHECK_INTERVAL:
            return None
        self.pending = 0
        return self.check()

    def check(self) -> tuple[int, int] | None:
        n = min(len(self.buffer), WINDOW)
        if n < 16:
            return None
        in_code = self.fences % 2 == 1
        s = self.buffer[-n:][::-1]
        pi = [0] * n
        for i in range(1, n):
            j = pi[i - 1]
            while j > 0 and s[i] != s[j]:
                j = pi[j - 1]
            if s[i] == s[j]:
                j += 1
            pi[i] = j
        for i in range(1, n):
            if pi[i] == 0:
                continue
            length = i + 1
            period = length - pi[i]
            count = length // period
            if count >= 2 and is_loop(period, count, in_code):
                return period, count
        return None
