"""Real provider shapes (issue 20): what OpenCode 1.18.33 itself does with each, and what the
daemon must decide. Measured on the real binary against fake_shapes.py (README "Real provider
shapes"); ``test_provider_shapes_e2e.py`` asserts every row on the binary, and
``tests/test_provider_shapes.py`` runs the classifier on the stored errors below.

``requests``: OpenCode's requests for one turn before it gives up (its own retries); None: it
never gives up by itself (a loop, or a stream that hangs). ``error``: the message row's
``error`` as OpenCode stored it (``{name, data}``, the fields that matter), None: no error.
``decision``: the daemon's first decision on the turn, ``(kind, action)``; None: nothing to
continue (the turn finished with an answer).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

ANTHROPIC = {"providerID": "fakeanthropic", "modelID": "claude-fake"}
OPENAI_COMPATIBLE = {"providerID": "fake", "modelID": "fake-model"}

NGINX_502_HEADERS = {"content-type": "text/html; charset=UTF-8", "server": "nginx"}


@dataclass(frozen=True)
class Shape:
    name: str  # the fake provider's behaviour (fake_shapes.py; ``anthropic`` is built in)
    marker: str  # what the prompt carries to get it
    model: dict[str, str]
    requests: int | None
    error: dict[str, Any] | None
    decision: tuple[str, str] | None
    #: OpenCode's stored ``finish`` of the last step when there is no error.
    finish: str | None = None
    #: Response headers OpenCode keeps in the error (a subset is listed; all must be there).
    headers: tuple[str, ...] = ()
    #: It waits out OpenCode's own exponential back-off without Retry-After (~70 s).
    slow: bool = False


def _api(message: str, status: int, retryable: bool) -> dict[str, Any]:
    return {"name": "APIError",
            "data": {"message": message, "statusCode": status, "isRetryable": retryable}}


def _unknown(message: str) -> dict[str, Any]:
    return {"name": "UnknownError", "data": {"message": message}}


SHAPES: tuple[Shape, ...] = (
    # Anthropic Messages API, @ai-sdk/anthropic
    Shape("anthropic", "", ANTHROPIC, 1, None, None, finish="stop"),
    Shape("a_overloaded_stream", "[[s:a_overloaded_stream]]", ANTHROPIC, 6,
          _unknown('{"type":"overloaded_error","message":"Overloaded"}'),
          ("server_error", "inject_at"), slow=True),
    Shape("a_http529", "[[s:a_http529]]", ANTHROPIC, 6, _api("Overloaded", 529, True),
          ("server_error", "inject_at"), headers=("request-id", "x-should-retry"), slow=True),
    Shape("a_http429", "[[s:a_http429]]", ANTHROPIC, 6,
          _api("This request would exceed the rate limit for your organization (fake) of 50 "
               "input tokens per minute. For details, refer to: "
               "https://docs.anthropic.com/en/api/rate-limits", 429, True),
          ("rate_limit", "inject_at"),
          headers=("retry-after", "anthropic-ratelimit-requests-remaining",
                   "anthropic-ratelimit-input-tokens-reset")),
    Shape("a_http401", "[[s:a_http401]]", ANTHROPIC, 1, _api("invalid x-api-key", 401, False),
          ("terminal", "skip"), headers=("request-id",)),
    # gateways in front of an OpenAI-compatible endpoint: HTML error pages
    Shape("nginx502", "[[s:nginx502]]", OPENAI_COMPATIBLE, 6, _api("Bad Gateway", 502, True),
          ("server_error", "inject_at"), headers=("server",), slow=True),
    Shape("nginx504", "[[s:nginx504]]", OPENAI_COMPATIBLE, 6,
          _api("Gateway Time-out", 504, True), ("server_error", "inject_at"),
          headers=("server",), slow=True),
    Shape("cf524", "[[s:cf524]]", OPENAI_COMPATIBLE, 6, _api("A timeout occurred", 524, True),
          ("server_error", "inject_at"), headers=("server", "cf-ray"), slow=True),
    # OpenRouter
    Shape("or_midstream", "[[s:or_midstream]]", OPENAI_COMPATIBLE, 6,
          _unknown('{"message":"Provider returned error","code":502}'),
          ("server_error", "inject_at"), slow=True),
    # keep-alive comments, then the connection closes: a step with finish "unknown" and no
    # output, which OpenCode 1.18 repeats without end (the daemon stops it: runaway)
    Shape("or_keepalive", "[[s:or_keepalive]]", OPENAI_COMPATIBLE, None, None,
          ("runaway", "abort_then_inject"), finish="unknown"),
    # keep-alive comments, then silence: OpenCode waits (no chunk timeout on ``fake``)
    Shape("or_keepalive:stall", "[[s:or_keepalive:stall]]", OPENAI_COMPATIBLE, None, None,
          ("stall", "abort_then_inject")),
    Shape("nousage", "[[s:nousage]]", OPENAI_COMPATIBLE, 1, None, None, finish="stop"),
)


def shape(name: str) -> Shape:
    return next(s for s in SHAPES if s.name == name)
