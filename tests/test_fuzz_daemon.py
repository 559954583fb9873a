"""Fuzzing what reaches the daemon loop: lines that pass the protocol's validation but carry
odd content (every forwarded bus event with random property shapes, chat messages, commands,
acks, stats) on a loop over a real store and OpenCode DB. Nothing may reach the loop's
last-resort ``log.exception`` ("failed to handle", "tick failed"), and no prompt may go to a
child session."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
from daemon_fakes import Harness, disconnect
from fuzzing import FUZZ, SCALARS, dumps, json_values, report, tried
from hypothesis import given, settings
from hypothesis import strategies as st

from opencode_autoretry.plugin_bridge import protocol

EVENTS = ["session.status", "session.idle", "session.error", "session.created",
          "session.updated", "session.deleted", "message.updated", "message.part.updated",
          "message.part.delta", "permission.asked", "permission.replied", "command.executed",
          "todo.updated", "session.compacted", "server.unknown"]
PROP_KEYS = ["sessionID", "status", "error", "info", "part", "id", "requestID", "messageID",
             "partID", "field", "delta", "type", "attempt", "next", "message"]
INFO_KEYS = ["id", "sessionID", "parentID", "role", "finish", "tokens", "error", "time",
             "type", "state", "text", "callID", "tool"]


class Watch(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.failures: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info:
            self.failures.append(f"{record.getMessage()}: {record.exc_info[1]!r}")


@pytest.fixture(scope="module", autouse=True)
def _tally() -> Iterator[None]:
    yield
    report("daemon loop")


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Harness, list[str], Watch]]:
    h = Harness(tmp_path_factory.mktemp("loop"))
    h.hello()
    root = h.session()
    child = h.session(parent_id=root)
    user = h.user(root)
    h.failed_step(root, user, disconnect())
    watch = Watch()
    logging.getLogger("opencode_autoretry").addHandler(watch)
    yield h, [root, child], watch
    logging.getLogger("opencode_autoretry").removeHandler(watch)


def session_ref(ids: list[str]) -> st.SearchStrategy[Any]:
    return st.one_of(st.sampled_from(ids), SCALARS)


def events(ids: list[str]) -> st.SearchStrategy[dict[str, Any]]:
    nested = st.fixed_dictionaries({}, optional={
        key: (session_ref(ids) if key == "sessionID" else json_values(4)) for key in INFO_KEYS})
    props = st.fixed_dictionaries({}, optional={
        key: (session_ref(ids) if key == "sessionID" else st.one_of(nested, json_values(4)))
        for key in PROP_KEYS})
    return st.fixed_dictionaries({"type": st.sampled_from(EVENTS),
                                  "properties": st.one_of(props, json_values(3))})


def messages(ids: list[str]) -> st.SearchStrategy[dict[str, Any]]:
    text = st.one_of(st.text(max_size=20), st.sampled_from(["/autoretry off", "/autoretry on here",
                                                            "/autoretry status", "continue"]))
    return st.one_of(
        events(ids).map(lambda e: {"type": "event", "t": 0, "event": e}),
        st.fixed_dictionaries({"type": st.just("chat.message"), "t": st.just(0),
                               "session_id": st.sampled_from(ids)}, optional={
            "message_id": st.text(max_size=6), "marker": json_values(3), "text": text,
            "synthetic": st.booleans(), "command": st.booleans(), "model": json_values(3)}),
        st.fixed_dictionaries({"type": st.just("command"), "id": st.text(max_size=4),
                               "name": st.just("autoretry")},
                              optional={"session_id": session_ref(ids), "arguments": text}),
        st.fixed_dictionaries({"type": st.just("ack"), "id": st.text(max_size=4),
                               "ok": st.booleans()}, optional={"error": st.text(max_size=8),
                                                               "result": json_values(3)}),
        st.fixed_dictionaries({"type": st.just("stats"), "dropped": st.integers(0, 10**6),
                               "queued": st.integers(0, 10**6)}),
    )


@settings(FUZZ, max_examples=25)
@given(st.data())
def test_odd_but_valid_messages_never_reach_the_last_resort_handler(world, data) -> None:
    h, ids, watch = world
    root, child = ids
    for raw in data.draw(st.lists(messages(ids), min_size=1, max_size=6)):
        tried("loop.messages")
        try:
            message = protocol.decode_from_bridge(dumps({"v": 1, **raw}))
        except protocol.ProtocolError:
            tried("outcome:refused by the protocol")
            continue
        h.send(message)
    h.advance(data.draw(st.sampled_from([0.0, 1.0, 6.0, 200.0])))
    assert watch.failures == [], watch.failures
    assert all(p.session_id != child for p in h.prompts()), "a prompt went to a child session"
