"""PURE: an OpenCode assistant error -> its kind and a short human reason.

Hard stops (context overflow, usage limits, unknown agent) are checked before the HTTP status,
since a 429 can carry a usage limit; the status before the wording, except that a 4xx whose text
is a transport failure is a disconnect (gateways wrap upstream cuts in a 400).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from opencode_autoretry.models import ErrorInfo, Kind

ABORT_NAMES = frozenset({"MessageAbortedError", "AbortError"})
#: The named errors of a hard usage limit (the model's quota, not a passing failure).
_USAGE_LIMIT_NAMES = frozenset({"FreeUsageLimitError", "SubscriptionUsageLimitError"})
_OVERFLOW_NAMES = frozenset({"ContextOverflowError"})

_NAMED_KINDS: dict[str, tuple[Kind, str]] = {
    "ProviderAuthError": (Kind.TERMINAL, "the provider rejected the credentials"),
    "ContextOverflowError": (Kind.TERMINAL, "the context window overflowed"),
    "FreeUsageLimitError": (Kind.TERMINAL, "the free usage limit is reached"),
    "SubscriptionUsageLimitError": (Kind.TERMINAL, "the subscription usage limit is reached"),
    "StructuredOutputError": (Kind.TERMINAL, "the model did not produce the structured output"),
    "OutputLengthError": (Kind.TRUNCATED, "the reply hit the output length limit"),
}


@dataclass(frozen=True)
class _Rule:
    kind: Kind
    pattern: re.Pattern[str]
    reason: str


def _rule(kind: Kind, pattern: str, reason: str) -> _Rule:
    return _Rule(kind, re.compile(pattern, re.IGNORECASE), reason)


# Hard stops are checked before the HTTP status: a 429 can carry a usage limit.
_TERMINAL_RULES = (
    _rule(
        Kind.TERMINAL,
        r"context[ _]length[ _]exceeded|maximum context length|context (?:window|length) "
        r"(?:overflow|exceeded)|context overflow|prompt is too long",
        "the context window overflowed",
    ),
    _rule(
        Kind.TERMINAL,
        r"usage limit|insufficient_quota|exceeded your current quota|plan and billing",
        "a hard usage limit is reached",
    ),
    _rule(Kind.TERMINAL, r"agent not found", "the requested agent does not exist"),
)

_OVERFLOW_RULE, _USAGE_LIMIT_RULE = _TERMINAL_RULES[0], _TERMINAL_RULES[1]

_RATE_LIMIT_RULE = _rule(
    Kind.RATE_LIMIT,
    r"too[ _]many[ _]requests|rate[ _]limit|rate increased too quickly"
    r"|\"code\"\s*:\s*\"?429\b|\b429\b|\bquota\b",
    "rate limited by the provider",
)

# Checked against the error code first, then its text; the first match wins, so the specific
# signatures (stream cut, timeouts) come before the broad ones (server wording, bare statuses).
_TRANSIENT_RULES = (
    _rule(
        Kind.STREAM_TRUNCATED,
        r"json parse error|unterminated|zlib|decompression failed|unexpected end of json",
        "the response stream was cut off mid-message",
    ),
    _rule(
        Kind.TIMEOUT,
        r"providerresponsestreamerror|sse read timed out",
        "the provider's stream stalled",
    ),
    _rule(
        Kind.TIMEOUT,
        r"providerheadertimeouterror|etimedout|timed out|\btime ?out\b",
        "the provider did not answer in time",
    ),
    _rule(Kind.DISCONNECT, r"econnreset|connection reset", "connection reset by the provider"),
    _rule(
        Kind.DISCONNECT,
        r"econnrefused|connection refused",
        "the provider refused the connection",
    ),
    _rule(
        Kind.DISCONNECT,
        r"socket connection was closed|server disconnected|socket hang up|\bepipe\b"
        r"|\bterminated\b|connection (?:lost|closed)",
        "the provider closed the connection",
    ),
    _rule(
        Kind.DISCONNECT,
        r"connection failed|cannot connect to api|fetch failed|network error|connection error"
        r"|enotfound|eai_again",
        "could not reach the provider",
    ),
    _RATE_LIMIT_RULE,
    _rule(
        Kind.SERVER_ERROR,
        r"overloaded|unavailable|exhausted|server_error|internal server error|bad gateway"
        r"|temporarily at capacity|try again later|try your request again|provider returned error"
        r"|\b(?:500|502|503|504|520|521|522|523|524|529)\b",
        "the provider had a server error",
    ),
)

_DISCONNECT_RULES = tuple(rule for rule in _TRANSIENT_RULES if rule.kind is Kind.DISCONNECT)

_SNIPPET_CHARS = 80


def classify_error(error: ErrorInfo) -> tuple[Kind, str]:
    """The kind of an assistant error and a short human reason (also for ``session.error``)."""
    if error.name in ABORT_NAMES:
        return Kind.USER_ABORT, "aborted by the user"
    text = _error_text(error)
    named = _NAMED_KINDS.get(error.name)
    if named is not None:
        return named[0], _with_evidence(named[1], _snippet(error.message) or error.name)
    for rule in _TERMINAL_RULES:
        if rule.pattern.search(text):
            return rule.kind, _with_evidence(rule.reason, _snippet(error.message))
    by_status = _classify_status(error, text)
    if by_status is not None:
        return by_status
    return _classify_transient(error, text)


def usage_limited(error: ErrorInfo) -> bool:
    """The error is a hard usage limit (``classify_error`` calls it one): a named usage-limit
    error, or the text of one not taken first by another hard stop."""
    return _hard_stop_is(error, _USAGE_LIMIT_NAMES, _USAGE_LIMIT_RULE)


def context_overflowed(error: ErrorInfo) -> bool:
    """The error is a context overflow (``classify_error`` calls it one), named or in words."""
    return _hard_stop_is(error, _OVERFLOW_NAMES, _OVERFLOW_RULE)


def _hard_stop_is(error: ErrorInfo, names: frozenset[str], rule: _Rule) -> bool:
    """Which hard stop ``classify_error`` found, by the error's name or its first matching
    rule (typed, so callers never read the reason it renders)."""
    if error.name in names:
        return True
    if error.name in ABORT_NAMES or error.name in _NAMED_KINDS:
        return False
    text = _error_text(error)
    first = next((r for r in _TERMINAL_RULES if r.pattern.search(text)), None)
    return first is rule


def _classify_status(error: ErrorInfo, text: str) -> tuple[Kind, str] | None:
    status = error.status_code
    if status is None:
        return None
    evidence = f"HTTP {status}"
    if status == 429:
        return Kind.RATE_LIMIT, _with_evidence("rate limited by the provider", evidence)
    if status in (408, 425) or (500 <= status <= 599 and status not in (501, 505)):
        return Kind.SERVER_ERROR, _with_evidence("the provider had a server error", evidence)
    if status == 400:
        # OpenCode's own retry matches the body, so it retries such 400s like a 5xx.
        if re.search(r"server_error", text, re.IGNORECASE):
            return Kind.SERVER_ERROR, _with_evidence("the provider had a server error", evidence)
        if _RATE_LIMIT_RULE.pattern.search(text):
            return Kind.RATE_LIMIT, _with_evidence("rate limited by the provider", evidence)
    if 400 <= status <= 499:
        # A gateway that lost its upstream answers 4xx with the transport failure as text
        # ("Connection failed: Server disconnected without sending a response."): that is a
        # disconnect to continue after, not a rejected request.
        for rule in _DISCONNECT_RULES:
            if rule.pattern.search(text):
                return rule.kind, _with_evidence(rule.reason, evidence, _snippet(error.message))
    if 400 <= status <= 499 or status in (501, 505):
        detail = _snippet(error.message)
        return Kind.TERMINAL, _with_evidence("the provider rejected the request", evidence, detail)
    return None


def _classify_transient(error: ErrorInfo, text: str) -> tuple[Kind, str]:
    if error.code:
        for rule in _TRANSIENT_RULES:
            if rule.pattern.search(error.code):
                return rule.kind, _with_evidence(rule.reason, error.code)
    for rule in _TRANSIENT_RULES:
        if rule.pattern.search(text):
            return rule.kind, _with_evidence(rule.reason, _snippet(error.message) or error.name)
    evidence = _snippet(error.message) or error.name
    if error.is_retryable:
        return Kind.SERVER_ERROR, _with_evidence("unrecognised transient error", evidence)
    return Kind.TERMINAL, _with_evidence("unrecognised error", evidence)


def _error_text(error: ErrorInfo) -> str:
    return " ".join(p for p in (error.name, error.message, error.code, error.response_body) if p)


def _snippet(text: str | None) -> str:
    flat = " ".join((text or "").split())
    if len(flat) <= _SNIPPET_CHARS:
        return flat
    return flat[: _SNIPPET_CHARS - 1].rstrip() + "…"


def _with_evidence(reason: str, *evidence: str) -> str:
    shown = "; ".join(e for e in evidence if e)
    return f"{reason} ({shown})" if shown else reason
