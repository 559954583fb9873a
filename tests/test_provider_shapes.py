"""The classifier on the errors OpenCode 1.18.33 stored for real provider shapes (issue 20):
Anthropic's Messages API, gateway HTML pages, OpenRouter's mid-stream error. The rows are the
measured ones of ``tests/e2e/provider_shapes.py`` (asserted there on the binary), with the
response headers and bodies the fake sends (``tests/e2e/fake_shapes.py``)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from fake_shapes import AUTH_FAILED, CLOUDFLARE_524, NGINX_PAGE, OVERLOADED
from provider_shapes import SHAPES, Shape

from opencode_autoretry.decisions.classifier import is_retryable, retry_hint_ms
from opencode_autoretry.decisions.error_kinds import classify_error
from opencode_autoretry.models import Kind
from opencode_autoretry.opencode.shapes import parse_error

NOW = datetime(2026, 12, 2, 6, 31, 40, tzinfo=UTC)

#: What OpenCode kept besides the table's fields: the response headers and body.
STORED_EXTRA: dict[str, dict[str, Any]] = {
    "a_http529": {"responseHeaders": {"request-id": "req_fake", "x-should-retry": "true",
                                      "content-type": "application/json"},
                  "responseBody": json.dumps({"type": "error", "error": OVERLOADED})},
    "a_http429": {"responseHeaders": {"retry-after": "1",
                                      "anthropic-ratelimit-requests-remaining": "0",
                                      "anthropic-ratelimit-requests-reset": "2026-12-02T06:31:42Z",
                                      "anthropic-ratelimit-input-tokens-reset":
                                          "2026-12-02T06:31:42Z"}},
    "a_http401": {"responseHeaders": {"request-id": "req_fake", "x-should-retry": "false"},
                  "responseBody": json.dumps({"type": "error", "error": AUTH_FAILED})},
    "nginx502": {"responseHeaders": {"server": "nginx", "content-type": "text/html"},
                 "responseBody": NGINX_PAGE.format(code=502, text="Bad Gateway")},
    "nginx504": {"responseHeaders": {"server": "nginx", "content-type": "text/html"},
                 "responseBody": NGINX_PAGE.format(code=504, text="Gateway Time-out")},
    "cf524": {"responseHeaders": {"server": "cloudflare", "cf-ray": "8f0fake524abcd-FRA"},
              "responseBody": CLOUDFLARE_524},
}

ERRORED = [s for s in SHAPES if s.error is not None]


def stored(shape: Shape) -> dict[str, Any]:
    assert shape.error is not None
    data = {**shape.error["data"], **STORED_EXTRA.get(shape.name, {})}
    return {"name": shape.error["name"], "data": data}


@pytest.mark.parametrize("shape", ERRORED, ids=[s.name for s in ERRORED])
def test_each_stored_error_gets_the_tables_kind(shape: Shape) -> None:
    assert shape.decision is not None
    error = parse_error(stored(shape))
    assert error is not None
    kind, reason = classify_error(error)
    assert kind == Kind(shape.decision[0]), reason
    assert is_retryable(kind) == (shape.decision[1] != "skip")


def test_anthropic_429_waits_for_its_retry_after() -> None:
    error = parse_error(stored(next(s for s in SHAPES if s.name == "a_http429")))
    assert error is not None
    assert retry_hint_ms(error, NOW) == 1000


@pytest.mark.parametrize("name", ["nginx502", "nginx504", "cf524", "a_http529"])
def test_a_gateway_page_gives_no_retry_hint(name: str) -> None:
    """The HTML says nothing about when to come back; the budget's back-off applies."""
    error = parse_error(stored(next(s for s in SHAPES if s.name == name)))
    assert error is not None
    assert retry_hint_ms(error, NOW) is None


def test_the_401_is_terminal_with_its_status_and_wording_as_the_reason() -> None:
    error = parse_error(stored(next(s for s in SHAPES if s.name == "a_http401")))
    assert error is not None
    kind, reason = classify_error(error)
    assert kind is Kind.TERMINAL
    assert "HTTP 401" in reason and "invalid x-api-key" in reason
