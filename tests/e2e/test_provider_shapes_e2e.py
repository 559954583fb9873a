"""Real provider shapes through OpenCode 1.18.33 and the daemon (issue 20).

Every row of ``provider_shapes.SHAPES`` runs in a session of its own, all sessions of a test
side by side in one OpenCode with one daemon: OpenCode's own retries of a 5xx without
Retry-After take about 70 s, waited out once for all of them. For each shape the test asserts
what OpenCode did (its requests for the turn, the error it stored: name, message, statusCode,
isRetryable, the response headers it kept; or the finish) and the daemon's first decision:
continued once (kind, action; exactly one continuation, the turn then finishes), or left alone
(a terminal error: ``skip`` with kind ``terminal``, nothing sent; an answer: nothing sent).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from daemon_process import FAST_CONFIG, DaemonProcess, wait_until
from fake_provider import FakeProvider, ProviderRequest
from fake_shapes import install
from opencode import COLD_TURN, OpenCodeServer
from provider_shapes import ANTHROPIC, SHAPES, Shape

pytestmark = [pytest.mark.e2e, pytest.mark.shared_opencode]

TURN = 30.0
#: OpenCode's five back-offs without Retry-After (2, 4, 8, 16, 30 s: ~70 s measured) on a
#: loaded machine, then the continuation.
OWN_RETRIES = 180.0
STALL_TIMEOUT_S = 3.0

FAST = [s for s in SHAPES if not s.slow]
SLOW = [s for s in SHAPES if s.slow]


def tag(shape: Shape) -> str:
    """Names the session's requests in the provider's log (sessions run side by side)."""
    return f"({shape.name})"


def launch(server: OpenCodeServer, shapes: list[Shape]) -> dict[str, str]:
    sessions = {}
    for shape in shapes:
        session = server.create_session(title=f"shape {shape.name}")["id"]
        server.prompt_async(session, f"Say hello {tag(shape)} {shape.marker}".strip(),
                            model=shape.model)
        sessions[shape.name] = session
    return sessions


def requests_of(provider: FakeProvider, shape: Shape) -> list[ProviderRequest]:
    return [r for r in provider.requests() if tag(shape) in json.dumps(r.messages)]


def store_of(d: DaemonProcess, session: str) -> tuple[list[Any], list[Any]]:
    view = d.store()
    try:
        return view.decisions(session), view.injections(session)
    finally:
        view.close()


def assistants(server: OpenCodeServer, session: str) -> list[dict[str, Any]]:
    return [m["info"] for m in server.messages(session) if m["info"]["role"] == "assistant"]


def check_opencode(server: OpenCodeServer, provider: FakeProvider, shape: Shape,
                   session: str) -> None:
    """What OpenCode did by itself: the table's requests and stored error (or finish)."""
    faults = [r for r in requests_of(provider, shape) if r.behaviour == shape.name]
    if shape.requests is not None:
        assert len(faults) == shape.requests, (shape.name, [r.behaviour for r in faults])
    else:  # it never ends the turn by itself: a loop, or one request that hangs
        assert faults, shape.name
    first = assistants(server, session)[0]
    stopped = shape.decision is not None and shape.decision[1] == "abort_then_inject"
    if shape.error is None:
        if not stopped:  # the daemon's abort stores an error on the step it stopped
            assert first.get("error") is None, (shape.name, first.get("error"))
        if shape.finish is not None:
            assert first.get("finish") == shape.finish, (shape.name, first)
        return
    error = first.get("error") or {}
    data = error.get("data", {})
    assert error.get("name") == shape.error["name"], (shape.name, error)
    for key, want in shape.error["data"].items():
        assert data.get(key) == want, (shape.name, key, data.get(key))
    if "statusCode" not in shape.error["data"]:
        assert data.get("statusCode") is None and data.get("isRetryable") is None, data
    kept = {k.lower() for k in data.get("responseHeaders") or {}}
    assert set(shape.headers) <= kept, (shape.name, kept)


def check_continued(server: OpenCodeServer, d: DaemonProcess, provider: FakeProvider,
                    shape: Shape, session: str, timeout: float) -> None:
    assert shape.decision is not None
    wait_until(lambda: any(i.state == "confirmed" for i in store_of(d, session)[1]), timeout,
               f"{shape.name}: the continuation is confirmed")
    wait_until(lambda: server.finished_ok(session), TURN, f"{shape.name}: the turn completes")
    decisions, injections = store_of(d, session)
    first = decisions[0]
    assert (first.kind, first.action) == shape.decision, (shape.name, decisions)
    assert len(injections) == 1, (shape.name, injections)
    requests = requests_of(provider, shape)
    faults = [r for r in requests if r.behaviour == shape.name]
    after = [r for r in requests if r.at > faults[-1].at]
    assert [r.behaviour for r in after] in (["normal"], ["anthropic"]), (shape.name, after)
    if shape.requests is not None:  # OpenCode gave up by itself before the daemon decided
        assert first.at.timestamp() >= faults[-1].at, (shape.name, first.at, faults[-1].at)


def check_terminal(d: DaemonProcess, shape: Shape, session: str) -> None:
    decisions = wait_until(lambda: store_of(d, session)[0], TURN,
                           f"{shape.name}: the error is judged")
    assert [(x.kind, x.action) for x in decisions] == [shape.decision], (shape.name, decisions)
    assert store_of(d, session)[1] == [], f"{shape.name}: a terminal error was continued"


def check_answered(server: OpenCodeServer, d: DaemonProcess, shape: Shape,
                   session: str) -> None:
    wait_until(lambda: server.finished_ok(session), TURN, f"{shape.name}: the answer")
    decisions, injections = store_of(d, session)
    assert injections == [] and all(x.action == "skip" for x in decisions), (
        shape.name, decisions)


def warm_anthropic(server: OpenCodeServer) -> None:
    """One plain turn through ``fakeanthropic`` before the daemon starts: loading the
    provider's SDK on a loaded machine must not look like a stall (``stall_timeout`` 3 s)."""
    session = server.create_session(title="warm-up anthropic")["id"]
    server.prompt_async(session, "Say hello", model=ANTHROPIC)
    server.wait_idle(session, COLD_TURN)
    assert server.finished_ok(session), server.messages(session)[-1:]


def run(shapes: list[Shape], provider: FakeProvider, daemon: Any, start_opencode: Any,
        config: str, timeout: float) -> None:
    install(provider)
    server = start_opencode(warm=True)
    warm_anthropic(server)
    provider.reset()  # the scenario's requests only
    d = daemon(config=config)
    d.wait_log("connected: pid", TURN)
    sessions = launch(server, shapes)
    for shape in shapes:
        session = sessions[shape.name]
        if shape.decision is None:
            check_answered(server, d, shape, session)
        elif shape.decision[1] == "skip":
            check_terminal(d, shape, session)
        else:
            check_continued(server, d, provider, shape, session, timeout)
    for shape in shapes:  # after every turn ended: what OpenCode did on its own
        check_opencode(server, provider, shape, sessions[shape.name])
    for shape in shapes:  # still left alone once the others were continued and answered
        if shape.decision is None or shape.decision[1] == "skip":
            assert store_of(d, sessions[shape.name])[1] == [], shape.name


def test_fast_shapes_side_by_side(provider, daemon, start_opencode):
    """Anthropic's answer, 429 and 401; keep-alive comments then a close or silence; a stream
    with no usage."""
    config = f"stall_timeout = {STALL_TIMEOUT_S}\n" + FAST_CONFIG
    run(FAST, provider, daemon, start_opencode, config, TURN)


@pytest.mark.long
@pytest.mark.opencode("gives_up")
def test_shapes_opencode_retries_side_by_side(provider, daemon, start_opencode):
    """Anthropic's 529 and in-stream overloaded_error, nginx 502/504, Cloudflare 524 and
    OpenRouter's mid-stream error: OpenCode retries each five times by itself (no
    Retry-After), then the daemon continues each once."""
    run(SLOW, provider, daemon, start_opencode, FAST_CONFIG, OWN_RETRIES)
