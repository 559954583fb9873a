"""One more fake-provider behaviour for the hung-subagent scenarios (``install(provider)``).

- ``read_outside``: one ``read`` tool call for a file outside the project directory. OpenCode
  1.18 asks the ``external_directory`` permission first and waits, busy, however long
  (reference §2.6), so a subagent that gets it sits on a pending permission.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

from fake_provider import FakeProvider, _chunk, _usage

OUTSIDE = "/nonexistent/autoretry-e2e/notes.txt"


def read_outside(h: Any, arg: str, release: threading.Event) -> None:
    call = {"index": 0, "id": f"call_read_{time.time_ns()}", "type": "function",
            "function": {"name": "read", "arguments": json.dumps({"filePath": OUTSIDE})}}
    h._stream_head()
    h._send(_chunk({"role": "assistant", "tool_calls": [call]}))
    h._finish("tool_calls", _usage(10))


def install(provider: FakeProvider) -> FakeProvider:
    provider.responders.update({"read_outside": read_outside})
    return provider
