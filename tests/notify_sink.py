"""A local webhook receiver on 127.0.0.1 for the notification tests (unit and e2e).

``mode`` is ``ok`` (204), ``fail`` (500), ``hang`` (holds the request until ``release()``),
``redirect`` (302 to ``location``) or ``drip`` (its answer one byte every ``drip_every``
seconds, each byte within any per-operation timeout).
Every POST is kept with its arrival time (``time.time()``) and parsed JSON body.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import Any

from loopback_http import LoopbackServer


@dataclass(frozen=True)
class Received:
    at: float
    path: str
    body: dict[str, Any]


class WebhookSink:
    def __init__(self, mode: str = "ok") -> None:
        self.mode = mode
        self.location = ""
        self.drip_every = 0.2
        self._received: list[Received] = []
        self._cond = threading.Condition()
        self._release = threading.Event()
        self._server = LoopbackServer(self._handler())
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/hook/s3cret-path?token=t0k"

    def release(self) -> None:
        self._release.set()

    def close(self) -> None:
        self._release.set()
        self._server.shutdown()
        self._server.server_close()

    def received(self) -> list[Received]:
        with self._cond:
            return list(self._received)

    def wait_for(self, count: int, timeout: float) -> list[Received]:
        deadline = time.monotonic() + timeout
        with self._cond:
            while len(self._received) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"webhook: wanted {count} posts in {timeout}s, "
                                         f"got {[r.body.get('event') for r in self._received]}")
                self._cond.wait(left)
            return list(self._received)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        sink = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                return

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                with sink._cond:
                    sink._received.append(Received(time.time(), self.path, body))
                    sink._cond.notify_all()
                if sink.mode == "hang":
                    sink._release.wait(120)
                if sink.mode == "redirect":
                    self.send_response(302)
                    self.send_header("location", sink.location)
                    self.send_header("content-length", "0")
                    self.end_headers()
                    return
                if sink.mode == "drip":
                    self._drip(b"HTTP/1.1 204 No Content\r\ncontent-length: 0\r\n\r\n")
                    return
                status = 500 if sink.mode == "fail" else 204
                self.send_response(status)
                self.send_header("content-length", "0")
                self.end_headers()

            def _drip(self, answer: bytes) -> None:
                for byte in answer:
                    if sink._release.wait(sink.drip_every):
                        return
                    try:
                        self.wfile.write(bytes([byte]))
                        self.wfile.flush()
                    except OSError:
                        return  # the client gave up: what the deadline test waits for

        return Handler
