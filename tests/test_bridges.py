"""daemon/intake/bridges.py: the Unix-socket server, driven by plain socket clients."""

from __future__ import annotations

import json
import queue
import shutil
import socket
import stat
import tempfile
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from opencode_autoretry import package_version
from opencode_autoretry.daemon.intake.batch_queue import BatchQueue
from opencode_autoretry.daemon.intake.bridges import (
    ACCEPT_TIMEOUT_S,
    BridgeClosed,
    BridgeConnected,
    BridgeMessage,
    BridgeServer,
    LineSplitter,
    SocketBusyError,
)
from opencode_autoretry.plugin_bridge.protocol import Event, Hello, Toast, Unknown

WAIT = 5.0
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


class FixedClock:
    def now(self) -> datetime:
        return NOW


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    directory = Path(tempfile.mkdtemp(prefix="ar-t-", dir="/tmp"))
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(params=["queue", "batch"])
def inbox(request: pytest.FixtureRequest) -> queue.Queue:
    """Each test with a plain queue and with the daemon's ``BatchQueue`` (issue 21)."""
    return queue.Queue() if request.param == "queue" else BatchQueue()


@pytest.fixture
def server(sock_dir: Path, inbox: queue.Queue) -> Iterator[BridgeServer]:
    bridge_server = BridgeServer(
        sock_dir / "run" / "daemon.sock",
        inbox,
        clock=FixedClock(),
        max_line=4096,
        write_timeout=0.5,
    ).start()
    yield bridge_server
    bridge_server.stop()


def line(obj: dict) -> bytes:
    return json.dumps({"v": 1, **obj}).encode() + b"\n"


HELLO = {"type": "hello", "pid": 42, "directory": "/proj", "project": "p1", "server_url": None}


def connect(server: BridgeServer, hello: dict | None = HELLO) -> socket.socket:
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.settimeout(WAIT)
    client.connect(str(server.path))
    if hello is not None:
        client.sendall(line(hello))
    return client


def next_item(inbox: queue.Queue, kind: type) -> object:
    while True:
        item = inbox.get(timeout=WAIT)  # bounded: raises queue.Empty on a hang
        if isinstance(item, kind):
            return item


def read_line(client: socket.socket) -> dict:
    data = b""
    while not data.endswith(b"\n"):
        data += client.recv(65536)
    return json.loads(data)


def test_socket_is_private(server):
    assert stat.S_IMODE(server.path.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(server.path.stat().st_mode) == 0o600


def test_hello_is_announced_and_answered_with_welcome(server, inbox):
    client = connect(server)
    connected = next_item(inbox, BridgeConnected)
    assert connected.hello == Hello(pid=42, directory="/proj", project="p1")
    assert connected.at == NOW
    assert read_line(client) == {"v": 1, "type": "welcome", "daemon": package_version()}
    client.close()


def test_events_are_enqueued_with_their_connection_and_session(server, inbox):
    """The loop's ``Sessions`` books the owner from these items: the connection's hello and
    each message's connection id and session."""
    client = connect(server)
    event = {"type": "session.idle", "properties": {"sessionID": "ses_a"}}
    client.sendall(line({"type": "event", "t": 1, "event": event}))
    connected = next_item(inbox, BridgeConnected)
    item = next_item(inbox, BridgeMessage)
    assert isinstance(item.message, Event) and item.message.session_id == "ses_a"
    hello = connected.hello
    assert (hello.pid, hello.directory, hello.server_url) == (42, "/proj", None)
    assert item.conn_id == connected.conn_id
    assert inbox.empty()  # no other session named
    client.close()


def test_lines_of_one_write_keep_their_order_and_are_all_counted(server, inbox):
    """The bridge writes every coalesced delta of a window at once (issue 12): the daemon
    handles the lines of one read together, in order, bad lines among them dropped alone."""
    client = connect(server)
    connected = next_item(inbox, BridgeConnected)
    deltas = [("ses_a", "one "), ("ses_b", "two "), ("ses_a", "three")]
    lines = [
        line({"type": "event", "t": 1, "event": {"type": "message.part.delta", "properties": {
            "sessionID": sid, "messageID": "m", "partID": f"p-{sid}", "field": "text",
            "delta": text}}}) for sid, text in deltas]
    client.sendall(lines[0] + b"not json\n\n" + b"".join(lines[1:]))
    items = [next_item(inbox, BridgeMessage) for _ in deltas]
    assert [(m.message.session_id, m.message.properties["delta"]) for m in items] == deltas
    assert server.counters().lines == 1 + len(deltas) + 1
    assert server.counters().garbage == 1
    assert {m.conn_id for m in items} == {connected.conn_id}
    client.close()


def test_a_hello_inside_one_write_keeps_its_place_among_the_lines(server, inbox):
    """Issue 21: a read's messages go into the inbox together; a hello among them (the first
    line a bridge writes, often in the same write as its first events) still comes first,
    and what follows it is handled as that hello's connection's."""
    client = connect(server, hello=None)
    stats = [line({"type": "stats", "dropped": i, "queued": 0}) for i in range(3)]
    client.sendall(line(HELLO) + b"".join(stats))
    items = [inbox.get(timeout=WAIT) for _ in range(4)]
    assert isinstance(items[0], BridgeConnected)
    assert [type(item) for item in items[1:]] == [BridgeMessage] * 3
    assert [item.message.dropped for item in items[1:]] == [0, 1, 2]
    assert read_line(client)["type"] == "welcome"
    client.close()


def test_batch_queue_puts_all_in_order_and_wakes_a_waiting_reader():
    batches = BatchQueue()
    got: list[object] = []
    reader = threading.Thread(target=lambda: got.extend(batches.get(timeout=WAIT) for _ in
                                                         range(4)))
    reader.start()
    batches.put_all([])  # nothing: no wake-up, nothing counted
    batches.put("first")
    batches.put_all(["a", "b", "c"])
    reader.join(timeout=WAIT)
    assert got == ["first", "a", "b", "c"]
    assert batches.unfinished_tasks == 4 and batches.qsize() == 0


@pytest.mark.parametrize(
    ("bad", "counter"),
    [
        (b"not json\n", "garbage"),
        (line({"type": "hello", "pid": "x", "directory": "/p"}), "garbage"),
        (b'{"v":2,"type":"event"}\n', "garbage"),
        (b"x" * 10_000 + b"\n", "oversize"),
        (line({"type": "future.thing", "a": 1}), "unknown"),
    ],
)
def test_bad_lines_are_counted_and_the_connection_survives(server, inbox, bad, counter):
    client = connect(server)
    next_item(inbox, BridgeConnected)
    client.sendall(bad)
    client.sendall(line({"type": "stats", "dropped": 0, "queued": 0}))
    messages = [next_item(inbox, BridgeMessage).message]
    if counter == "unknown":
        assert isinstance(messages[0], Unknown)
        messages.append(next_item(inbox, BridgeMessage).message)
    assert type(messages[-1]).__name__ == "Stats"
    assert getattr(server.counters(), counter) == 1
    client.close()


def test_a_line_split_over_many_writes_is_reassembled(server, inbox):
    client = connect(server, hello=None)
    data = line(HELLO)
    for index in range(0, len(data), 7):
        client.sendall(data[index : index + 7])
    assert next_item(inbox, BridgeConnected).hello.pid == 42
    client.close()


def test_close_reports_partial_line_and_hello(server, inbox):
    client = connect(server)
    next_item(inbox, BridgeConnected)
    client.sendall(b'{"v":1,"type":"sta')
    client.close()
    closed = next_item(inbox, BridgeClosed)
    assert closed.hello is not None and closed.hello.pid == 42
    assert server.counters().partial == 1
    assert not server.send(closed.conn_id, Toast(message="gone"))  # the server let it go


def test_many_bridges_at_once(server, inbox):
    clients = [connect(server, {**HELLO, "pid": pid}) for pid in range(1, 6)]
    connected = [next_item(inbox, BridgeConnected) for _ in clients]
    assert sorted(c.hello.pid for c in connected) == [1, 2, 3, 4, 5]
    assert len({c.conn_id for c in connected}) == 5  # five live connections at once
    assert all(server.send(c.conn_id, Toast(message="hi")) for c in connected)
    for client in clients:
        client.close()


def test_send_reaches_the_right_bridge_and_fails_for_unknown_ids(server, inbox):
    first, second = connect(server, {**HELLO, "pid": 1}), connect(server, {**HELLO, "pid": 2})
    by_pid = {}
    for _ in range(2):
        item = next_item(inbox, BridgeConnected)
        by_pid[item.hello.pid] = item.conn_id
    read_line(first), read_line(second)  # welcomes
    assert server.send(by_pid[2], Toast(message="to two", id="r-1"))
    assert read_line(second)["message"] == "to two"
    assert not server.send("b999", Toast(message="nobody"))
    first.close(), second.close()


def test_a_bridge_that_never_reads_is_dropped_not_waited_for(server, inbox):
    client = connect(server)
    conn_id = next_item(inbox, BridgeConnected).conn_id
    big = Toast(message="x" * 500_000)
    results = [server.send(conn_id, big) for _ in range(40)]  # far beyond any socket buffer
    assert results[-1] is False
    assert isinstance(next_item(inbox, BridgeClosed), BridgeClosed)
    client.close()


def test_stop_removes_the_socket(sock_dir, inbox):
    path = sock_dir / "daemon.sock"
    BridgeServer(path, inbox).start().stop()
    assert not path.exists()


def test_stop_does_not_wait_for_the_accept_timeout(sock_dir, inbox):
    # The accept loop blocks ACCEPT_TIMEOUT_S at a time (few wake-ups while idle, issue 21):
    # stop() wakes it instead of waiting the timeout out.
    server = BridgeServer(sock_dir / "daemon.sock", inbox).start()
    time.sleep(0.05)  # the accept loop is blocked in accept()
    began = time.monotonic()
    server.stop()
    assert time.monotonic() - began < ACCEPT_TIMEOUT_S / 2
    assert not [t for t in threading.enumerate() if t.name == "bridge-accept"]


def test_a_stale_socket_is_replaced(sock_dir, inbox):
    path = sock_dir / "daemon.sock"
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(path))
    stale.close()  # file left behind, nobody listening
    server = BridgeServer(path, inbox).start()
    try:
        client = connect(server)
        assert next_item(inbox, BridgeConnected).hello.pid == 42
        client.close()
    finally:
        server.stop()


def test_refuses_when_another_daemon_is_live(server, inbox):
    with pytest.raises(SocketBusyError, match="already listening"):
        BridgeServer(server.path, inbox).start()
    assert server.path.exists()  # the live daemon keeps its socket


def test_refuses_a_path_that_is_not_a_socket(sock_dir, inbox):
    path = sock_dir / "daemon.sock"
    path.write_text("not a socket")
    with pytest.raises(SocketBusyError, match="not a socket"):
        BridgeServer(path, inbox).start()


@pytest.mark.parametrize(
    ("chunks", "lines", "oversize", "leftover"),
    [
        ([b"a\nb\n"], [b"a", b"b"], 0, 0),
        ([b"a", b"b\nc"], [b"ab"], 0, 1),
        ([b"\n \n", b"x\n"], [b"x"], 0, 0),
        ([b"y" * 11 + b"\nok\n"], [b"ok"], 1, 0),
        ([b"y" * 6, b"y" * 6, b"y" * 6, b"\nok\n"], [b"ok"], 1, 0),
        ([b"y" * 20], [], 1, 0),
        ([b"0123456789\n"], [b"0123456789"], 0, 0),
    ],
)
def test_line_splitter(chunks, lines, oversize, leftover):
    splitter = LineSplitter(max_line=10)
    got, dropped = [], 0
    for chunk in chunks:
        new, over = splitter.feed(chunk)
        got += new
        dropped += over
    assert (got, dropped, splitter.leftover) == (lines, oversize, leftover)


@pytest.mark.parametrize("depth", [500, 990])
def test_a_deep_line_with_a_surrogate_escape_is_garbage_and_later_lines_arrive(
    sock_dir, inbox, depth
):
    # Issue 20: RecursionError in the repair ended the reader thread and lost the read.
    nested = "[" * depth + '"C:\\\\udev"' + "]" * depth
    deep = f'{{"v":1,"type":"event","t":1,"event":{{"type":"x","d":{nested}}}}}\n'.encode()
    with BridgeServer(sock_dir / "run" / "daemon.sock", inbox, clock=FixedClock()) as srv:
        client = connect(srv)
        next_item(inbox, BridgeConnected)
        client.sendall(deep + line({"type": "stats", "dropped": 0, "queued": 0}))
        assert type(next_item(inbox, BridgeMessage).message).__name__ == "Stats"
        assert srv.counters().garbage == 1
        client.close()


def _closed_by_server(client: socket.socket) -> bool:
    try:
        return client.recv(1) == b""
    except ConnectionResetError:
        return True


def test_connections_beyond_the_cap_are_refused_and_counted(sock_dir, inbox):
    # Issue 20: one reader thread per connection, with no cap.
    path = sock_dir / "run" / "daemon.sock"
    with BridgeServer(path, inbox, clock=FixedClock(), max_connections=2) as srv:
        first, second = connect(srv), connect(srv)
        next_item(inbox, BridgeConnected)
        next_item(inbox, BridgeConnected)
        # No hello: the server may close it before a write would land (a broken pipe).
        third = connect(srv, hello=None)
        assert _closed_by_server(third), "a third connection was kept"
        assert srv.counters().over_cap == 1
        first.close()
        next_item(inbox, BridgeClosed)
        fourth = connect(srv)
        assert isinstance(next_item(inbox, BridgeConnected), BridgeConnected)
        for client in (second, third, fourth):
            client.close()


def test_finished_reader_threads_are_let_go(server, inbox):
    # Issue 20: every connection ever made kept its Thread in the server's list.
    for _ in range(30):
        client = connect(server)
        next_item(inbox, BridgeConnected)
        client.close()
        next_item(inbox, BridgeClosed)
    last = connect(server)
    next_item(inbox, BridgeConnected)
    assert len(server._threads) < 10, f"{len(server._threads)} threads kept for 31 connections"
    last.close()


def test_a_full_inbox_pauses_reading_and_nothing_is_lost(sock_dir, inbox):
    # Issue 20: the inbox had no bound; now a reader waits while it holds max_pending items.
    path = sock_dir / "run" / "daemon.sock"
    with BridgeServer(path, inbox, clock=FixedClock(), max_pending=5) as srv:
        for index in range(5):
            inbox.put(("filler", index))
        client = connect(srv)
        stats = [line({"type": "stats", "dropped": i, "queued": 0}) for i in range(3)]
        client.sendall(b"".join(stats))
        deadline = time.monotonic() + 0.5
        while time.monotonic() < deadline:  # a bounded look: nothing may pass the full inbox
            assert inbox.qsize() <= 6, "a message passed the full inbox"
            time.sleep(0.01)
        held = [inbox.get_nowait() for _ in range(inbox.qsize())]
        assert sum(isinstance(item, BridgeMessage) for item in held) == 0
        got = [next_item(inbox, BridgeMessage).message.dropped for _ in range(3)]
        assert got == [0, 1, 2]
        client.close()
