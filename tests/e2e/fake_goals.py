"""Fake-provider behaviours for the goal scenarios (issue 22, ``install(provider)``).

- ``done``: a reply that says the work is done (the goal's check then decides);
- ``ask``: a reply that asks the user a question (never checked, never continued).

A goal's continuation carries the check's output; the scenarios' checks print ``[[s:done]]``
so that the fake model answers each continuation with ``done`` in whichever session it runs.
"""

from __future__ import annotations

import threading
from typing import Any

from fake_provider import FakeProvider

#: Each reply says it differently: the same reply three times in a row is a loop to the
#: repetition guard, which would rightly step in.
#: Each reads as "done" to the reply guard (a test of its own pins that).
DONE_TEXTS = (
    "All done: the parser is in place and its tests pass.",
    "All done: the tokenizer is rewritten and the failing case parses.",
    "All done: the grammar handles nested blocks and the suite is green.",
    "All done: error messages carry line numbers now.",
)
_said = iter(range(10**9))
ASK_TEXT = "I wrote the plan. Should I use SQLite or Postgres for the store?"


def done(h: Any, arg: str, release: threading.Event) -> None:
    h._text(DONE_TEXTS[next(_said) % len(DONE_TEXTS)])


def ask(h: Any, arg: str, release: threading.Event) -> None:
    h._text(ASK_TEXT)


def install(provider: FakeProvider) -> FakeProvider:
    provider.responders.update({"done": done, "ask": ask})
    return provider
