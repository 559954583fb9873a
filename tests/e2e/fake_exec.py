"""One more fake-provider behaviour for the exec scenarios (``install(provider)``).

- ``http401``: ``401 Unauthorized`` with an OpenAI-style ``authentication_error`` body, as a
  provider answers a rejected API key (OpenCode does not retry it; autoretry never does).
"""

from __future__ import annotations

import threading
from typing import Any

from fake_provider import FakeProvider


def http401(h: Any, arg: str, release: threading.Event) -> None:
    h._json(401, {"error": {"message": "Incorrect API key provided (fake)",
                            "type": "authentication_error", "code": "invalid_api_key"}})


def install(provider: FakeProvider) -> FakeProvider:
    provider.responders.update({"http401": http401})
    return provider
