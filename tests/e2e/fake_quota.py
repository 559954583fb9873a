"""Fake-provider behaviours for quota waits (issue 23; ``install(provider)``).

- ``usage429:SECONDS`` (OpenAI-compatible): a coding plan's usage window as Z.ai words it, 429
  "Usage limit reached for 5 hour. Your limit will reset at <ISO time>", resetting SECONDS after
  the response, named by every reset header a provider sends (``x-ratelimit-reset-requests``,
  ``x-ratelimit-reset``, ``anthropic-ratelimit-unified-reset``) besides the text, with
  ``retry-after-ms: 100`` so OpenCode's own five retries pass in a second.
- ``a_usage429:SECONDS``: the same on the Anthropic Messages API (``rate_limit_error``).

``resets()`` lists the reset each response announced (epoch seconds), newest last.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from typing import Any

from fake_provider import FakeProvider

RESETS: list[float] = []  # the resets announced since ``install``, newest last


def _reset_headers(reset: float, seconds: float) -> dict[str, str]:
    return {
        "retry-after-ms": "100",
        "x-ratelimit-limit-requests": "100",
        "x-ratelimit-remaining-requests": "0",
        "x-ratelimit-reset-requests": f"{seconds:g}s",
        "x-ratelimit-reset": str(int(reset)),
        "anthropic-ratelimit-unified-status": "rejected",
        "anthropic-ratelimit-unified-reset": str(int(reset)),
    }


def _message(reset: float) -> str:
    stamp = datetime.fromtimestamp(reset, UTC).isoformat(timespec="milliseconds")
    return (f"Usage limit reached for 5 hour. Your limit will reset at "
            f"{stamp.replace('+00:00', 'Z')} (fake)")


def _announce(h: Any, arg: str) -> tuple[float, float]:
    seconds = float(arg or "20")
    reset = time.time() + seconds
    RESETS.append(reset)
    return reset, seconds


def usage429(h: Any, arg: str, release: threading.Event) -> None:
    reset, seconds = _announce(h, arg)
    body = {"error": {"message": _message(reset), "type": "usage_limit_reached",
                      "code": "1308"}}
    h._json(429, body, _reset_headers(reset, seconds))


def a_usage429(h: Any, arg: str, release: threading.Event) -> None:
    reset, seconds = _announce(h, arg)
    body = {"type": "error", "request_id": "req_fake",
            "error": {"type": "rate_limit_error", "message": _message(reset)}}
    h._json(429, body, {"request-id": "req_fake", **_reset_headers(reset, seconds)})


def resets() -> list[float]:
    return list(RESETS)


def install(provider: FakeProvider) -> FakeProvider:
    provider.responders.update({"usage429": usage429, "a_usage429": a_usage429})
    RESETS.clear()
    return provider
