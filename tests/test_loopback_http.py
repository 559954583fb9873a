"""The suite's loopback HTTP servers say nothing when a client hangs up, and still print any
other error of a request (tests/loopback_http.py)."""

from __future__ import annotations

import socket
import struct
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest
from loopback_http import LoopbackServer


class _Failing(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        raise ValueError("the handler's own bug")

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _Watched(LoopbackServer):
    """Tells the test which error each request ended with, once it was handled."""

    def __init__(self) -> None:
        super().__init__(_Failing)
        self.errors: list[BaseException | None] = []
        self.handled = threading.Event()

    def handle_error(self, request: Any, client_address: Any) -> None:
        self.errors.append(sys.exc_info()[1])
        super().handle_error(request, client_address)
        self.handled.set()


@pytest.fixture()
def server() -> Iterator[_Watched]:
    running = _Watched()
    threading.Thread(target=running.serve_forever, daemon=True).start()
    try:
        yield running
    finally:
        running.shutdown()
        running.server_close()


def test_a_client_that_resets_its_connection_is_not_printed(
    server: _Watched, capsys: pytest.CaptureFixture[str]
) -> None:
    client = socket.create_connection(server.server_address, timeout=10)
    client.sendall(b"GET / HTTP/1.1\r\n")  # the server waits for the rest of the headers
    client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    client.close()  # with a zero linger: a reset, as OpenCode dropping a connection
    assert server.handled.wait(10), "the server never reported the reset"
    assert [type(e) for e in server.errors] == [ConnectionResetError]
    assert capsys.readouterr().err == ""


def test_any_other_error_is_still_printed(
    server: _Watched, capsys: pytest.CaptureFixture[str]
) -> None:
    host, port = server.server_address[:2]
    with pytest.raises((urllib.error.URLError, ConnectionError)):
        urllib.request.urlopen(f"http://{host!s}:{port}/", timeout=10)
    assert server.handled.wait(10), "the server never reported the handler's error"
    assert [type(e) for e in server.errors] == [ValueError]
    assert "ValueError: the handler's own bug" in capsys.readouterr().err
