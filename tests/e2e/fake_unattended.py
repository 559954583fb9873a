"""Fake-provider behaviours for the unattended-work scenarios (issue 10; ``install(provider)``).

- ``http401``: 401 "Invalid API key (fake)" (OpenCode: APIError 401, not retried, 1 request).
- ``quota429[:retry_after]``: a hard quota as OpenAI words it: 429 with ``insufficient_quota``
  (default Retry-After 0.1 s, so OpenCode's own 5 retries are quick).
"""

from __future__ import annotations

import threading
from typing import Any

from fake_provider import FakeProvider

QUOTA_MESSAGE = (
    "You exceeded your current quota, please check your plan and billing details. (fake)"
)


def http401(h: Any, arg: str, release: threading.Event) -> None:
    body = {"error": {"message": "Invalid API key (fake)", "type": "invalid_request_error",
                      "code": "invalid_api_key"}}
    h._json(401, body)


def quota429(h: Any, arg: str, release: threading.Event) -> None:
    body = {"error": {"message": QUOTA_MESSAGE, "type": "insufficient_quota",
                      "code": "insufficient_quota"}}
    h._json(429, body, {"retry-after": arg or "0.1"})


def install(provider: FakeProvider) -> FakeProvider:
    provider.responders.update({"http401": http401, "quota429": quota429})
    return provider
