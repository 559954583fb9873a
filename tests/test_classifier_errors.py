"""classify_error: OpenCode 1.18's real error shapes, MiMo's decide cases M10-M25, older shapes."""

from __future__ import annotations

from typing import Any

import pytest

from opencode_autoretry.decisions.classifier import classify_error
from opencode_autoretry.models import ErrorInfo, Kind

SOCKET_CLOSED = (
    "Cannot connect to API: The socket connection was closed unexpectedly. For more "
    "information, pass `verbose: true` in the second argument to fetch()"
)
AGENT = 'Agent not found: "no-such-agent". Available agents: build, explore, general, plan'


def api(message: str = "", **fields: Any) -> ErrorInfo:
    return ErrorInfo("APIError", message, **fields)


# (label, error, kind): one row per real or harvested shape.
ERROR_CASES = [
    # OpenCode 1.18 failure catalogue (§2.6)
    ("rst", api("Connection reset by server", is_retryable=True, code="ECONNRESET"),
     Kind.DISCONNECT),
    ("closed before a byte", api(SOCKET_CLOSED, is_retryable=True), Kind.DISCONNECT),
    ("sse stall", api("SSE read timed out", is_retryable=True, code="ProviderResponseStreamError"),
     Kind.TIMEOUT),
    ("no headers", api("Provider response headers timed out after 6000ms", is_retryable=True,
                       code="ProviderHeaderTimeoutError"), Kind.TIMEOUT),
    ("429", api("Too Many Requests", status_code=429, is_retryable=True), Kind.RATE_LIMIT),
    ("500", api("Internal Server Error", status_code=500, is_retryable=True), Kind.SERVER_ERROR),
    ("503", api("Service Unavailable", status_code=503, is_retryable=True), Kind.SERVER_ERROR),
    ("400 invalid", api("Bad Request", status_code=400, is_retryable=False,
                        response_body='{"error":{"type":"invalid_request_error"}}'), Kind.TERMINAL),
    ("400 server_error body", api("Bad Request", status_code=400, is_retryable=False,
                                  response_body='{"error":{"type":"server_error"}}'),
     Kind.SERVER_ERROR),
    ("400 gateway cut (D5)", api("Connection failed: Server disconnected without sending a "
                                 "response.", status_code=400, is_retryable=False),
     Kind.DISCONNECT),
    ("403 connection refused text", api("upstream connection refused", status_code=403),
     Kind.DISCONNECT),
    ("401", api("Invalid API key (fake)", status_code=401, is_retryable=False), Kind.TERMINAL),
    ("overflow", ErrorInfo("ContextOverflowError", "context_length_exceeded"), Kind.TERMINAL),
    ("missing key", ErrorInfo("ProviderAuthError", "OpenAI API key is missing."), Kind.TERMINAL),
    ("unknown agent", ErrorInfo("UnknownError", AGENT), Kind.TERMINAL),
    ("abort", ErrorInfo("MessageAbortedError", "Aborted"), Kind.USER_ABORT),
    ("dom abort", ErrorInfo("AbortError", "The operation was aborted."), Kind.USER_ABORT),
    ("zlib code", api("unexpected end of file", is_retryable=True, code="ZlibError"),
     Kind.STREAM_TRUNCATED),
    # the kind table of the brief
    ("ECONNREFUSED", api("connect ECONNREFUSED 127.0.0.1:443"), Kind.DISCONNECT),
    ("EPIPE", api("write EPIPE"), Kind.DISCONNECT),
    ("ETIMEDOUT", api("connect ETIMEDOUT"), Kind.TIMEOUT),
    ("408", api("Request Timeout", status_code=408), Kind.SERVER_ERROR),
    ("425", api("Too Early", status_code=425), Kind.SERVER_ERROR),
    ("501", api("Not Implemented", status_code=501, is_retryable=True), Kind.TERMINAL),
    ("505", api("HTTP Version Not Supported", status_code=505), Kind.TERMINAL),
    ("404", api("Not Found", status_code=404), Kind.TERMINAL),
    ("413", api("Payload Too Large", status_code=413), Kind.TERMINAL),
    ("usage limit", api("You have reached your usage limit", status_code=429), Kind.TERMINAL),
    ("insufficient quota", api("You exceeded your current quota, please check your plan and "
                               "billing details.", status_code=429), Kind.TERMINAL),
    ("unknown transient", api("something odd", is_retryable=True), Kind.SERVER_ERROR),
    ("unknown, not retryable", api("something odd", is_retryable=False), Kind.TERMINAL),
    ("unknown, no flag", ErrorInfo("UnknownError", "boom"), Kind.TERMINAL),
    ("output length", ErrorInfo("OutputLengthError", ""), Kind.TRUNCATED),
    ("structured", ErrorInfo("StructuredOutputError", "bad schema"), Kind.TERMINAL),
    ("undici terminated", ErrorInfo("TypeError", "terminated"), Kind.DISCONNECT),
    # MiMo decide cases
    ("M10 streamed server_error", api('{"type":"error","error":{"type":"server_error"}}'),
     Kind.SERVER_ERROR),
    ("M11 too_many_requests", api('{"type":"error","error":{"type":"too_many_requests"}}'),
     Kind.RATE_LIMIT),
    ("M12 code string", api("failed", response_body='{"error":{"code":"429"}}'), Kind.RATE_LIMIT),
    ("M12 code number", api("failed", response_body='{"error":{"code":429}}'), Kind.RATE_LIMIT),
    ("M12 top-level code", api("failed", code="429"), Kind.RATE_LIMIT),
    ("M12 nested", api("failed", response_body='{"error":{"message":"Rate limit exceeded"}}'),
     Kind.RATE_LIMIT),
    ("M13 exhausted", api("failed", code="resource_exhausted"), Kind.SERVER_ERROR),
    ("M14 no_kv_space", api('{"error":{"type":"no_kv_space"}}'), Kind.TERMINAL),
    ("M14 numeric code", api("failed", code="1234"), Kind.TERMINAL),
    ("M14 plain text", api("the model said no"), Kind.TERMINAL),
    ("M15 alibaba", api("Request rate increased too quickly, please slow down"), Kind.RATE_LIMIT),
    ("M16 rate limit", api("Rate limit exceeded, please retry"), Kind.RATE_LIMIT),
    ("M16 too many", api("Too many requests, slow down"), Kind.RATE_LIMIT),
    ("M17 overflow over 400", ErrorInfo("ContextOverflowError", "too long", status_code=400),
     Kind.TERMINAL),
    ("M18 500 flagged false", api("x", status_code=500, is_retryable=False), Kind.SERVER_ERROR),
    ("M18 502 flagged false", api("x", status_code=502, is_retryable=False), Kind.SERVER_ERROR),
    ("M18 503 flagged false", api("x", status_code=503, is_retryable=False), Kind.SERVER_ERROR),
    ("M18 400 flagged false", api("x", status_code=400, is_retryable=False), Kind.TERMINAL),
    ("M19 429 flagged false", api("x", status_code=429, is_retryable=False), Kind.RATE_LIMIT),
    ("M19 body, no status", api("x", response_body="rate limit reached"), Kind.RATE_LIMIT),
    ("M20 free usage", ErrorInfo("FreeUsageLimitError", "upgrade", status_code=429),
     Kind.TERMINAL),
    ("M21 subscription", ErrorInfo("SubscriptionUsageLimitError", "limit", status_code=429),
     Kind.TERMINAL),
    ("M22 decompression", api("Response decompression failed", code="ZlibError"),
     Kind.STREAM_TRUNCATED),
    ("M23 reset mid-body", api("Connection reset by server", code="ECONNRESET"),
     Kind.DISCONNECT),
    ("M24 retry wrapper", ErrorInfo("AI_RetryError", "Failed after 3 attempts. Last error: "
                                    "Service Unavailable"), Kind.SERVER_ERROR),
    ("M25 sse", api("SSE read timed out"), Kind.TIMEOUT),
    ("M25 EPIPE code", api("x", code="EPIPE"), Kind.DISCONNECT),
    ("M25 ETIMEDOUT code", api("x", code="ETIMEDOUT"), Kind.TIMEOUT),
    ("M25 504", api("x", status_code=504), Kind.SERVER_ERROR),
    ("M25 529", api("x", status_code=529), Kind.SERVER_ERROR),
    ("M25 syntax error", ErrorInfo("SyntaxError", "syntax error"), Kind.TERMINAL),
    # older / looser shapes: no name detail, everything in the message
    ("old json parse", ErrorInfo("UnknownError", "JSON Parse error: Unterminated string"),
     Kind.STREAM_TRUNCATED),
    ("old overloaded", ErrorInfo("UnknownError", "Overloaded"), Kind.SERVER_ERROR),
    ("old disconnect", ErrorInfo("UnknownError", "Server disconnected"), Kind.DISCONNECT),
]  # fmt: skip


@pytest.mark.parametrize(("label", "error", "kind"), ERROR_CASES, ids=[c[0] for c in ERROR_CASES])
def test_classify_error(label: str, error: ErrorInfo, kind: Kind) -> None:
    got, reason = classify_error(error)
    assert got is kind, reason
    assert reason.strip() and len(reason) < 200


REASON_CASES = [
    (api("Connection reset by server", code="ECONNRESET"),
     "connection reset by the provider (ECONNRESET)"),
    (api("Too Many Requests", status_code=429), "rate limited by the provider (HTTP 429)"),
    (api("Not Found", status_code=404), "the provider rejected the request (HTTP 404; Not Found)"),
    (ErrorInfo("MessageAbortedError", "Aborted"), "aborted by the user"),
    (api("SSE read timed out", code="ProviderResponseStreamError"),
     "the provider's stream stalled (ProviderResponseStreamError)"),
    (api("weird", is_retryable=True), "unrecognised transient error (weird)"),
]  # fmt: skip


@pytest.mark.parametrize(("error", "reason"), REASON_CASES)
def test_reason_is_short_and_names_the_evidence(error: ErrorInfo, reason: str) -> None:
    assert classify_error(error)[1] == reason


def test_long_messages_are_shortened_in_the_reason() -> None:
    _, reason = classify_error(api("fetch failed " + "x" * 500))
    assert reason.startswith("could not reach the provider (fetch failed x")
    assert reason.endswith("…)") and len(reason) < 120
