"""A scripted OpenAI-compatible provider for the e2e suite (127.0.0.1 only, port 0).

Behaviour per chat request, first match wins:
1. a title-generation request (model ``fake-small`` or a title system prompt) -> ``title``;
2. the next entry of the test's script (``provider.script(["http429:1", "normal"])``);
3. the request answers a tool result (last message role ``tool``) -> ``normal``;
4. a marker ``[[s:NAME]]`` / ``[[s:NAME:ARG]]`` in the latest user message text;
5. ``normal``.

Behaviours (``name[:arg]``): normal, tool, blank (finish stop, 0 output), length (finish
length, 0 output), reasoning (reasoning only), http400_disconnect, http429[:retry_after_s],
http500, reset[:chunks] (RST after some chunks), noreason ([DONE] without finish_reason),
stall (headers, then nothing until released/closed), repeat[:n] (one sentence n times).
More behaviours can be added per provider: ``provider.responders[name] = fn`` (fake_loops.py).
Every request is logged (``provider.requests``); tests assert on the log.

The Anthropic Messages API (``POST /v1/messages``, OpenCode's ``@ai-sdk/anthropic`` provider
``fakeanthropic``) is served too: there ``normal`` (and a tool result) is ``anthropic``, the
Messages event stream (message_start, ping, a thinking block, a text block, usage in
message_delta, message_stop); the fault shapes of Anthropic are in fake_shapes.py.
"""

from __future__ import annotations

import json
import re
import socket
import struct
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from loopback_http import LoopbackServer

MARKER = re.compile(r"\[\[s:([a-z0-9_]+)(?::([a-z0-9_.]+))?\]\]")
SMALL_MODEL = "fake-small"
NORMAL_TEXT = "Hello from the fake model. This is a normal answer. "
REPEATED = "The same sentence comes again and again. "
DISCONNECT_400 = "Connection failed: Server disconnected without sending a response."
BEHAVIOURS = (
    "normal",
    "tool",
    "blank",
    "length",
    "reasoning",
    "http400_disconnect",
    "http429",
    "http500",
    "reset",
    "noreason",
    "stall",
    "repeat",
    "title",
    "anthropic",
)
ANTHROPIC_PATH = "/messages"


@dataclass(frozen=True)
class ProviderRequest:
    at: float  # time.time()
    path: str
    model: str
    messages: list[dict[str, Any]] = field(repr=False)
    behaviour: str
    is_title: bool
    stream: bool
    body: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)  # the JSON

    @property
    def last_user_text(self) -> str:
        return last_user_text(self.messages)


def _text_of(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def last_user_text(messages: list[dict[str, Any]]) -> str:
    for message in reversed(messages):
        if message.get("role") == "user":
            return _text_of(message.get("content"))
    return ""


def last_block_text(messages: list[dict[str, Any]]) -> str:
    """The latest user text block: the Messages API merges consecutive user messages into one
    (a continuation after a failed step joins the prompt's), so only its last block is new."""
    for message in reversed(messages):
        content = message.get("content")
        if message.get("role") == "user" and isinstance(content, list):
            texts = [p.get("text", "") for p in content
                     if isinstance(p, dict) and p.get("type") == "text"]
            return texts[-1] if texts else ""
        if message.get("role") == "user":
            return _text_of(content)
    return ""


def _is_title(body: dict[str, Any]) -> bool:
    if body.get("model") == SMALL_MODEL:
        return True
    systems = [
        _text_of(m.get("content")) for m in body.get("messages", []) if m.get("role") == "system"
    ]
    return any("title" in s.lower() and "generat" in s.lower() for s in systems)


def _chunk(
    delta: dict[str, Any], finish: str | None = None, usage: dict[str, int] | None = None
) -> bytes:
    payload: dict[str, Any] = {
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": "fake-model",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    if usage is not None:
        payload["usage"] = usage
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


def _usage(output: int, reasoning: int = 0) -> dict[str, Any]:
    usage: dict[str, Any] = {
        "prompt_tokens": 100,
        "completion_tokens": output,
        "total_tokens": 100 + output,
    }
    if reasoning:
        usage["completion_tokens_details"] = {"reasoning_tokens": reasoning}
    return usage


class FakeProvider:
    """Start with ``FakeProvider().start()``; ``url`` is the ``/v1`` base URL for OpenCode."""

    def __init__(self) -> None:
        self._script: deque[str] = deque()
        self._log: list[ProviderRequest] = []
        self.responders: dict[str, Callable[[Any, str, threading.Event], None]] = {}
        self._cond = threading.Condition()
        self._release = threading.Event()
        self._server = LoopbackServer(self._handler_class())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def start(self) -> FakeProvider:
        self._thread.start()
        return self

    def close(self) -> None:
        self._release.set()
        self._server.shutdown()
        self._server.server_close()

    # ---------------------------------------------------------------- test API

    def script(self, behaviours: list[str]) -> None:
        """Queue behaviours for the next non-title requests (before markers apply)."""
        with self._cond:
            self._script.extend(behaviours)

    def reset(self) -> None:
        """Forget the script and the log, release stalls (called between tests)."""
        with self._cond:
            self._script.clear()
            self._log.clear()
        self._release.set()
        self._release = threading.Event()

    def requests(self, include_titles: bool = False) -> list[ProviderRequest]:
        with self._cond:
            return [r for r in self._log if include_titles or not r.is_title]

    def wait_for_requests(
        self, count: int, timeout: float, include_titles: bool = False
    ) -> list[ProviderRequest]:
        deadline = time.monotonic() + timeout
        with self._cond:
            while len([r for r in self._log if include_titles or not r.is_title]) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    seen = [(r.behaviour, r.model) for r in self._log]
                    raise AssertionError(
                        f"provider: wanted {count} requests within {timeout}s, saw {seen}"
                    )
                self._cond.wait(left)
        return self.requests(include_titles)

    # ---------------------------------------------------------------- internals

    def _choose(self, body: dict[str, Any], anthropic: bool = False) -> tuple[str, bool]:
        if _is_title(body):
            return "title", True
        messages = body.get("messages", [])
        with self._cond:
            if self._script:
                return self._script.popleft(), False
        if messages and messages[-1].get("role") == "tool":
            return "normal", False
        latest = last_block_text(messages) if anthropic else last_user_text(messages)
        match = MARKER.search(latest)
        if match:
            return (f"{match[1]}:{match[2]}" if match[2] else match[1]), False
        return "normal", False

    def _record(self, request: ProviderRequest) -> None:
        with self._cond:
            self._log.append(request)
            self._cond.notify_all()

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        provider = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:  # keep pytest output clean
                return

            def do_GET(self) -> None:
                if self.path.rstrip("/").endswith("/models"):
                    body = {
                        "object": "list",
                        "data": [
                            {"id": "fake-model", "object": "model", "owned_by": "fake"},
                            {"id": SMALL_MODEL, "object": "model", "owned_by": "fake"},
                        ],
                    }
                    self._json(200, body)
                else:
                    self._json(404, {"error": {"message": "not found"}})

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                anthropic = self.path.endswith(ANTHROPIC_PATH)
                behaviour, is_title = provider._choose(body, anthropic)
                if anthropic and behaviour in ("normal", "title"):
                    behaviour = "anthropic"  # the same answer, in the Messages API's shape
                provider._record(
                    ProviderRequest(
                        at=time.time(),
                        path=self.path,
                        model=str(body.get("model")),
                        messages=body.get("messages", []),
                        behaviour=behaviour,
                        is_title=is_title,
                        stream=bool(body.get("stream")),
                        body=body,
                    )
                )
                name, _, arg = behaviour.partition(":")
                act = RESPONDERS.get(name) or provider.responders.get(name)
                if act is None:
                    self._json(400, {"error": {"message": f"fake: unknown behaviour {behaviour}"}})
                    return
                act(self, arg, provider._release)

            def _json(
                self, status: int, body: object, headers: dict[str, str] | None = None
            ) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)

            def _stream_head(self) -> None:
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("cache-control", "no-cache")
                self.send_header("connection", "close")
                self.end_headers()
                self.close_connection = True

            def _send(self, data: bytes) -> None:
                self.wfile.write(data)
                self.wfile.flush()

            def _finish(self, finish: str | None, usage: dict[str, Any]) -> None:
                if finish is not None:
                    self._send(_chunk({}, finish, usage))
                self._send(b"data: [DONE]\n\n")

            def _text(self, text: str, finish: str | None = "stop") -> None:
                self._stream_head()
                self._send(_chunk({"role": "assistant", "content": ""}))
                words = re.findall(r"\S+\s*", text)
                for word in words:
                    self._send(_chunk({"content": word}))
                self._finish(finish, _usage(len(words)))

            def _event(self, event: dict[str, Any]) -> None:
                """One Anthropic Messages SSE event (``event:`` line = its ``type``)."""
                line = f"event: {event['type']}\ndata: {json.dumps(event)}\n\n"
                self._send(line.encode())

            def _reset(self, chunks: int) -> None:
                self._stream_head()
                for word in re.findall(r"\S+\s*", NORMAL_TEXT)[:chunks]:
                    self._send(_chunk({"content": word}))
                # SO_LINGER 0 turns close() into a TCP RST: "connection reset mid-stream".
                self.connection.setsockopt(
                    socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                )
                self.connection.close()

        return Handler


def _normal(h: Any, arg: str, release: threading.Event) -> None:
    h._text(NORMAL_TEXT)


def _title(h: Any, arg: str, release: threading.Event) -> None:
    h._text("Fake title")


def _tool(h: Any, arg: str, release: threading.Event) -> None:
    h._stream_head()
    args = json.dumps({"command": "echo hi-from-tool", "description": "Echo a string"})
    call = {
        "index": 0,
        "id": f"call_fake_{int(time.time() * 1000)}",
        "type": "function",
        "function": {"name": "bash", "arguments": args},
    }
    h._send(_chunk({"role": "assistant", "tool_calls": [call]}))
    h._finish("tool_calls", _usage(10))


def _empty(finish: str) -> Callable[[Any, str, threading.Event], None]:
    def respond(h: Any, arg: str, release: threading.Event) -> None:
        h._stream_head()
        h._send(_chunk({"role": "assistant", "content": ""}))
        h._finish(finish, _usage(0))

    return respond


def _reasoning(h: Any, arg: str, release: threading.Event) -> None:
    h._stream_head()
    for word in ("Let ", "me ", "think ", "about ", "this."):
        h._send(_chunk({"role": "assistant", "reasoning_content": word}))
    h._finish("stop", _usage(5, reasoning=5))


def _http(
    status: int, message: str, kind: str, retry_after: str | None = None
) -> Callable[..., None]:
    def respond(h: Any, arg: str, release: threading.Event) -> None:
        headers = {"retry-after": arg or retry_after} if retry_after is not None else None
        h._json(status, {"error": {"message": message, "type": kind}}, headers)

    return respond


def _noreason(h: Any, arg: str, release: threading.Event) -> None:
    h._text(NORMAL_TEXT, finish=None)


def _stall(h: Any, arg: str, release: threading.Event) -> None:
    h._stream_head()
    release.wait(float(arg or 600))


def _repeat(h: Any, arg: str, release: threading.Event) -> None:
    h._text(REPEATED * int(arg or 30))


def anthropic_start(h: Any) -> None:
    """Headers, ``message_start`` and a ``ping``: how every Messages stream opens."""
    h._stream_head()
    message = {
        "id": "msg_fake", "type": "message", "role": "assistant", "model": "claude-fake",
        "content": [], "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": 100, "output_tokens": 1},
    }
    h._event({"type": "message_start", "message": message})
    h._event({"type": "ping"})


def anthropic_text_block(h: Any, index: int, text: str) -> int:
    """A text block, one delta per word; returns how many deltas it sent."""
    h._event({"type": "content_block_start", "index": index,
              "content_block": {"type": "text", "text": ""}})
    words = re.findall(r"\S+\s*", text)
    for word in words:
        h._event({"type": "content_block_delta", "index": index,
                  "delta": {"type": "text_delta", "text": word}})
    h._event({"type": "content_block_stop", "index": index})
    return len(words)


def _anthropic(h: Any, arg: str, release: threading.Event) -> None:
    anthropic_start(h)
    h._event({"type": "content_block_start", "index": 0,
              "content_block": {"type": "thinking", "thinking": "", "signature": ""}})
    h._event({"type": "content_block_delta", "index": 0,
              "delta": {"type": "thinking_delta", "thinking": "The user wants a greeting."}})
    h._event({"type": "content_block_delta", "index": 0,
              "delta": {"type": "signature_delta", "signature": "c2lnLWZha2U="}})
    h._event({"type": "content_block_stop", "index": 0})
    words = anthropic_text_block(h, 1, NORMAL_TEXT)
    h._event({"type": "ping"})
    h._event({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
              "usage": {"output_tokens": words + 6}})
    h._event({"type": "message_stop"})


RESPONDERS: dict[str, Callable[[Any, str, threading.Event], None]] = {
    "normal": _normal,
    "title": _title,
    "tool": _tool,
    "blank": _empty("stop"),
    "length": _empty("length"),
    "reasoning": _reasoning,
    "http400_disconnect": _http(400, DISCONNECT_400, "invalid_request_error"),
    "http429": _http(429, "Rate limit exceeded (fake)", "rate_limit_error", retry_after="1"),
    "http500": _http(500, "Internal server error (fake)", "server_error"),
    "reset": lambda h, arg, release: h._reset(int(arg or 3)),
    "noreason": _noreason,
    "stall": _stall,
    "repeat": _repeat,
    "anthropic": _anthropic,
}
