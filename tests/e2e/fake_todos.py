"""Fake-provider behaviours for the unfinished-todos scenarios (``install(provider)``).

- ``todowrite:<status>,<status>...``: one real ``todowrite`` tool call writing the todos
  ``TODO_NAMES`` with those statuses (``pending``, ``in_progress``, ``completed``), so OpenCode
  fills its ``todo`` table and emits ``todo.updated``;
- ``question:<text>``: one real ``question`` tool call asking ``<text>`` with two options (the
  tool exists when OpenCode runs with ``OPENCODE_ENABLE_QUESTION_TOOL=1``; it then waits for
  the user's answer);
- ``say:<text>``: a plain reply ``<text>`` ending with finish ``stop`` (any text: queue it with
  ``provider.script([...])``, markers cannot carry spaces).
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

from fake_provider import FakeProvider, _chunk, _usage

TODO_NAMES = ("Write the parser", "Add the parser tests", "Document the parser")


def todowrite(h: Any, arg: str, release: threading.Event) -> None:
    statuses = [s.strip() for s in (arg or "pending,pending").split(",") if s.strip()]
    todos = [
        {"id": str(i + 1), "content": TODO_NAMES[i], "status": status, "priority": "medium"}
        for i, status in enumerate(statuses)
    ]
    call = {"index": 0, "id": f"call_todo_{time.time_ns()}", "type": "function",
            "function": {"name": "todowrite", "arguments": json.dumps({"todos": todos})}}
    h._stream_head()
    h._send(_chunk({"role": "assistant", "tool_calls": [call]}))
    h._finish("tool_calls", _usage(10))


def question(h: Any, arg: str, release: threading.Event) -> None:
    ask = {"question": arg or "SQLite or Postgres?", "header": "Store",
           "options": [{"label": "SQLite", "description": "a file"},
                       {"label": "Postgres", "description": "a server"}]}
    call = {"index": 0, "id": f"call_question_{time.time_ns()}", "type": "function",
            "function": {"name": "question", "arguments": json.dumps({"questions": [ask]})}}
    h._stream_head()
    h._send(_chunk({"role": "assistant", "tool_calls": [call]}))
    h._finish("tool_calls", _usage(10))


def say(h: Any, arg: str, release: threading.Event) -> None:
    h._text(arg or "OK.")


def install(provider: FakeProvider) -> FakeProvider:
    provider.responders.update({"todowrite": todowrite, "say": say, "question": question})
    return provider
