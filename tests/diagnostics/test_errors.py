"""``autoretry errors`` (D28): newest errored steps, or keyword matches with context."""

from __future__ import annotations

import json

ERRORED_NEWEST_FIRST = [
    "terminal",
    "stream_truncated",
    "timeout",
    "server_error",
    "user_abort",
    "rate_limit",
    "disconnect",
]


def test_without_keyword_lists_newest_errored_steps_with_kinds(invoke, seeded) -> None:
    result = invoke("errors", "--json")
    assert result.exit_code == 0, result.output
    body = json.loads(result.output)
    assert body["keyword"] is None
    assert [m["message_id"] for m in body["matches"]] == [
        seeded.steps[n] for n in ERRORED_NEWEST_FIRST
    ]
    assert [m["kind"] for m in body["matches"]] == ERRORED_NEWEST_FIRST
    first = body["matches"][0]
    assert first["command"] == f"autoretry timeline {seeded.sessions['net']}"
    assert first["error"]["status_code"] == 401 and first["retryable"] is False
    assert first["previous"] is None  # the previous step is shown in keyword mode


def test_keyword_match_has_full_fields_and_previous_assistant(invoke, seeded) -> None:
    body = json.loads(invoke("errors", "connection RESET", "--json").output)
    assert [m["message_id"] for m in body["matches"]] == [seeded.steps["disconnect"]]
    match = body["matches"][0]
    assert match["error"]["code"] == "ECONNRESET" and match["error"]["is_retryable"] is True
    assert (match["provider"], match["model"]) == ("fake", "fake-model")
    assert match["parts"] == 2 and match["kind"] == "disconnect"
    previous = match["previous"]
    assert previous["id"] == seeded.steps["recovered"]
    assert previous["finish"] == "stop" and previous["tokens"]["output"] == 42
    assert previous["has_text"] is True and previous["has_tool"] is False


def test_keyword_returns_at_most_five(invoke) -> None:
    body = json.loads(invoke("errors", "APIError", "--json").output)
    assert len(body["matches"]) == 5


def test_keyword_with_like_wildcards_is_literal(invoke) -> None:
    body = json.loads(invoke("errors", "100%_sure", "--json").output)
    assert body["matches"] == []
    assert "✓ none" in invoke("errors", "100%_sure").output


def test_human_output(invoke, seeded) -> None:
    out = invoke("errors").output
    assert "The 10 newest errored steps: 7" in out
    assert "APIError: Invalid API key (fake)" in out and "kind=terminal" in out
    assert f"autoretry timeline {seeded.sessions['net']}" in out
    detail = invoke("errors", "reset").output
    assert "previous: finish=stop out=42 hasTool=False hasText=True" in detail
    assert "code: ECONNRESET" in detail
