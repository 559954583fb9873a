"""The bridge protocol (Python side); tests/js/protocol.test.mjs checks the same fixtures in JS."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from node_suite import failure, run_node_tests

from opencode_autoretry.plugin_bridge import protocol
from opencode_autoretry.plugin_bridge.protocol import (
    Ack,
    ChatMessage,
    Command,
    Event,
    Hello,
    ModelRef,
    Prompt,
    ProtocolError,
    Reply,
    Stats,
    Toast,
    Unknown,
    Welcome,
)

FIXTURES = Path(__file__).parent / "fixtures" / "bridge"
VALID = [json.loads(line) for line in (FIXTURES / "valid.jsonl").read_text().splitlines()]
INVALID = [json.loads(line) for line in (FIXTURES / "invalid.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("case", VALID, ids=[f"{c['type']}-{i}" for i, c in enumerate(VALID)])
def test_valid_fixture_lines_parse_in_both_directions(case):
    parsed = protocol.parse_line(case["line"])
    assert parsed["type"] == case["type"]
    allowed = protocol.BRIDGE_TYPES | protocol.DAEMON_TYPES
    message = protocol.decode(case["line"], allowed)
    assert isinstance(message, Unknown) == (not case["known"])


@pytest.mark.parametrize(
    "case", INVALID, ids=[c["reason"] + f"-{i}" for i, c in enumerate(INVALID)]
)
def test_invalid_fixture_lines_fail_with_the_shared_reason(case):
    with pytest.raises(ProtocolError) as info:
        protocol.parse_line(case["line"])
    assert info.value.reason == case["reason"]


def test_fixtures_cover_every_message_type():
    assert {c["type"] for c in VALID if c["known"]} == set(protocol.SCHEMA)


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (
            '{"v":1,"type":"hello","pid":5,"directory":"/p","server_url":null}',
            Hello(pid=5, directory="/p"),
        ),
        (
            '{"v":1,"type":"command","id":"c-1","name":"autoretry"}',
            Command(id="c-1", name="autoretry", arguments=""),
        ),
        (
            '{"v":1,"type":"ack","id":"r-1","ok":false,"error":"child session"}',
            Ack(id="r-1", ok=False, error="child session"),
        ),
        ('{"v":1,"type":"stats","dropped":2,"queued":0}', Stats(dropped=2, queued=0)),
        (
            '{"v":1,"type":"chat.message","t":3,"session_id":"ses_a","model":{"providerID":"p","modelID":"m"}}',
            ChatMessage(t=3, session_id="ses_a", model=ModelRef("p", "m")),
        ),
        (
            '{"v":1,"type":"welcome","daemon":"0.1.0"}',
            Unknown("welcome", {"v": 1, "type": "welcome", "daemon": "0.1.0"}),
        ),
    ],
)
def test_decode_from_bridge_builds_dataclasses(line, expected):
    assert protocol.decode_from_bridge(line) == expected


def test_decode_from_bridge_ignores_unknown_fields():
    line = '{"v":1,"type":"stats","dropped":1,"queued":0,"new_counter":9}'
    assert protocol.decode_from_bridge(line) == Stats(dropped=1, queued=0)


@pytest.mark.parametrize(
    ("event", "session_id"),
    [
        ({"type": "session.idle", "properties": {"sessionID": "ses_a"}}, "ses_a"),
        ({"type": "message.updated", "properties": {"info": {"sessionID": "ses_b"}}}, "ses_b"),
        ({"type": "message.part.updated", "properties": {"part": {"sessionID": "ses_c"}}}, "ses_c"),
        ({"type": "server.heartbeat", "properties": {}}, None),
        ({"type": "weird"}, None),
    ],
)
def test_event_session_id_is_found_where_opencode_puts_it(event, session_id):
    assert Event(t=0, event=event).session_id == session_id


@pytest.mark.parametrize(
    "message",
    [
        Welcome(daemon="0.1.0"),
        Prompt(
            id="r-1",
            session_id="ses_a",
            text="Continue.",
            agent="build",
            model=ModelRef("p", "m"),
            marker={"decision": "1", "kind": "blank"},
        ),
        Toast(message="hi", id="r-2", duration=3000),
        Reply(id="c-1", ok=True, message="on"),
    ],
)
def test_encode_then_decode_round_trips(message):
    line = protocol.encode(message)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert protocol.decode_from_daemon(line) == message


def test_encode_writes_the_wire_names():
    line = protocol.encode(Prompt(id="r-1", session_id="ses_a", text="x", model=ModelRef("p", "m")))
    assert json.loads(line)["model"] == {"providerID": "p", "modelID": "m"}
    assert json.loads(line)["v"] == protocol.PROTOCOL_VERSION


def test_encode_refuses_a_line_the_bridge_would_drop():
    with pytest.raises(ProtocolError) as info:
        protocol.encode(Toast(message="x" * protocol.MAX_LINE_BYTES))
    assert info.value.reason == "too_long"


def test_parse_line_refuses_lines_over_one_mebibyte():
    line = json.dumps(
        {"v": 1, "type": "log", "level": "info", "message": "x" * protocol.MAX_LINE_BYTES}
    )
    with pytest.raises(ProtocolError) as info:
        protocol.parse_line(line)
    assert info.value.reason == "too_long"


def test_non_utf8_bytes_are_bad_json():
    with pytest.raises(ProtocolError) as info:
        protocol.parse_line(b'{"v":1,"type":"\xff"}')
    assert info.value.reason == "bad_json"


REPO = Path(__file__).parent.parent


def _node() -> str:
    node = shutil.which("node")
    assert node, "node (>= 18.17) is required: the bridge plugin is JavaScript"
    return node


def test_js_schema_is_the_python_schema():
    script = (
        "import('./plugin_bridge/autoretry.js').then(m => console.log(JSON.stringify(m.SCHEMA)))"
    )
    out = subprocess.run(
        [_node(), "-e", script], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == protocol.SCHEMA


def test_node_test_suite_passes():
    """The machine's node; tests/test_node_versions.py runs the same on every promised Node."""
    done = run_node_tests(_node())
    assert failure(done) is None, failure(done)


def _nested_event(depth: int, text: str) -> str:
    inner = "[" * depth + json.dumps(text) + "]" * depth
    return f'{{"v":1,"type":"event","t":1,"event":{{"type":"x","properties":{{"deep":{inner}}}}}}}'


@pytest.mark.parametrize("depth", [500, 700, 990])
@pytest.mark.parametrize("text", ["\ud83d", "C:\\udev"])
def test_a_deeply_nested_line_with_a_surrogate_escape_is_refused_not_raised(depth, text):
    # Issue 20: the recursive repair raised RecursionError past json.loads's own guard.
    with pytest.raises(ProtocolError) as info:
        protocol.parse_line(_nested_event(depth, text))
    assert info.value.reason == "bad_json"


def test_repair_reaches_keys_and_values_at_the_deepest_allowed_level():
    depth = protocol.MAX_DEPTH - 4  # the event's own wrappers take four levels
    line = _nested_event(depth, "half \ud83d").replace('"deep"', '"k\\ud83d"')
    event = protocol.decode_from_bridge(line).event
    value = event["properties"]["k\ufffd"]
    for _ in range(depth):
        (value,) = value
    assert value == "half \ufffd"
    assert protocol.decode_from_bridge(_nested_event(depth, r"C:\udev")).event  # kept


def test_a_line_of_many_small_objects_is_refused():
    # Issue 20: one 1 MiB line of "[{},{},…]" became about 24 MB of objects in the inbox.
    many = "[" + ",".join(["{}"] * (protocol.MAX_CONTAINERS + 1)) + "]"
    with pytest.raises(ProtocolError) as info:
        protocol.parse_line(f'{{"v":1,"type":"event","t":1,"event":{{"type":"x","a":{many}}}}}')
    assert info.value.reason == "bad_json" and "objects and arrays" in str(info.value)
    text = "{}" * 100_000  # brackets inside a string are no containers: kept
    line = json.dumps({"v": 1, "type": "event", "t": 1, "event": {"type": "x", "s": text}})
    assert protocol.parse_line(line)["event"]["s"] == text


@pytest.mark.parametrize("text", [
    '{"v":1,"type":"event","t":1,"event":{"type":"message.part.delta"}}',
    '{"a":1} ',
    ' {"a":1}',
    '{"a":1}{"b":2}',
    '{"a":1} x}',
    '{"a":}',
    '{"a":"\\ud83d"}',
    '\ufeff{"a":1}',
    '{"a":' + "[" * 5000 + "]" * 5000 + "}",
    '{"a":1' + "0" * 5000 + "}",
    "{}",
    "{",
    "}",
    "[1]",
    '{"a":NaN}',
    '{"a":1}\n',
])
def test_the_fast_line_decode_is_json_loads(text):
    """Issue 21: ``_loads`` skips json.loads's Python layers for a plain object line; every
    result and every error must be json.loads's own."""
    from opencode_autoretry.plugin_bridge.protocol import _loads

    try:
        expected: object = json.loads(text)
    except (ValueError, RecursionError) as exc:
        with pytest.raises(type(exc)) as raised:
            _loads(text)
        assert str(raised.value) == str(exc)
    else:
        assert _loads(text) == expected
