"""Paced looping answers for the fake provider (repetition e2e, issue 6).

``install(provider)`` adds two behaviours: ``loop[:n]`` (the fake sentence n times as text,
default 400) and ``thinkloop[:n]`` (the same as reasoning only, never any text). Unlike
``repeat``, they stream one word per chunk ``PACE_S`` apart and stop as soon as the client
hangs up (OpenCode aborting the stream), so a test can see how far a loop got before it was
stopped: ``LoopLog.wait_for(count, timeout)`` returns one ``Streamed`` per ended response.
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass
from typing import Any

from fake_provider import REPEATED, FakeProvider, _chunk, _usage

PACE_S = 0.004  # 400 sentences (3,200 words) take ~13 s when nobody stops them
DEFAULT_COPIES = 400


@dataclass(frozen=True)
class Streamed:
    behaviour: str
    words: int  # chunks of one word sent
    chars: int
    completed: bool  # False: the client hung up first


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
            h._send(_chunk({field_name: word}))
            sent, chars = sent + 1, chars + len(word)
            time.sleep(PACE_S)  # pacing the stream, not synchronising the test
        reasoning = sent if field_name == "reasoning_content" else 0
        h._finish("stop", _usage(sent, reasoning=reasoning))
    except OSError:  # the client hung up: OpenCode aborted the stream
        log.add(Streamed(behaviour, sent, chars, False))
        return
    log.add(Streamed(behaviour, sent, chars, True))


def install(provider: FakeProvider) -> LoopLog:
    """Register ``loop`` and ``thinkloop`` on ``provider``; returns their log."""
    log = LoopLog()

    def loop(h: Any, arg: str, release: threading.Event) -> None:
        _paced(h, log, f"loop:{arg}", "content", int(arg or DEFAULT_COPIES))

    def thinkloop(h: Any, arg: str, release: threading.Event) -> None:
        _paced(h, log, f"thinkloop:{arg}", "reasoning_content", int(arg or DEFAULT_COPIES))

    provider.responders.update({"loop": loop, "thinkloop": thinkloop})
    return log
