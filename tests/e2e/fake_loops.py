"""Paced looping answers for the fake provider (repetition e2e, issue 6).

``install(provider)`` adds two behaviours: ``loop[:n]`` (the fake sentence n times as text,
default 400) and ``thinkloop[:n]`` (the same as reasoning only, never any text). Unlike
``repeat``, they stream one word per chunk ``PACE_S`` apart and stop as soon as the client
hangs up (OpenCode aborting the stream), so a test can see how far a loop got before it was
stopped: ``LoopLog.wait_for(count, timeout)`` returns one ``Streamed`` per ended response.

After ``HOLD_AFTER_WORDS`` words the stream pauses until the client hangs up (or ``HOLD_S``
passes, then it runs to its end). "Stopped within a few hundred words" is then a fact about
the detector, not about how fast this machine delivered the abort: however slow the abort,
it finds the stream at word 300 at the latest; a detector needing more never gets it, and the
answer completes (the test's failure).
"""

from __future__ import annotations

import re
import select
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any

from fake_provider import REPEATED, FakeProvider, _chunk, _usage

PACE_S = 0.004  # 400 sentences (3,200 words) take ~13 s when nobody stops them
DEFAULT_COPIES = 400
HOLD_AFTER_WORDS = 300  # "within a few hundred repeated tokens" (issue 6)
HOLD_S = 30.0  # how long a held stream waits for the hang-up before it goes on


@dataclass(frozen=True)
class Streamed:
    behaviour: str
    words: int  # chunks of one word sent
    chars: int
    completed: bool  # False: the client hung up first
    held: bool = False  # the client hung up while the stream paused at HOLD_AFTER_WORDS


class LoopLog:
    def __init__(self) -> None:
        self._items: list[Streamed] = []
        self._cond = threading.Condition()

    def add(self, item: Streamed) -> None:
        with self._cond:
            self._items.append(item)
            self._cond.notify_all()

    def clear(self) -> None:
        with self._cond:
            self._items.clear()

    def wait_for(self, count: int, timeout: float) -> list[Streamed]:
        deadline = time.monotonic() + timeout
        with self._cond:
            while len(self._items) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(
                        f"fake loops: wanted {count} ended loops within {timeout}s, "
                        f"saw {self._items}"
                    )
                self._cond.wait(left)
            return list(self._items)


def _paced(h: Any, log: LoopLog, behaviour: str, field_name: str, copies: int) -> None:
    h._stream_head()
    words = re.findall(r"\S+\s*", REPEATED * copies)
    sent = chars = 0
    try:
        h._send(_chunk({"role": "assistant", field_name: ""}))
        for word in words:
            if sent == HOLD_AFTER_WORDS and _hung_up_within(h.connection, HOLD_S):
                log.add(Streamed(behaviour, sent, chars, False, held=True))
                return
            h._send(_chunk({field_name: word}))
            sent, chars = sent + 1, chars + len(word)
            time.sleep(PACE_S)  # pacing the stream, not synchronising the test
        reasoning = sent if field_name == "reasoning_content" else 0
        h._finish("stop", _usage(sent, reasoning=reasoning))
    except OSError:  # the client hung up: OpenCode aborted the stream
        log.add(Streamed(behaviour, sent, chars, False))
        return
    log.add(Streamed(behaviour, sent, chars, True))


def _hung_up_within(conn: socket.socket, timeout: float) -> bool:
    """Wait for the client to close its end: the request was read whole, so the connection
    turns readable only at EOF (or a reset)."""
    readable, _, _ = select.select([conn], [], [], timeout)
    if not readable:
        return False
    try:
        return conn.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


def install(provider: FakeProvider) -> LoopLog:
    """Register ``loop`` and ``thinkloop`` on ``provider``; returns their log."""
    log = LoopLog()

    def loop(h: Any, arg: str, release: threading.Event) -> None:
        _paced(h, log, f"loop:{arg}", "content", int(arg or DEFAULT_COPIES))

    def thinkloop(h: Any, arg: str, release: threading.Event) -> None:
        _paced(h, log, f"thinkloop:{arg}", "reasoning_content", int(arg or DEFAULT_COPIES))

    provider.responders.update({"loop": loop, "thinkloop": thinkloop})
    return log
