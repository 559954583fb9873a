"""The fake provider itself (plain HTTP, fast), and the fast fault shapes through real OpenCode."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from typing import Any

import pytest
from fake_provider import DISCONNECT_400, NORMAL_TEXT, REPEATED, FakeProvider
from fake_shapes import KEEPALIVE, KEEPALIVE_COUNT, MIDSTREAM_MESSAGE
from fake_shapes import install as install_shapes


@pytest.fixture
def fresh() -> Iterator[FakeProvider]:
    provider = FakeProvider().start()
    yield provider
    provider.close()


def post(provider: FakeProvider, text: str, model: str = "fake-model",
         path: str = "/v1/chat/completions", **extra: Any):
    port = int(provider.url.split(":")[2].split("/")[0])
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    body = {
        "model": model,
        "stream": True,
        "messages": [{"role": "user", "content": text}],
        **extra,
    }
    conn.request("POST", path, json.dumps(body), {"content-type": "application/json"})
    return conn.getresponse()


def anthropic_post(provider: FakeProvider, blocks: list[str]):
    """A Messages API request whose one user message holds these text blocks."""
    content = [{"type": "text", "text": text} for text in blocks]
    return post(provider, "", model="claude-fake", path="/v1/messages",
                messages=[{"role": "user", "content": content}], max_tokens=100)


def events(response) -> list[tuple[str, dict[str, Any]]]:
    """Anthropic SSE: (the ``event:`` name, the JSON data) per event."""
    found = []
    for block in response.read().decode().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if "event" in lines:
            found.append((lines["event"], json.loads(lines["data"])))
    return found


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


def test_anthropic_messages_stream_is_a_whole_answer(fresh):
    found = events(anthropic_post(fresh, ["Say hello"]))
    names = [name for name, _ in found]
    assert names[:2] == ["message_start", "ping"] and names[-1] == "message_stop"
    assert all(name == data["type"] for name, data in found)
    deltas = [d["delta"] for n, d in found if n == "content_block_delta"]
    assert "".join(d.get("thinking", "") for d in deltas) == "The user wants a greeting."
    assert "".join(d.get("text", "") for d in deltas) == NORMAL_TEXT
    [stop] = [d for n, d in found if n == "message_delta"]
    assert stop["delta"]["stop_reason"] == "end_turn" and stop["usage"]["output_tokens"] > 0
    assert [r.behaviour for r in fresh.requests()] == ["anthropic"]


def test_anthropic_marker_counts_only_in_the_newest_block(fresh):
    """The Messages API merges a continuation into the prompt's user message."""
    install_shapes(fresh)
    assert anthropic_post(fresh, ["Say hello [[s:a_http529]]"]).status == 529
    merged = events(anthropic_post(fresh, ["Say hello [[s:a_http529]]", "Continue."]))
    assert merged[-1][0] == "message_stop"


@pytest.mark.parametrize(
    ("marker", "status", "kind", "headers"),
    [
        ("[[s:a_http529]]", 529, "overloaded_error", {"x-should-retry": "true"}),
        ("[[s:a_http429]]", 429, "rate_limit_error",
         {"retry-after": "1", "anthropic-ratelimit-requests-remaining": "0"}),
        ("[[s:a_http429:3]]", 429, "rate_limit_error", {"retry-after": "3"}),
        ("[[s:a_http401]]", 401, "authentication_error", {"x-should-retry": "false"}),
    ],
)
def test_anthropic_http_errors(fresh, marker, status, kind, headers):
    install_shapes(fresh)
    response = anthropic_post(fresh, [marker])
    assert response.status == status
    for key, value in headers.items():
        assert response.getheader(key) == value, key
    body = json.loads(response.read())
    assert body["type"] == "error" and body["error"]["type"] == kind


def test_anthropic_overloaded_error_in_the_stream(fresh):
    install_shapes(fresh)
    response = anthropic_post(fresh, ["[[s:a_overloaded_stream]]"])
    assert response.status == 200
    found = events(response)
    assert [n for n, _ in found][:2] == ["message_start", "ping"]
    assert "content_block_delta" in [n for n, _ in found]
    assert found[-1] == ("error", {"type": "error", "error": {"type": "overloaded_error",
                                                              "message": "Overloaded"}})


@pytest.mark.parametrize(
    ("marker", "status", "title", "server"),
    [
        ("[[s:nginx502]]", 502, "502 Bad Gateway", "nginx"),
        ("[[s:nginx504]]", 504, "504 Gateway Time-out", "nginx"),
        ("[[s:cf524]]", 524, "524: A timeout occurred", "cloudflare"),
    ],
)
def test_gateway_html_pages(fresh, marker, status, title, server):
    install_shapes(fresh)
    response = post(fresh, marker)
    assert response.status == status
    assert response.getheader("content-type").startswith("text/html")
    assert response.getheader("server") == server
    assert title in response.read().decode()


def test_openrouter_error_in_the_middle_of_the_stream(fresh):
    install_shapes(fresh)
    items = chunks(post(fresh, "[[s:or_midstream]]"))
    assert "[DONE]" not in items and finish_reasons(items[:-1]) == []
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in items[:-1])
    assert text == "Hello from the "
    assert items[-1] == {"error": {"code": 502, "message": MIDSTREAM_MESSAGE,
                                   "metadata": {"provider_name": "FakeUpstream",
                                                "raw": "upstream overloaded"}}}


def test_openrouter_keepalive_comments_then_close_or_silence(fresh):
    install_shapes(fresh)
    closed = post(fresh, "[[s:or_keepalive]]")
    assert closed.status == 200 and closed.read() == KEEPALIVE * KEEPALIVE_COUNT
    stalled = post(fresh, "[[s:or_keepalive:stall]]")
    assert stalled.status == 200
    assert stalled.read(len(KEEPALIVE) * KEEPALIVE_COUNT) == KEEPALIVE * KEEPALIVE_COUNT
    fresh.reset()  # releases the silent handler
    assert stalled.read() == b""


def test_a_stream_without_usage(fresh):
    install_shapes(fresh)
    items = chunks(post(fresh, "[[s:nousage]]"))
    assert items[-1] == "[DONE]" and finish_reasons(items) == ["stop"]
    assert all("usage" not in c for c in items[:-1])
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in items[:-1])
    assert text == NORMAL_TEXT
