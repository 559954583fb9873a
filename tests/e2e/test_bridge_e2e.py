"""End to end: the bridge plugin inside the real OpenCode 1.18.33, talking to a daemon stand-in.

Each test starts its own ``opencode serve`` (≈2-4 s) on a private daemon socket; the config dir
is prepared once per session (see conftest.py).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pytest
from daemon_process import wait_until

from opencode_autoretry.daemon.intake.bridges import BridgeMessage
from opencode_autoretry.plugin_bridge.protocol import (
    Abort,
    ChatMessage,
    Command,
    Log,
    ModelRef,
    Prompt,
    Stats,
    Toast,
)

pytestmark = [pytest.mark.e2e, pytest.mark.shared_opencode]

TURN_TIMEOUT = 30.0
BACKOFF_CAP = 30.0  # the bridge's longest wait between two connection attempts


def _is(kind: type, **fields: Any):
    def predicate(item: Any) -> bool:
        message = getattr(item, "message", None)
        return (
            isinstance(item, BridgeMessage)
            and isinstance(message, kind)
            and all(getattr(message, k) == v for k, v in fields.items())
        )

    return predicate


def _bridge_event(event_type: str, session_id: str):
    def predicate(item: Any) -> bool:
        message = getattr(item, "message", None)
        return (
            getattr(message, "event_type", None) == event_type and message.session_id == session_id
        )

    return predicate


def _toast(server, needle: str) -> dict[str, Any]:
    return server.events.wait_for(
        lambda e: (
            e.get("type") == "tui.toast.show" and needle in e["properties"].get("message", "")
        ),
        TURN_TIMEOUT,
        f"tui.toast.show containing {needle!r}",
    )


@pytest.mark.own_opencode  # starts OpenCode itself
def test_bridge_says_hello_and_streams_a_real_turn(
    provider, standin, start_opencode, opencode_version
):
    server = start_opencode(AUTORETRY_BRIDGE_STATS_MS="300")
    server.ok("GET", "/path")
    hello = standin.wait_connected().hello
    assert (hello.pid, hello.directory, hello.project) == (
        server.process.pid,
        str(server.home.project),
        "global",
    )
    assert hello.opencode == opencode_version  # 1.18.33 unless another version is asked for
    assert hello.server_url == server.url + "/"  # serve really listens, so the URL is real

    session = server.create_session()["id"]
    server.prompt_async(session, "Say hello [[s:normal]]")
    server.wait_idle(session, TURN_TIMEOUT)
    standin.wait_for(_bridge_event("session.idle", session), TURN_TIMEOUT,
                     "session.idle via the bridge")

    kinds = [e.event_type for e in standin.events() if e.session_id == session]
    for expected in (
        "session.created",
        "session.status",
        "message.updated",
        "message.part.updated",
        "message.part.delta",
        "session.idle",
    ):
        assert expected in kinds, f"{expected} missing from {kinds}"
    chat = standin.messages(ChatMessage)[0]
    assert (chat.session_id, chat.agent, chat.model, chat.marker, chat.command) == (
        session,
        "build",
        ModelRef("fake", "fake-model"),
        None,
        False,
    )
    assert chat.text == "Say hello [[s:normal]]"
    stats = standin.wait_for(_is(Stats), TURN_TIMEOUT, "stats").message
    assert stats.dropped == 0
    assert [standin.sessions_named(c) for c in standin.live_connections()] == [
        frozenset({session})
    ]


@pytest.mark.parametrize("arguments", ["status", "off", "on here"])
def test_autoretry_command_toasts_the_daemon_reply_and_never_calls_the_model(
    arguments, provider, standin, start_opencode
):
    server = start_opencode()
    session = server.create_session()["id"]
    standin.wait_connected()

    status, _ = server.command(session, "autoretry", arguments)

    assert status == 500  # the plugin throws to stop the model call (reference §6.5)
    _toast(server, f"stand-in: {arguments}")
    command = standin.wait_for(_is(Command), TURN_TIMEOUT, "command").message
    assert (command.name, command.arguments, command.session_id) == (
        "autoretry",
        arguments,
        session,
    )
    assert provider.requests(include_titles=True) == []
    assert server.messages(session) == []
    assert standin.messages(ChatMessage) == []  # never a user message


def test_autoretry_command_without_daemon_says_how_to_start_it(provider, start_opencode):
    server = start_opencode()  # nothing listens on the socket
    session = server.create_session()["id"]

    status, _ = server.command(session, "autoretry", "status")

    assert status == 500
    _toast(server, "autoretry run")
    assert provider.requests(include_titles=True) == []
    assert server.messages(session) == []


def test_daemon_prompt_arrives_with_agent_model_and_durable_marker(
    provider, standin, start_opencode
):
    server = start_opencode()
    session = server.create_session()["id"]
    standin.wait_connected()
    marker = {"decision": "12", "injection": "7", "kind": "blank"}
    model = ModelRef("fakect", "fake-model")

    ack = standin.request(
        Prompt(
            id=standin.next_id(),
            session_id=session,
            text="Continue.",
            agent="plan",
            model=model,
            marker=marker,
        )
    )

    assert ack.ok, ack.error
    server.wait_idle(session, TURN_TIMEOUT)
    user = next(m for m in server.messages(session) if m["info"]["role"] == "user")
    assert user["info"]["agent"] == "plan"
    assert user["info"]["model"] == {"providerID": "fakect", "modelID": "fake-model"}
    assert user["parts"][0]["text"] == "Continue."
    assert user["parts"][0]["metadata"] == {"autoretry": marker}  # OpenCode keeps the marker
    chat = standin.wait_for(_is(ChatMessage, session_id=session), TURN_TIMEOUT,
                            "chat.message").message
    assert chat.marker == marker
    sent = [r.last_user_text for r in provider.requests()]
    assert len(sent) == 1 and sent[0].startswith("Continue.")  # plan mode appends a reminder


def test_prompt_for_child_or_unknown_session_is_refused(provider, standin, start_opencode):
    server = start_opencode()
    root = server.create_session()["id"]
    child = server.create_session(parent_id=root)["id"]
    standin.wait_connected()

    refused_child = standin.request(
        Prompt(id=standin.next_id(), session_id=child, text="Continue.")
    )
    refused_unknown = standin.request(
        Prompt(id=standin.next_id(), session_id="ses_doesnotexist0000000000", text="Continue.")
    )

    assert (refused_child.ok, refused_child.error) == (False, "child session")
    assert (refused_unknown.ok, refused_unknown.error) == (False, "unreadable")
    assert server.messages(child) == []
    assert provider.requests(include_titles=True) == []


def test_abort_toast_and_log_requests_are_acknowledged(provider, standin, start_opencode):
    server = start_opencode()
    session = server.create_session()["id"]
    standin.wait_connected()
    server.prompt_async(session, "Wait forever [[s:stall]]")
    provider.wait_for_requests(1, TURN_TIMEOUT)

    toast = standin.request(Toast(id=standin.next_id(), message="hello from the daemon"))
    logged = standin.request(Log(id=standin.next_id(), level="info", message="a bridge log line"))
    aborted = standin.request(Abort(id=standin.next_id(), session_id=session))

    assert (toast.ok, logged.ok, aborted.ok) == (True, True, True)
    _toast(server, "hello from the daemon")
    server.wait_idle(session, TURN_TIMEOUT)
    last = server.messages(session)[-1]["info"]
    assert last["error"]["name"] == "MessageAbortedError"


def test_bridge_reconnects_when_the_daemon_restarts(provider, standin, start_opencode):
    server = start_opencode()
    server.ok("GET", "/path")
    first = standin.wait_connected()

    standin.stop()
    standin.start()
    second = standin.wait_connected(timeout=TURN_TIMEOUT, after=1)

    assert second.hello.pid == first.hello.pid
    session = server.create_session()["id"]
    standin.wait_for(
        _bridge_event("session.created", session), TURN_TIMEOUT,
        "the bridge's session.created after it reconnected"
    )


def test_opencode_with_the_bridge_and_no_daemon_completes_a_turn(provider, start_opencode):
    server = start_opencode()  # nothing listens on the socket
    session = server.create_session()["id"]

    server.prompt_async(session, "Say hello [[s:normal]]")
    server.wait_idle(session, TURN_TIMEOUT)

    assistant = server.messages(session)[-1]["info"]
    assert (assistant["role"], assistant["finish"]) == ("assistant", "stop")
    assert [r.behaviour for r in provider.requests()] == ["normal"]
    assert "autoretry" not in server.output().lower()  # the bridge prints nothing


def _joined(deltas: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], str]:
    """The text of each (part, field), in the order its deltas came."""
    texts: dict[tuple[str, str], str] = {}
    for props in deltas:
        key = (str(props["partID"]), str(props.get("field")))
        texts[key] = texts.get(key, "") + props["delta"]
    return texts


@pytest.mark.own_opencode  # starts OpenCode itself
def test_every_delta_of_a_long_answer_reaches_the_daemon(provider, standin, start_opencode):
    server = start_opencode(AUTORETRY_BRIDGE_STATS_MS="200")
    session = server.create_session()["id"]
    standin.wait_connected()

    server.prompt_async(session, "Repeat yourself [[s:repeat:300]]")
    server.wait_idle(session, TURN_TIMEOUT)
    standin.wait_for(_bridge_event("session.idle", session), TURN_TIMEOUT,
                     "session.idle via the bridge")

    sse = [
        e
        for e in server.events.of_type("message.part.delta")
        if e["properties"]["sessionID"] == session
    ]
    bridged = standin.events("message.part.delta")
    assert len(sse) >= 300
    # The bridge joins the deltas of one part sent within 50 ms into one line (issue 12): every
    # character arrives, in order, per part and field, in no more lines than OpenCode published.
    assert _joined(e.properties for e in bridged) == _joined(e["properties"] for e in sse)
    assert len(bridged) <= len(sse)
    # A stats line is a snapshot: one taken while OpenCode publishes the turn's last updates
    # counts the lines still waiting for the next write. Wait for the bridge to have written
    # everything it was given (an event, however slow the machine), then nothing was dropped.
    sent = len(standin.messages())
    stats = standin.wait_for(
        lambda i: _is(Stats)(i) and i.message.sent >= sent and i.message.queued == 0,
        TURN_TIMEOUT,
        "stats after the turn with nothing left queued in the bridge",
    ).message
    assert stats.dropped == 0


def _refusal_logged(server, needle: str) -> bool:
    """OpenCode writes ``app.log`` lines into its log files (and, when asked, to stderr)."""
    logs = sorted((server.home.data_dir / "log").glob("*.log"))
    return any(needle in p.read_text(errors="replace") for p in logs) or needle in server.output()


@pytest.mark.own_opencode  # starts OpenCode itself
def test_bridge_never_connects_to_a_socket_others_could_have_made(provider, start_opencode):
    """Security: a listener in a directory other users can enter (here 0755; /tmp would do) is
    another user's as far as the bridge knows: it gets no connection, so no hello, no event and
    no chance to send a prompt. Once the directory is private (what the daemon makes of it) the
    same listener gets the bridge's hello: the good path still connects."""
    directory = Path(tempfile.mkdtemp(prefix="ar-e2e-open-", dir="/tmp"))
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        os.chmod(directory, 0o755)
        listener.bind(str(directory / "daemon.sock"))
        listener.listen(4)
        server = start_opencode(socket=directory / "daemon.sock")
        wait_until(
            lambda: _refusal_logged(server, "not connecting to the daemon's socket"),
            TURN_TIMEOUT, "the bridge's refusal in OpenCode's log",
        )
        listener.setblocking(False)
        with pytest.raises(BlockingIOError):
            listener.accept()  # nobody connected: the refusal came before any connect

        os.chmod(directory, 0o700)
        listener.settimeout(BACKOFF_CAP + TURN_TIMEOUT)  # the bridge's next retry, then a hello
        conn, _ = listener.accept()
        with conn:
            conn.settimeout(TURN_TIMEOUT)
            first = conn.makefile("rb").readline()
        assert json.loads(first)["type"] == "hello"
    finally:
        listener.close()
        shutil.rmtree(directory, ignore_errors=True)
