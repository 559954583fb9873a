"""Two more fake-provider behaviours for the daemon scenarios (``install(provider)``).

- ``reset_chunked[:n]``: a *chunked* SSE body cut by a TCP RST after n text chunks. OpenCode
  1.18 reports it as ``Connection reset by server`` and retries it itself (reference §2.6);
  the built-in ``reset`` ends a close-delimited body, which OpenCode reads as a clean stream
  without finish reason instead (the runaway loop).
- ``task[:fault]``: one ``task`` tool call (subagent ``general``) whose prompt carries the
  marker ``[[s:fault]]`` (default ``http429:0.1``), so the child session gets the fault.
"""

from __future__ import annotations

import json
import re
import socket
import struct
import threading
import time
from typing import Any

from fake_provider import NORMAL_TEXT, FakeProvider, _chunk, _usage


def _frame(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def reset_chunked(h: Any, arg: str, release: threading.Event) -> None:
    h.send_response(200)
    h.send_header("content-type", "text/event-stream")
    h.send_header("transfer-encoding", "chunked")
    h.end_headers()
    for word in re.findall(r"\S+\s*", NORMAL_TEXT)[: int(arg or 3)]:
        h.wfile.write(_frame(_chunk({"content": word})))
        h.wfile.flush()
    # SO_LINGER 0 turns close() into a TCP RST in the middle of the chunked body.
    h.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    h.connection.close()
    h.close_connection = True


def task(h: Any, arg: str, release: threading.Event) -> None:
    fault = arg.replace("-", ":") if arg else "http429:0.1"
    args = json.dumps({"description": "Fake subtask", "subagent_type": "general",
                       "prompt": f"Do the subtask [[s:{fault}]]"})
    call = {"index": 0, "id": f"call_task_{time.time_ns()}", "type": "function",
            "function": {"name": "task", "arguments": args}}
    h._stream_head()
    h._send(_chunk({"role": "assistant", "tool_calls": [call]}))
    h._finish("tool_calls", _usage(10))


def install(provider: FakeProvider) -> FakeProvider:
    provider.responders.update({"reset_chunked": reset_chunked, "task": task})
    return provider
