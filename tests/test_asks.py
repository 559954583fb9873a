"""What a permission or question ask is about, in one safe line (pure, issue 23)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from opencode_autoretry.notifications.asks import (
    MAX_CHARS,
    ask_from_event,
    describe_permission,
    describe_question,
)

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(("props", "words"), [
    ({"permission": "bash", "patterns": ["git push *"]}, "bash: git push *"),
    ({"permission": "external_directory", "patterns": ["/etc/*", "/var/*"]},
     "external_directory: /etc/*, /var/*"),
    ({"permission": "edit"}, "edit"),
    ({"type": "webfetch", "pattern": "https://x.test/*"}, "webfetch: https://x.test/*"),
    ({}, "a permission"),
    ({"permission": "bash", "patterns": ["rm -rf /\x1b[2J", 7, None]}, "bash: rm -rf /\\x1b[2J"),
])
def test_permissions(props: dict, words: str) -> None:
    assert describe_permission(props) == words


@pytest.mark.parametrize(("props", "words"), [
    ({"questions": [{"question": "SQLite or Postgres?\nPick one.", "header": "Store"}]},
     "SQLite or Postgres?"),
    ({"questions": [{"question": "", "header": "Store"}]}, "Store"),
    ({"questions": [{"question": "\n\n  Deploy   now?  "}]}, "Deploy now?"),
    ({"questions": []}, "a question"),
    ({"questions": "garbage"}, "a question"),
    ({"questions": [{"question": "x" * 500}]}, "x" * (MAX_CHARS - 1) + "…"),
    ({"questions": [{"question": "ok\u202egnp.exe"}]}, "ok\\u202egnp.exe"),
])
def test_questions(props: dict, words: str) -> None:
    assert describe_question(props) == words


def test_an_ask_from_its_event() -> None:
    ask = ask_from_event("permission.asked", {"id": "per_1", "permission": "bash",
                                              "patterns": ["ls"]}, "ses_a", NOW)
    assert ask is not None and (ask.ask_id, ask.kind, ask.what) == ("per_1", "permission",
                                                                     "bash: ls")
    assert not ask.due(timedelta(seconds=120), NOW + timedelta(seconds=119))
    assert ask.due(timedelta(seconds=120), NOW + timedelta(seconds=120))
    assert ask_from_event("question.asked", {"questions": []}, "ses_a", NOW) is None  # no id
    assert ask_from_event("todo.updated", {"id": "x"}, "ses_a", NOW) is None
