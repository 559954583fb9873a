"""PURE: what a permission or ``question`` ask is about, in one safe line (issue 23).

The ``waiting`` notification names what the session waits for: the permission and its patterns
(``bash: git push *``), or the question's first line. The text comes from the model (a
question) or its tool call (a pattern): it is made one line, with every control character
shown as an escape (``terminal_text.visible``), and cut to ``MAX_CHARS``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from opencode_autoretry.terminal_text import visible

MAX_CHARS = 160
PERMISSION, QUESTION = "permission", "question"


@dataclass(frozen=True)
class Ask:
    """One permission or question a session waits on, as the daemon first saw it."""

    session_id: str
    ask_id: str
    kind: str  # PERMISSION | QUESTION
    what: str
    since: datetime

    def due(self, waiting_after: timedelta, now: datetime) -> bool:
        return now - self.since >= waiting_after


def ask_from_event(event_type: str, props: Mapping[str, Any], session_id: str,
                   now: datetime) -> Ask | None:
    """The ask a ``permission.asked`` / ``question.asked`` event announces, else None."""
    ask_id = props.get("id") or props.get("requestID")
    if not isinstance(ask_id, str) or not ask_id:
        return None
    if event_type == "permission.asked":
        return Ask(session_id, ask_id, PERMISSION, describe_permission(props), now)
    if event_type == "question.asked":
        return Ask(session_id, ask_id, QUESTION, describe_question(props), now)
    return None


def describe_permission(props: Mapping[str, Any]) -> str:
    """``bash: git push *`` — the permission (the tool's) and its patterns."""
    name = _text(props.get("permission")) or _text(props.get("type")) or "a permission"
    patterns = props.get("patterns") or props.get("pattern")
    if isinstance(patterns, str):
        patterns = [patterns]
    shown = [p for p in (_text(x) for x in patterns) if p] if isinstance(patterns, list) else []
    return one_line(f"{name}: {', '.join(shown)}" if shown else name)


def describe_question(props: Mapping[str, Any]) -> str:
    """The first line of the first question (its header when it has no text)."""
    questions = props.get("questions")
    first = questions[0] if isinstance(questions, list) and questions else props
    if isinstance(first, Mapping):
        text = _text(first.get("question")) or _text(first.get("header"))
    else:
        text = _text(first)
    lines = [line for line in text.splitlines() if line.strip()]
    return one_line(lines[0]) if lines else "a question"


def one_line(text: str) -> str:
    flat = visible(" ".join(text.split()))
    return flat if len(flat) <= MAX_CHARS else flat[: MAX_CHARS - 1].rstrip() + "…"


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def ask_words(ask: Ask) -> str:
    """'waits on a permission (bash: git push *)' — the notification's detail."""
    return f"waits on a {ask.kind} ({ask.what})"


def waited(ask: Ask, now: datetime) -> str:
    seconds = max(0.0, (now - ask.since).total_seconds())
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"
