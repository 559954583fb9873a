"""The suite's loopback HTTP servers (the fake provider, the webhook sink, the OTLP receiver).

A client that hangs up is part of what these servers see: OpenCode aborts a stream or drops a
keep-alive connection, an exporter shuts down. ``socketserver`` would print the reset of a
connection it was reading from as a traceback in the middle of the suite's output (seen once in
a CI run: ``ConnectionResetError`` in ``handle_one_request``); any other error still prints.
"""

from __future__ import annotations

import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

#: What a client hanging up raises in the server's thread.
HUNG_UP = (ConnectionResetError, BrokenPipeError)


class LoopbackServer(ThreadingHTTPServer):
    """A threading HTTP server on 127.0.0.1 (port chosen by the kernel) whose request threads
    never keep the process alive, quiet about clients that hang up."""

    daemon_threads = True

    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        super().__init__(("127.0.0.1", 0), handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], HUNG_UP):
            return
        super().handle_error(request, client_address)
