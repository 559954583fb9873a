"""The soak's socket proxy (tests/e2e/soak_chaos.py): bytes pass as they are, and a cut lets
only part of a line through before closing both ends (issue 11)."""

from __future__ import annotations

import socket
import tempfile
import threading
from pathlib import Path

from soak_chaos import Gate, SocketProxy, _cut_point


def _upstream(path: Path, got: list[bytes], done: threading.Event) -> socket.socket:
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(1)

    def serve() -> None:
        conn, _ = server.accept()
        while data := conn.recv(4096):
            got.append(data)
            if data.endswith(b"\n"):
                conn.sendall(b"ack\n")
        done.set()

    threading.Thread(target=serve, daemon=True).start()
    return server


def test_a_cut_leaves_a_partial_line_and_closes_both_ends():
    directory = Path(tempfile.mkdtemp(prefix="ar-proxy-", dir="/tmp"))
    got: list[bytes] = []
    done = threading.Event()
    upstream = _upstream(directory / "up.sock", got, done)
    proxy = SocketProxy(directory / "proxy.sock", directory / "up.sock").start()
    try:
        client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        client.connect(str(proxy.listen))
        client.sendall(b'{"type":"hello"}\n')
        assert client.recv(16) == b"ack\n"  # passes both ways untouched
        cutter = threading.Thread(target=proxy.cut, args=(10,))
        cutter.start()
        assert proxy._armed.wait(5)  # armed by the other thread before we send
        client.sendall(b'{"type":"event","payload":"long enough"}\n')
        cutter.join(10)
        assert done.wait(10) and proxy.cuts == 1
        assert not b"".join(got[1:]).endswith(b"\n") and got[1:]
        assert client.recv(16) == b""  # the bridge side is closed too
    finally:
        proxy.close()
        upstream.close()


def test_cut_points_never_end_a_chunk_on_a_newline():
    assert _cut_point(b"\n") is None
    assert _cut_point(b"ab\ncd\n") == 4 and _cut_point(b"abc\n") == 2


def test_the_gate_drains_turns_before_a_restart():
    gate = Gate()
    with gate.turn():
        assert not gate.hold(0.05)  # a turn is in flight
    assert gate.hold(0.05)
    entered = threading.Event()
    threading.Thread(target=lambda: gate.turn().__enter__() and None or entered.set(),
                     daemon=True).start()
    assert not entered.wait(0.1)  # held: new turns wait
    gate.release()
    assert entered.wait(5)


def _proxied_listener() -> tuple[socket.socket, SocketProxy]:
    """A listening stand-in daemon, and a proxy in front of it."""
    directory = Path(tempfile.mkdtemp(prefix="ar-proxy-", dir="/tmp"))
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(directory / "up.sock"))
    server.listen(4)
    return server, SocketProxy(directory / "proxy.sock", directory / "up.sock").start()


def test_a_swallowed_line_is_lost_whole_after_the_lines_before_it():
    server, proxy = _proxied_listener()
    try:
        client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        client.connect(str(proxy.listen))
        daemon, _ = server.accept()
        proxy.swallow(b'"type":"prompt"')
        daemon.sendall(b'{"type":"toast"}\n{"type":"prompt","id":"r-1"}\n{"type":"log"}\n')
        assert proxy.wait_swallowed(1, 10)
        received = b""
        while data := client.recv(4096):
            received += data
        assert received == b'{"type":"toast"}\n' and proxy.swallowed == 1
    finally:
        proxy.close()
        server.close()


def test_a_refusing_proxy_turns_connections_away_until_it_admits_them():
    server, proxy = _proxied_listener()
    try:
        proxy.refuse()
        refused = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        refused.connect(str(proxy.listen))
        assert refused.recv(16) == b"" and proxy.connections == 0
        proxy.admit()
        admitted = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        admitted.connect(str(proxy.listen))
        daemon, _ = server.accept()
        daemon.sendall(b"hi\n")
        assert admitted.recv(16) == b"hi\n" and proxy.connections == 1
    finally:
        proxy.close()
        server.close()
