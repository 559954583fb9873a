"""Token-block detector: a block of >= 4 tokens repeated >= 20 times back to back.

PURE: no IO, no clock. MiMo's ``TextNgramMonitor`` re-tokenizes its whole buffer on every
append and scans every period with a per-token loop. Here each delta is tokenized once (a C
regex), every token is interned to one character, and the window of the last 500 tokens is
therefore a ``str`` on which the tail-period tools (``rfind`` + slice compares) work at C speed.

Tokens follow MiMo: lower case, split on whitespace, each CJK character its own token.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from opencode_autoretry.repetition.period import Detection, has_period, periodic_run

_CJK = "\u3001-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff00-\uffef"
_TOKEN = re.compile(rf"[{_CJK}]|[^\s{_CJK}]+")
#: Interned tokens are coded from here up: BMP, clear of surrogates for ids < 0xD700.
_CODE_BASE = 0x100
#: One shared str object per code: every stream's interner points at these instead of
#: allocating its own one-char strings (they are immutable, so sharing is safe).
_CODES: list[str] = []


def _code(index: int) -> str:
    while len(_CODES) <= index:
        _CODES.append(chr(_CODE_BASE + len(_CODES)))
    return _CODES[index]


_code(2048)  # enough for the default window (the interner is renumbered past 2 x 500)


def tokenize(text: str) -> list[str]:
    """Lower-cased tokens; whitespace collapsed; each CJK character is one token."""
    return _TOKEN.findall(text.lower())


def is_separator_row(line: str) -> bool:
    stripped = line.strip()
    return "-" in stripped and "|" in stripped and not stripped.strip("|-: \t")


def is_table_heavy(region: str, context: str) -> bool:
    """Markdown-table output repeats its cells by design, so it is exempt.

    ``region`` (the looping tail) is table-heavy when more than 40% of its non-empty lines
    start with ``|`` or are separator rows, and ``context`` holds a separator row: pipe
    rows without one are not a table (MiMo's "pipe rows without a separator" case).
    """
    lines = [line.strip() for line in region.split("\n") if line.strip()]
    if not lines:
        return False
    table = sum(1 for line in lines if line.startswith("|") or is_separator_row(line))
    if table * 5 <= len(lines) * 2:
        return False
    return any(is_separator_row(line) for line in context.split("\n"))


@dataclass(frozen=True)
class TokenBlockLimits:
    window_tokens: int = 500
    min_block: int = 4
    copies: int = 20
    min_distinct: int = 3
    check_every: int = 256  # chars: deltas are tokenized and checked in batches
    raw_chars: int = 8000  # raw text kept for the table check and the excerpt


class _Interner(dict[str, str]):
    """token -> one private character; new tokens get the next code."""

    def __missing__(self, token: str) -> str:
        index = len(self)
        code = self[token] = _CODES[index] if index < len(_CODES) else _code(index)
        return code


class TokenBlockDetector:
    """Feed deltas; returns a Detection once the tail is a repeated token block.

    Checks are tail-anchored (the block must reach the end of what was fed) and run once
    ``check_every`` chars have arrived; token offsets are only recovered after a hit.
    """

    name = "token_block"

    def __init__(self, limits: TokenBlockLimits | None = None) -> None:
        self.limits = limits or TokenBlockLimits()
        self.reset()

    def reset(self) -> None:
        self._codes = ""  # one char per token, the last <= 2 * window tokens
        self._intern = _Interner()
        self._carry = ""  # a token that the next delta may continue
        self._raw_parts: list[str] = []
        self._raw_chars = 0
        self._pending: list[str] = []
        self._pending_chars = 0
        self._fed = 0
        self._fired = False

    def feed(self, delta: str) -> Detection | None:
        if not delta or self._fired:
            return None
        self._fed += len(delta)
        self._pending.append(delta)
        self._pending_chars += len(delta)
        if self._pending_chars < self.limits.check_every:
            return None
        return self.check()

    def check(self, final: bool = False) -> Detection | None:
        """Tokenize what is pending and check now; ``final`` (the stream has ended) also
        counts the last token, which otherwise waits for a delta that could continue it."""
        if self._fired:
            return None
        batch = "".join(self._pending)
        self._pending.clear()
        self._pending_chars = 0
        self._keep_raw(batch)
        if not self._add_tokens(self._carry + batch.lower(), final) and not final:
            return None
        found = self._find()
        if found is None:
            return None
        detection = self._detection(*found)
        if detection is None:
            return None
        self._fired = True
        return detection

    def _keep_raw(self, delta: str) -> None:
        self._raw_parts.append(delta)
        self._raw_chars += len(delta)
        if self._raw_chars > 2 * self.limits.raw_chars:
            raw = "".join(self._raw_parts)[-self.limits.raw_chars :]
            self._raw_parts = [raw]
            self._raw_chars = len(raw)

    def _token_starts(self, raw: str, wanted: int) -> list[int]:
        return _tail_token_starts(raw, wanted, bool(self._carry))

    def _raw(self) -> str:
        raw = "".join(self._raw_parts)
        self._raw_parts = [raw]
        return raw

    def _add_tokens(self, text: str, final: bool = False) -> int:
        # ASCII has no CJK to split, and str.split is several times faster than the regex.
        tokens = text.split() if text.isascii() else _TOKEN.findall(text)
        self._carry = ""
        if tokens and not final and not _ends_token(text):
            self._carry = tokens.pop()
        if not tokens:
            return 0
        self._codes += "".join(map(self._intern.__getitem__, tokens))
        window = self.limits.window_tokens
        if len(self._codes) > 2 * window:
            self._codes = self._codes[-window:]
        if len(self._intern) > 2 * window:
            self._reintern()
        return len(tokens)

    def _reintern(self) -> None:
        """Keep memory bounded: renumber only the tokens still in the window."""
        in_use = set(self._codes)
        kept = [(tok, code) for tok, code in self._intern.items() if code in in_use]
        table = {ord(code): _code(i) for i, (_, code) in enumerate(kept)}
        self._codes = self._codes.translate(table)
        self._intern = _Interner((tok, _code(i)) for i, (tok, _) in enumerate(kept))

    def _find(self) -> tuple[int, int] | None:
        limits = self.limits
        codes = self._codes[-limits.window_tokens :]
        n = len(codes)
        key_len = limits.min_block
        if n < limits.min_block * limits.copies:
            return None
        key = codes[n - key_len :]
        qmax = n // limits.copies
        lowest = max(0, n - key_len - qmax)
        q = limits.min_block
        while q <= qmax:
            j = codes.rfind(key, lowest, n - q)
            if j < 0:
                return None
            q = n - key_len - j
            if q > qmax:
                return None
            if (
                has_period(codes, q, q * limits.copies)
                and len(set(codes[n - q :])) >= limits.min_distinct
            ):
                return q, periodic_run(codes, q)
            q += 1
        return None

    def _detection(self, period: int, run: int) -> Detection | None:
        raw = self._raw()
        raw_start = self._fed - len(raw)
        starts = self._token_starts(raw, run + 1)
        first = max(0, len(starts) - run)
        loop_start = raw_start + starts[first] if starts else raw_start
        region = raw[loop_start - raw_start :]
        if is_table_heavy(region, raw):
            return None
        block_end = starts[first + period] if first + period < len(starts) else len(raw)
        return Detection(
            detector=self.name,
            period=period,
            repeats=run // period,
            loop_start=loop_start,
            tail_length=self._fed - loop_start,
            excerpt=raw[loop_start - raw_start : block_end],
        )


_CJK_CHAR = re.compile(f"[{_CJK}]")


def _tail_token_starts(raw: str, wanted: int, carry: bool) -> list[int]:
    """Start offsets (in ``raw``) of at least ``wanted`` final tokens, or of all of them.

    Only a tail slice is tokenized, doubled until it holds enough tokens: a hit should not
    cost a pass over the whole raw buffer. The slice's first token may be cut, which is why
    one more token than needed is asked for.
    """
    span = wanted * 8 + 64
    while True:
        begin = max(0, len(raw) - span)
        # Case never moves a token boundary, and lower() may change lengths: use the raw text.
        starts = [begin + m.start() for m in _TOKEN.finditer(raw[begin:])]
        if carry and starts:
            starts.pop()  # the unfinished token is not in the code string
        if len(starts) >= wanted + 1 or begin == 0:
            return starts
        span *= 2


def _ends_token(text: str) -> bool:
    """A delta ending in whitespace or a CJK character cannot be continued by the next."""
    last = text[-1]
    return last.isspace() or _CJK_CHAR.fullmatch(last) is not None
