"""Fuzzing the bridge protocol, Python side: any line decodes to a message or fails with one of
the stable reasons (never another exception, never a long error); the line splitter and the
server count every line they drop. Deterministic (``derandomize``)."""

from __future__ import annotations

import json
import queue
import random
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fuzzing import FUZZ, dumps, report, shaped, tried
from hypothesis import given, settings
from hypothesis import strategies as st

from opencode_autoretry.daemon.intake.bridges import BridgeServer, LineSplitter
from opencode_autoretry.plugin_bridge import protocol

REASONS = {"bad_json", "not_object", "bad_version", "bad_type", "missing_field", "bad_field",
           "too_long"}
FIXTURES = Path(__file__).parent / "fixtures" / "bridge"
VALID = [json.loads(line)["line"] for line in (FIXTURES / "valid.jsonl").read_text().splitlines()
         if line.strip()]
TYPES = sorted(protocol.SCHEMA) + ["", "nope", "__proto__", "constructor", "toString"]


@pytest.fixture(scope="module", autouse=True)
def _tally() -> Iterator[None]:
    yield
    report("protocol (python)")


def check_decode(line: bytes | str, target: str = "protocol") -> object | None:
    """The property: a message of the right class, or a ProtocolError with a stable reason."""
    tried(target)
    outcome = None
    for decode, allowed in ((protocol.decode_from_bridge, protocol.BRIDGE_TYPES),
                            (protocol.decode_from_daemon, protocol.DAEMON_TYPES)):
        try:
            message = decode(line)
        except protocol.ProtocolError as exc:
            assert exc.reason in REASONS, exc
            assert len(str(exc)) < 300, "errors are logged: they must stay short"
            continue
        kind = message.type if isinstance(message, protocol.Unknown) else None
        assert kind is None or kind not in allowed
        if not isinstance(message, protocol.Unknown):
            protocol.encode(message)  # what was accepted can be written back out
        outcome = message
    return outcome


@settings(FUZZ, max_examples=600)
@given(st.binary(max_size=400))
def test_random_bytes(data: bytes) -> None:
    check_decode(data, "protocol.bytes")


def _message(kind: object, version: object, fields: dict) -> str:
    return dumps({**fields, "v": version, "type": kind})


@settings(FUZZ, max_examples=200)
@given(
    st.sampled_from(TYPES) | st.text(max_size=5) | st.integers(),
    st.sampled_from([1, 1, 1, 1.0, 2, 0, "1", None, True]),
    st.one_of([shaped(list(protocol.SCHEMA.get(t, {"x": ""}))) for t in TYPES]),
)
def test_schema_shaped_messages(kind: object, version: object, fields: dict) -> None:
    check_decode(_message(kind, version, fields), "protocol.shaped")


def _mutate(line: str, rng: random.Random) -> bytes:
    data = bytearray(line.encode())
    for _ in range(rng.randint(1, 4)):
        op, at = rng.randrange(4), rng.randrange(len(data) + 1)
        if op == 0 and data:
            data[min(at, len(data) - 1)] = rng.randrange(256)
        elif op == 1:
            del data[at:at + rng.randint(1, 8)]
        elif op == 2:
            data[at:at] = rng.choice([b"{", b"}", b'"', b"\\u", b"\xff", b"\x00", b"[", b",", b"9"])
        else:
            data = data[:at]
    return bytes(data)


@settings(FUZZ, max_examples=600)
@given(st.sampled_from(VALID), st.integers(min_value=0, max_value=2**32))
def test_mutated_valid_lines(line: str, seed: int) -> None:
    check_decode(_mutate(line, random.Random(seed)), "protocol.mutated")


NASTY = [
    b"[" * 100_000 + b"]" * 100_000,
    b'{"v":1,"type":"event","t":1,"event":' + b'{"a":' * 50_000 + b"1" + b"}" * 50_001,
    b'{"v":1,"type":"hello","pid":' + b"1" * 5000 + b',"directory":"x"}',
    b'{"v":1,"type":"hello","pid":1e400,"directory":"x"}',
    b'{"v":NaN,"type":"hello"}',
    b'{"v":1,"type":"hello","pid":Infinity,"directory":"x"}',
    b'\xef\xbb\xbf{"v":1,"type":"welcome","daemon":"x"}',
    b'{"v":1,"type":"welcome","daemon":"\x00"}',
    b'{"v":1,"type":"welcome","daemon":"\\ud800"}',
    b'{"v":1,"type":"welcome","daemon":"\\udfff\\ud83d\\ude00"}',
    b'{"v":1,"type":"welcome","daemon":"\xed\xa0\x80"}',  # a surrogate encoded as UTF-8
    b'{"v":1,"type":"welcome","daemon":"x","daemon":5}',  # duplicate key: the last wins
    b'{"v":' + b'"' + b"x" * 100_000 + b'","type":"hello"}',
    b'{"v":1,"type":"' + b"t" * 100_000 + b'"}',
    b'{"v":1,"type":"log","level":"info","message":"' + b"x" * protocol.MAX_LINE_BYTES + b'"}',
]


@pytest.mark.parametrize("line", NASTY, ids=range(len(NASTY)))
def test_nasty_lines(line: bytes) -> None:
    check_decode(line, "protocol.nasty")


# -- regressions found by fuzzing ------------------------------------------------------------


def test_regression_deep_nesting_is_bad_json_not_a_recursion_error() -> None:
    with pytest.raises(protocol.ProtocolError) as info:
        protocol.parse_line(NASTY[0])
    assert info.value.reason == "bad_json"


def test_regression_a_5000_digit_integer_is_bad_json_not_a_value_error() -> None:
    with pytest.raises(protocol.ProtocolError) as info:
        protocol.parse_line(NASTY[2])
    assert info.value.reason == "bad_json"


def test_regression_errors_quote_a_short_excerpt_only() -> None:
    with pytest.raises(protocol.ProtocolError) as info:
        protocol.parse_line(NASTY[12])
    assert info.value.reason == "bad_version" and len(str(info.value)) < 120


def test_regression_half_an_emoji_from_the_bridge_cut_becomes_a_replacement_char() -> None:
    # wire.js cuts chat texts with text.slice(0, 500): UTF-16 units, so a pair can be split.
    line = json.dumps({"v": 1, "type": "chat.message", "t": 1, "session_id": "ses_\ud800",
                       "text": "a" * 499 + "\ud83d"})
    message = protocol.decode_from_bridge(line)
    assert isinstance(message, protocol.ChatMessage)
    assert message.text == "a" * 499 + "\ufffd" and message.session_id == "ses_\ufffd"
    message.text.encode("utf-8")  # SQLite, the log and the socket all need valid UTF-8
    pair = protocol.decode_from_bridge(json.dumps({"v": 1, "type": "chat.message", "t": 1,
                                                   "session_id": "s", "text": "\U0001f600"}))
    assert pair.text == "\U0001f600"  # an escaped whole pair is left alone


# -- the line splitter against a model ---------------------------------------------------------

MAX = 64


def _model_split(stream: bytes) -> tuple[list[bytes], int]:
    *complete, _ = stream.split(b"\n")
    kept = [line for line in complete if len(line) <= MAX and line.strip()]
    return kept, sum(1 for line in complete if len(line) > MAX)


@settings(FUZZ, max_examples=300)
@given(
    st.lists(st.binary(max_size=3 * MAX).map(lambda b: b.replace(b"\n", b"x")), max_size=12),
    st.lists(st.integers(min_value=1, max_value=3 * MAX), min_size=1, max_size=20),
)
def test_line_splitter_keeps_short_lines_and_counts_long_ones(
    lines: list[bytes], cuts: list[int]
) -> None:
    tried("splitter")
    stream = b"".join(line + b"\n" for line in lines)
    splitter, got, oversize, at = LineSplitter(MAX), [], 0, 0
    for size in cuts * (len(stream) // sum(cuts) + 1):
        if at >= len(stream):
            break
        found, dropped = splitter.feed(stream[at:at + size])
        got += found
        oversize += dropped
        at += size
    assert (got, oversize) == _model_split(stream)
    assert splitter.leftover == 0


# -- the server counts what it drops -----------------------------------------------------------


def _expected(lines: list[bytes]) -> dict[str, int]:
    counts = {"lines": 0, "garbage": 0, "unknown": 0, "oversize": 0}
    for line in lines:
        if not line.strip():
            continue
        if len(line) > protocol.MAX_LINE_BYTES:
            counts["oversize"] += 1
            continue
        counts["lines"] += 1
        try:
            message = protocol.decode_from_bridge(line)
        except protocol.ProtocolError:
            counts["garbage"] += 1
            continue
        counts["unknown"] += isinstance(message, protocol.Unknown)
    return counts


@settings(FUZZ, max_examples=8)
@given(st.lists(st.one_of(
    st.binary(max_size=200).map(lambda b: b.replace(b"\n", b" ")),
    st.sampled_from(VALID).map(str.encode),
    st.sampled_from(TYPES).map(lambda t: _message(t, 1, {}).encode()),
), min_size=10, max_size=40))
def test_the_server_counts_every_dropped_line(tmp_path_factory, lines: list[bytes]) -> None:
    tried("server.connections")
    path = tmp_path_factory.mktemp("fz") / "d.sock"
    inbox: queue.Queue[object] = queue.Queue()
    with BridgeServer(path, inbox) as server:
        client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        client.connect(str(path))
        client.sendall(b"".join(line + b"\n" for line in lines))
        client.shutdown(socket.SHUT_WR)
        deadline = time.monotonic() + 30  # a poll: returns as soon as it holds
        while not any(type(i).__name__ == "BridgeClosed" for i in list(inbox.queue)):
            assert time.monotonic() < deadline, "the server never closed the connection"
            time.sleep(0.005)
        client.close()
        counters = server.counters()
    expected = _expected(lines)
    for _ in lines:
        tried("server.lines")
    got = {name: getattr(counters, name) for name in expected}
    assert got == expected
