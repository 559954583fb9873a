"""Real provider fault shapes (issue 20; ``install(provider)``): what Anthropic, OpenRouter and
corporate gateways send, as opposed to the OpenAI-style JSON errors of the other fakes.

Anthropic Messages API (``POST /v1/messages``, OpenCode provider ``fakeanthropic``):
- ``a_overloaded_stream``: a stream that starts normally (message_start, ping, some text) and
  then carries an in-stream ``error`` event of type ``overloaded_error``;
- ``a_http529``: HTTP 529 ``overloaded_error`` (no Retry-After, as Anthropic sends it);
- ``a_http429[:retry_after]``: HTTP 429 ``rate_limit_error`` with ``retry-after`` (default 1 s)
  and the ``anthropic-ratelimit-*`` headers;
- ``a_http401``: HTTP 401 ``authentication_error`` "invalid x-api-key".

OpenAI-compatible endpoint (``/v1/chat/completions``), as gateways and OpenRouter do it:
- ``nginx502``, ``nginx504``: nginx's HTML error pages (``text/html``);
- ``cf524``: Cloudflare's HTML "A timeout occurred" page, Error code 524;
- ``or_midstream[:code]``: some chunks, then ``data: {"error": {"code": 502, "message": …}}``
  and the connection closes (OpenRouter's mid-stream provider error);
- ``or_keepalive[:close|stall]``: only ``: OPENROUTER PROCESSING`` comment lines, then the
  connection closes (default) or stays open, silent, until the test resets the provider;
- ``nousage``: a normal answer whose chunks carry no ``usage`` at all.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

from fake_provider import NORMAL_TEXT, FakeProvider, _chunk, anthropic_start, anthropic_text_block

OVERLOADED = {"type": "overloaded_error", "message": "Overloaded"}
RATE_LIMITED = {
    "type": "rate_limit_error",
    "message": "This request would exceed the rate limit for your organization (fake) of 50 "
    "input tokens per minute. For details, refer to: https://docs.anthropic.com/en/api/rate-limits",
}
AUTH_FAILED = {"type": "authentication_error", "message": "invalid x-api-key"}
MIDSTREAM_MESSAGE = "Provider returned error"
KEEPALIVE = b": OPENROUTER PROCESSING\n\n"
KEEPALIVE_COUNT = 5
KEEPALIVE_PACE_S = 0.05

NGINX_PAGE = """<html>
<head><title>{code} {text}</title></head>
<body>
<center><h1>{code} {text}</h1></center>
<hr><center>nginx</center>
</body>
</html>
"""

CLOUDFLARE_524 = """<!DOCTYPE html>
<!--[if lt IE 7]> <html class="no-js ie6 oldie" lang="en-US"> <![endif]-->
<html class="no-js" lang="en-US">
<head>
<title>gateway.example.com | 524: A timeout occurred</title>
<meta charset="UTF-8" />
<meta http-equiv="Content-Type" content="text/html; charset=UTF-8" />
</head>
<body>
<div id="cf-wrapper">
  <div id="cf-error-details" class="p-0">
    <header class="mx-auto pt-10 lg:pt-6 lg:px-8 w-240 lg:w-full mb-8">
      <h1 class="inline-block sm:block sm:mb-2 font-light text-60 lg:text-4xl">
        <span class="inline-block">A timeout occurred</span>
        <span class="code-label">Error code 524</span>
      </h1>
    </header>
    <div class="w-240 lg:w-full mx-auto mb-8 lg:px-8">
      <h2>What happened?</h2>
      <p>The origin web server timed out responding to this request.</p>
    </div>
    <p>Cloudflare Ray ID: <strong>8f0fake524abcd</strong></p>
  </div>
</div>
</body>
</html>
"""


def _anthropic_error(status: int, error: dict[str, str], headers: dict[str, str]) -> Any:
    def respond(h: Any, arg: str, release: threading.Event) -> None:
        body = {"type": "error", "error": error, "request_id": "req_fake"}
        h._json(status, body, {"request-id": "req_fake", **headers})

    return respond


def a_http429(h: Any, arg: str, release: threading.Event) -> None:
    reset = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 1))
    headers = {
        "retry-after": arg or "1",
        "anthropic-ratelimit-requests-limit": "50",
        "anthropic-ratelimit-requests-remaining": "0",
        "anthropic-ratelimit-requests-reset": reset,
        "anthropic-ratelimit-input-tokens-limit": "50",
        "anthropic-ratelimit-input-tokens-remaining": "0",
        "anthropic-ratelimit-input-tokens-reset": reset,
    }
    _anthropic_error(429, RATE_LIMITED, headers)(h, arg, release)


def a_overloaded_stream(h: Any, arg: str, release: threading.Event) -> None:
    anthropic_start(h)
    anthropic_text_block(h, 0, "Hello from the fake model. ")
    h._event({"type": "error", "error": OVERLOADED})


def _html(status: int, reason: str, page: str, headers: dict[str, str]) -> Any:
    def respond(h: Any, arg: str, release: threading.Event) -> None:
        data = page.encode()
        h.send_response_only(status, reason)  # no "Server: BaseHTTP": the gateway's own
        h.send_header("date", h.date_time_string())
        h.send_header("content-type", "text/html; charset=UTF-8")
        h.send_header("content-length", str(len(data)))
        for key, value in headers.items():
            h.send_header(key, value)
        h.end_headers()
        h.wfile.write(data)

    return respond


def or_midstream(h: Any, arg: str, release: threading.Event) -> None:
    h._stream_head()
    h._send(_chunk({"role": "assistant", "content": ""}))
    for word in ("Hello ", "from ", "the "):
        h._send(_chunk({"content": word}))
    error = {"code": int(arg or 502), "message": MIDSTREAM_MESSAGE,
             "metadata": {"provider_name": "FakeUpstream", "raw": "upstream overloaded"}}
    h._send(b"data: " + json.dumps({"error": error}).encode() + b"\n\n")


def or_keepalive(h: Any, arg: str, release: threading.Event) -> None:
    h._stream_head()
    for _ in range(KEEPALIVE_COUNT):
        h._send(KEEPALIVE)
        if release.wait(KEEPALIVE_PACE_S):
            return
    if arg == "stall":
        release.wait(600)


def nousage(h: Any, arg: str, release: threading.Event) -> None:
    h._stream_head()
    h._send(_chunk({"role": "assistant", "content": ""}))
    for word in NORMAL_TEXT.split(" "):
        if word:
            h._send(_chunk({"content": word + " "}))
    h._send(_chunk({}, "stop"))  # the finish reason, and no usage anywhere
    h._send(b"data: [DONE]\n\n")


RESPONDERS = {
    "a_overloaded_stream": a_overloaded_stream,
    "a_http529": _anthropic_error(529, OVERLOADED, {"x-should-retry": "true"}),
    "a_http429": a_http429,
    "a_http401": _anthropic_error(401, AUTH_FAILED, {"x-should-retry": "false"}),
    "nginx502": _html(502, "Bad Gateway", NGINX_PAGE.format(code=502, text="Bad Gateway"),
                      {"server": "nginx"}),
    "nginx504": _html(504, "Gateway Time-out",
                      NGINX_PAGE.format(code=504, text="Gateway Time-out"), {"server": "nginx"}),
    "cf524": _html(524, "A timeout occurred", CLOUDFLARE_524,
                   {"server": "cloudflare", "cf-ray": "8f0fake524abcd-FRA"}),
    "or_midstream": or_midstream,
    "or_keepalive": or_keepalive,
    "nousage": nousage,
}


def install(provider: FakeProvider) -> FakeProvider:
    provider.responders.update(RESPONDERS)
    return provider
