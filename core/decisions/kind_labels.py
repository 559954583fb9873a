"""PURE: each kind of failure in the words of the toasts, the reports and the interruption
text ('blank reply', 'connection lost' ...).

Apart from the policy (which fills its texts with them) so that what only reads decisions (the
store's records, observe mode's wording, the reports) does not build the policy's classes.
"""

from __future__ import annotations

from collections.abc import Mapping

from opencode_autoretry.models import Kind

#: What "{reason}" in the interruption text says for each kind.
INTERRUPTION_LABELS: Mapping[Kind, str] = {
    Kind.DISCONNECT: "connection lost",
    Kind.STREAM_TRUNCATED: "response stream cut off",
    Kind.TIMEOUT: "request timed out",
    Kind.RATE_LIMIT: "rate limited",
    Kind.SERVER_ERROR: "provider server error",
    Kind.SILENT: "stopped without output or error",
    Kind.RUNAWAY: "empty steps in a loop",
}

_LABELS: Mapping[Kind, str] = {
    **INTERRUPTION_LABELS,
    Kind.BLANK: "blank reply",
    Kind.THINK_ONLY: "reasoning-only reply",
    Kind.FORGED_LENGTH: "empty 'length' reply",
    Kind.TOOL_AS_TEXT: "tool call written as text",
    Kind.TRUNCATED: "output cut off",
    Kind.REPETITION: "repeating itself",
    Kind.STALL: "stalled",
    Kind.UNFINISHED_TODOS: "unfinished todos",
    Kind.GOAL: "goal check failing",
}


def kind_label(kind: Kind | str | None) -> str:
    """A kind in the words of the toasts ('blank reply', 'connection lost' ...)."""
    if kind is None:
        return "unknown"
    try:
        known = Kind(str(kind))
    except ValueError:
        return str(kind)
    return _LABELS.get(known, str(known))
