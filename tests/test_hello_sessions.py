"""The hello's optional ``sessions`` field (issue 11), Python side; tests/js/sessions.test.mjs
checks the bridge that writes it, and the shared fixtures hold one of each."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from opencode_autoretry.daemon.reattach import adopt_named
from opencode_autoretry.daemon.sessions import Sessions
from opencode_autoretry.plugin_bridge import protocol
from opencode_autoretry.plugin_bridge.protocol import (
    HELLO_ASKS,
    HELLO_SESSIONS,
    Hello,
    ProtocolError,
    SessionState,
    session_states,
)


def line(**fields: object) -> str:
    return json.dumps({"v": 1, "type": "hello", "pid": 7, "directory": "/p", **fields})


def test_a_hello_names_sessions_with_their_status_and_open_asks():
    hello = protocol.decode_from_bridge(line(sessions={
        "ses_a": {"status": "busy", "permissions": ["per_1"], "questions": ["que_1"]},
        "ses_b": {"status": "retry", "next": 1796040585530},
        "ses_c": {"status": None},
    }))
    assert isinstance(hello, Hello)
    assert session_states(hello) == ((
        SessionState("ses_a", "busy", None, ("per_1",), ("que_1",)),
        SessionState("ses_b", "retry", 1796040585530),
        SessionState("ses_c"),
    ), 0)


def test_an_older_bridge_names_nothing_and_an_older_daemon_ignores_the_field(monkeypatch):
    old = protocol.decode_from_bridge(line())
    assert isinstance(old, Hello) and old.sessions is None and session_states(old) == ((), 0)
    # An older daemon's table has no `sessions`: the field is passed over like any new one.
    older = {k: v for k, v in protocol.SCHEMA["hello"].items() if k != "sessions"}
    monkeypatch.setitem(protocol.SCHEMA, "hello", older)
    hello = protocol.decode_from_bridge(line(sessions={"ses_a": {}}))
    assert isinstance(hello, Hello) and hello.sessions is None


def test_sessions_must_be_an_object():
    for bad in (["ses_a"], "ses_a", 3, True):
        with pytest.raises(ProtocolError) as caught:
            protocol.decode_from_bridge(line(sessions=bad))
        assert caught.value.reason == "bad_field"


@pytest.mark.parametrize("entry", [
    {"status": "compacting"},  # a status this side does not know could be a wait
    {"status": 1},
    {"next": "soon"},
    {"next": True},
    {"permissions": "per_1"},
    {"permissions": [1]},
    {"questions": [""]},
    {"questions": ["q"] * (HELLO_ASKS + 1)},
    "idle",
])
def test_a_malformed_entry_costs_that_session_never_the_hello(entry):
    hello = protocol.decode_from_bridge(line(sessions={"ses_bad": entry, "ses_ok": {}}))
    assert isinstance(hello, Hello)
    assert session_states(hello) == ((SessionState("ses_ok"),), 1)


def test_ids_without_the_session_prefix_are_dropped():
    hello = protocol.decode_from_bridge(line(sessions={"msg_1": {}, "ses_" + "x" * 300: {}}))
    assert isinstance(hello, Hello) and session_states(hello) == ((), 2)


def test_at_most_the_most_recent_sessions_are_taken():
    named = {f"ses_{i:04}": {"status": "idle"} for i in range(HELLO_SESSIONS + 10)}
    hello = protocol.decode_from_bridge(line(sessions=named))
    assert isinstance(hello, Hello)
    states, _ = session_states(hello)
    assert len(states) == HELLO_SESSIONS
    assert states[0].session_id == "ses_0010"
    assert states[-1].session_id == f"ses_{HELLO_SESSIONS + 9:04}"


def test_a_hello_with_sessions_goes_over_the_wire_and_back():
    hello = Hello(pid=7, directory="/p", sessions={"ses_a": {"status": "idle"}})
    assert protocol.decode_from_bridge(protocol.encode(hello)) == hello


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner,
                                                                 max_size=4),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(["ses_a", "ses_b", "x", ""]) | st.text(max_size=6),
                       JSON, max_size=5))
def test_any_sessions_object_parses_or_drops_and_restores_without_crashing(named):
    hello = protocol.decode_from_bridge(line(sessions=named))
    assert isinstance(hello, Hello)
    states, dropped = session_states(hello)
    assert len(states) + dropped == len(named)
    sessions = Sessions()
    now = datetime(2026, 12, 1, tzinfo=UTC)
    adopted = adopt_named(sessions, "b1", hello, {"b1"}, now, lambda _sid: set())
    assert adopted == [s.session_id for s in states]
    for state in states:
        view = sessions.ensure(state.session_id)
        assert view.owner == "b1" and view.permissions == set(state.permissions)
