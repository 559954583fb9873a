"""Two more fake-provider behaviours for the soak (issue 11; ``install(provider)``).

- ``toolastext``: the model writes its tool call as plain text (``<tool_call>…</tool_call>``)
  and stops; OpenCode runs nothing, the classifier calls it ``tool_as_text``.
- ``http503[:retry_after]``: a 503 with a Retry-After (default 0.1 s), so OpenCode's own six
  attempts take a second instead of the ~69 s a bare 500 costs (reference §2.6): ``server_error``.
- ``truncated``: some text, then finish ``length`` with output tokens > 0 (a real truncation,
  unlike ``length``, which forges it with 0 output): kind ``truncated``, the length budget.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from fake_provider import FakeProvider, _chunk, _usage

TOOL_AS_TEXT = '<tool_call>{"name": "bash", "arguments": {"command": "echo hi"}}</tool_call>'
TRUNCATED_TEXT = ("The first half of a long answer that the length limit cuts ", "off here")


def toolastext(h: Any, arg: str, release: threading.Event) -> None:
    h._stream_head()
    h._send(_chunk({"role": "assistant", "content": "I will run it now. "}))
    h._send(_chunk({"content": TOOL_AS_TEXT}))
    h._finish("stop", _usage(12))


def truncated(h: Any, arg: str, release: threading.Event) -> None:
    h._stream_head()
    h._send(_chunk({"role": "assistant", "content": ""}))
    for piece in TRUNCATED_TEXT:
        h._send(_chunk({"content": piece}))
    h._finish("length", _usage(len(json.dumps(TRUNCATED_TEXT)) // 4))


def http503(h: Any, arg: str, release: threading.Event) -> None:
    body = {"error": {"message": "Service unavailable (fake)", "type": "server_error"}}
    h._json(503, body, {"retry-after": arg or "0.1"})


def install(provider: FakeProvider) -> FakeProvider:
    provider.responders.update(
        {"toolastext": toolastext, "truncated": truncated, "http503": http503}
    )
    return provider
