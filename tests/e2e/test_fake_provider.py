"""The fake provider itself (plain HTTP, fast), and the fast fault shapes through real OpenCode."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from typing import Any

import pytest
from fake_provider import DISCONNECT_400, REPEATED, FakeProvider


@pytest.fixture
def fresh() -> Iterator[FakeProvider]:
    provider = FakeProvider().start()
    yield provider
    provider.close()


def post(provider: FakeProvider, text: str, model: str = "fake-model", **extra: Any):
    port = int(provider.url.split(":")[2].split("/")[0])
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    body = {
        "model": model,
        "stream": True,
        "messages": [{"role": "user", "content": text}],
        **extra,
    }
    conn.request(
        "POST", "/v1/chat/completions", json.dumps(body), {"content-type": "application/json"}
    )
    return conn.getresponse()


def chunks(response) -> list[Any]:
    lines = [line for line in response.read().decode().split("\n\n") if line.startswith("data: ")]
    return [line[6:] if line[6:] == "[DONE]" else json.loads(line[6:]) for line in lines]


def finish_reasons(items: list[Any]) -> list[str]:
    return [
        c["choices"][0]["finish_reason"]
        for c in items
        if c != "[DONE]" and c["choices"][0]["finish_reason"]
    ]


@pytest.mark.parametrize(
    ("marker", "finishes", "content"),
    [
        ("[[s:normal]]", ["stop"], "Hello from the fake model. This is a normal answer. "),
        ("[[s:blank]]", ["stop"], ""),
        ("[[s:length]]", ["length"], ""),
        ("[[s:noreason]]", [], "Hello from the fake model. This is a normal answer. "),
        ("[[s:repeat:3]]", ["stop"], REPEATED * 3),
        ("no marker", ["stop"], "Hello from the fake model. This is a normal answer. "),
    ],
)
def test_streamed_behaviours(fresh, marker, finishes, content):
    items = chunks(post(fresh, f"go {marker}"))
    assert items[-1] == "[DONE]"
    assert finish_reasons(items) == finishes
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in items if c != "[DONE]")
    assert text == content


def test_reasoning_only_and_tool_call(fresh):
    reasoning = chunks(post(fresh, "[[s:reasoning]]"))
    deltas = [c["choices"][0]["delta"] for c in reasoning if c != "[DONE]"]
    assert all("content" not in d for d in deltas) and any("reasoning_content" in d for d in deltas)
    tool = chunks(post(fresh, "[[s:tool]]"))
    assert tool[0]["choices"][0]["delta"]["tool_calls"][0]["function"]["name"] == "bash"
    assert finish_reasons(tool) == ["tool_calls"]


@pytest.mark.parametrize(
    ("marker", "status", "message", "retry_after"),
    [
        ("[[s:http400_disconnect]]", 400, DISCONNECT_400, None),
        ("[[s:http429]]", 429, "Rate limit exceeded (fake)", "1"),
        ("[[s:http429:7]]", 429, "Rate limit exceeded (fake)", "7"),
        ("[[s:http500]]", 500, "Internal server error (fake)", None),
    ],
)
def test_http_errors(fresh, marker, status, message, retry_after):
    response = post(fresh, marker)
    assert response.status == status
    assert response.getheader("retry-after") == retry_after
    assert json.loads(response.read())["error"]["message"] == message


def test_reset_mid_stream_is_a_connection_reset(fresh):
    response = post(fresh, "[[s:reset:2]]")
    assert response.status == 200
    with pytest.raises((ConnectionResetError, http.client.IncompleteRead)):
        response.read()


def test_stall_sends_headers_then_nothing_until_reset(fresh):
    response = post(fresh, "[[s:stall]]")
    assert response.status == 200
    fresh.reset()  # releases the stalled handler
    assert response.read() == b""


def test_script_beats_markers_and_titles_do_not_consume_it(fresh):
    fresh.script(["blank"])
    title = chunks(post(fresh, "[[s:normal]]", model="fake-small"))
    scripted = chunks(post(fresh, "[[s:normal]]"))
    after = chunks(post(fresh, "[[s:length]]"))
    assert finish_reasons(title) == ["stop"] and finish_reasons(scripted) == ["stop"]
    assert finish_reasons(after) == ["length"]
    log = fresh.requests(include_titles=True)
    assert [(r.behaviour, r.is_title) for r in log] == [
        ("title", True),
        ("blank", False),
        ("length", False),
    ]
    assert [r.behaviour for r in fresh.requests()] == ["blank", "length"]


def test_a_tool_result_is_answered_normally(fresh):
    messages = [
        {"role": "user", "content": "[[s:tool]]"},
        {"role": "tool", "content": "hi", "tool_call_id": "x"},
    ]
    port = int(fresh.url.split(":")[2].split("/")[0])
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request(
        "POST",
        "/v1/chat/completions",
        json.dumps({"model": "fake-model", "stream": True, "messages": messages}),
    )
    assert finish_reasons(chunks(conn.getresponse())) == ["stop"]


def test_models_endpoint(fresh):
    port = int(fresh.url.split(":")[2].split("/")[0])
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", "/v1/models")
    assert [m["id"] for m in json.loads(conn.getresponse().read())["data"]] == [
        "fake-model",
        "fake-small",
    ]


FAST_SHAPES = [
    ("blank", {"finish": "stop", "output": 0, "reasoning": 0, "error": None}),
    ("length", {"finish": "length", "output": 0, "reasoning": 0, "error": None}),
    ("reasoning", {"finish": "stop", "output": 0, "reasoning": 5, "error": None}),
    ("http400_disconnect", {"finish": None, "output": 0, "reasoning": 0, "error": "APIError"}),
]


@pytest.mark.e2e
def test_fast_fault_shapes_through_opencode(provider, start_opencode):
    server = start_opencode()  # no daemon: the bridge stays quiet
    sessions = {}
    for name, _ in FAST_SHAPES:
        sessions[name] = server.create_session()["id"]
        server.prompt_async(sessions[name], f"go [[s:{name}]]")
    tool = server.create_session()["id"]
    server.prompt_async(tool, "use a tool [[s:tool]]")
    for session in [*sessions.values(), tool]:
        server.wait_idle(session, 30)

    for name, expected in FAST_SHAPES:
        last = server.messages(sessions[name])[-1]["info"]
        got = {
            "finish": last.get("finish"),
            "output": last["tokens"]["output"],
            "reasoning": last["tokens"]["reasoning"],
            "error": (last.get("error") or {}).get("name"),
        }
        assert got == expected, name
    assistant = [m["info"] for m in server.messages(tool) if m["info"]["role"] == "assistant"]
    assert [m["finish"] for m in assistant] == ["tool-calls", "stop"]
