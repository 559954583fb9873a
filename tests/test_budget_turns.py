"""Which messages open a turn (and so reset budgets), and what cancels a pending retry."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from opencode_autoretry.decisions.budget import (
    PendingEvent,
    PendingRetry,
    is_real_user_message,
    opens_turn,
    should_cancel_pending,
)
from opencode_autoretry.models import BudgetGroup, Message, Part, PartType, Role

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def part(kind: PartType = PartType.TEXT, **data: Any) -> Part:
    return Part("prt_1", "msg_u2", "ses_a", kind, T0, {"type": kind.value, **data})


def message(*parts: Part, role: Role = Role.USER, msg_id: str = "msg_u2") -> Message:
    return Message(msg_id, "ses_a", role, T0, parts=parts)


MARKER = {"autoretry": {"decision": "7", "kind": "blank", "injection": "3"}}


@pytest.mark.parametrize(
    ("msg", "real", "why"),
    [
        (message(part(text="fix the tests")), True, "a person typed it"),
        (message(part(text="Continue.", metadata=MARKER)), False, "our durable marker"),
        (message(part(text="continue")), True, "same words as ours, but no marker"),
        (message(part(text="x"), role=Role.ASSISTANT), False, "assistant"),
        (message(part(PartType.COMPACTION)), False, "OpenCode's compaction message"),
        (
            message(part(text="Continue if you have next steps", synthetic=True)),
            False,
            "OpenCode's compaction-continue (synthetic)",
        ),
        (
            message(part(text="go on", metadata={"compaction_continue": True})),
            False,
            "compaction_continue metadata",
        ),
        (message(part(text="/autoretry off")), False, "typed command"),
        (message(part(text="/autoretry")), False, "typed command, no argument"),
        (message(part(text="  /AutoRetry-off ")), False, "TUI command variant"),
        (message(part(text="/autoretryx")), True, "another word"),
        (message(part(text="please /autoretry off")), True, "command not at the start"),
        (
            message(part(text="ignored", synthetic=True), part(text="real words")),
            True,
            "only some parts synthetic",
        ),
        (
            message(part(PartType.FILE, url="file:///x.png"), part(text="look")),
            True,
            "attachment + text",
        ),
    ],
)
def test_real_user_messages(msg, real, why):
    assert is_real_user_message(msg) is real, why


def test_store_known_injection_is_not_real_even_without_marker():
    msg = message(part(text="Continue."))
    assert not is_real_user_message(msg, known_injected_ids={"msg_u2"})
    assert is_real_user_message(msg, known_injected_ids={"msg_other"})


def test_known_command_message_is_not_real():
    msg = message(part(text="expanded command template"))
    assert not is_real_user_message(msg, known_command_ids={"msg_u2"})


@pytest.mark.parametrize(
    ("msg", "current", "opens"),
    [
        (message(part(text="hi")), "msg_u1", True),
        (message(part(text="hi")), None, True),
        (message(part(text="hi")), "msg_u2", False),  # a replayed event for the open turn
        (message(part(text="Continue.", metadata=MARKER)), "msg_u1", False),
        (message(part(PartType.COMPACTION)), "msg_u1", False),
    ],
)
def test_opens_turn(msg, current, opens):
    assert opens_turn(msg, current) is opens


PENDING = PendingRetry("ses_a", "msg_u1", "msg_a1", BudgetGroup.DISCONNECT, T0)


@pytest.mark.parametrize(
    ("event", "reason"),
    [
        (PendingEvent.REAL_USER_MESSAGE, "cancelled: the user wrote a new message"),
        (PendingEvent.AUTORETRY_OFF, "cancelled: autoretry was switched off"),
        (PendingEvent.SESSION_BUSY, "cancelled: the session resumed on its own"),
        (PendingEvent.SESSION_RETRYING, "cancelled: OpenCode is retrying by itself"),
        (PendingEvent.SESSION_DELETED, "cancelled: the session was deleted"),
        (PendingEvent.SESSION_IDLE, None),  # D19
        (PendingEvent.SESSION_ERROR, None),  # the duplicate error of the same failure
        (PendingEvent.INJECTED_MESSAGE, None),
    ],
)
def test_what_cancels_a_pending_retry(event, reason):
    assert should_cancel_pending(PENDING, event) == reason
    assert should_cancel_pending(None, event) is None
