"""Pure parsing of OpenCode rows (reference §2.3-2.6 shapes) and turn grouping."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from opencode_autoretry.models import ErrorInfo, PartType, Role, Tokens
from opencode_autoretry.opencode.shapes import (
    group_turns,
    is_real_user,
    load_json,
    parse_error,
    parse_message,
    parse_part,
    parse_session,
    parse_tokens,
    turn_until,
)

T0 = 1796040581773


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (None, None),
        ({}, None),
        ("", None),
        (
            {
                "name": "APIError",
                "data": {
                    "message": "Connection reset by server",
                    "isRetryable": True,
                    "metadata": {"code": "ECONNRESET", "syscall": ""},
                },
            },
            ErrorInfo("APIError", "Connection reset by server", None, True, "ECONNRESET"),
        ),
        (
            {
                "name": "APIError",
                "data": {
                    "message": "Rate limit exceeded (fake)",
                    "statusCode": 429,
                    "isRetryable": True,
                    "responseHeaders": {"retry-after": "2"},
                    "responseBody": '{"error":"x"}',
                },
            },
            ErrorInfo(
                "APIError",
                "Rate limit exceeded (fake)",
                429,
                True,
                None,
                {"retry-after": "2"},
                '{"error":"x"}',
            ),
        ),
        (
            {"name": "MessageAbortedError", "data": {"message": "Aborted"}},
            ErrorInfo("MessageAbortedError", "Aborted"),
        ),
        (
            {"name": "UnknownError", "data": "plain string data"},
            ErrorInfo("UnknownError", "plain string data"),
        ),
        ({"name": "Oops", "message": "top-level message"}, ErrorInfo("Oops", "top-level message")),
        (
            {"error": {"name": "Nested", "message": "inner message"}},
            ErrorInfo("Nested", "inner message"),
        ),
        ({"error": "just a string"}, ErrorInfo("UnknownError", "just a string")),
        ("Server disconnected", ErrorInfo("UnknownError", "Server disconnected")),
        (
            {"name": "APIError", "data": {"statusCode": "503", "isRetryable": "yes"}},
            ErrorInfo("APIError", "", 503, None),
        ),
    ],
)
def test_parse_error_normalises_every_shape(raw: object, expected: ErrorInfo | None) -> None:
    assert parse_error(raw) == expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (
            {
                "total": 110,
                "input": 100,
                "output": 10,
                "reasoning": 0,
                "cache": {"write": 0, "read": 0},
            },
            Tokens(100, 10, 0, 0, 0, 110),
        ),
        (
            {"total": 106, "input": 100, "output": 2, "reasoning": 4, "cache": {"read": 7}},
            Tokens(100, 2, 4, 7, 0, 106),
        ),
        (None, Tokens()),
        ({"output": "12", "input": None}, Tokens(output=12)),
    ],
)
def test_parse_tokens(raw: object, expected: Tokens) -> None:
    assert parse_tokens(raw) == expected


@pytest.mark.parametrize("raw", ["{not json", "[1,2]", None, "null"])
def test_load_json_reads_bad_rows_as_empty(raw: str | None) -> None:
    assert load_json(raw) == {}


def _user(mid: str, ms: int, *parts: dict) -> object:
    data = {
        "role": "user",
        "time": {"created": ms},
        "agent": "build",
        "model": {"providerID": "fake", "modelID": "fake-model"},
        "summary": {"diffs": []},
    }
    built = [parse_part(f"prt_{mid}{i}", mid, "ses_1", ms, p) for i, p in enumerate(parts)]
    return parse_message(
        mid,
        "ses_1",
        ms,
        data,
        built or [parse_part(f"prt_{mid}", mid, "ses_1", ms, {"type": "text", "text": "hi"})],
    )


def _step(mid: str, parent: str, ms: int, finish: str | None = "stop") -> object:
    data = {
        "parentID": parent,
        "role": "assistant",
        "mode": "build",
        "agent": "build",
        "tokens": {"total": 110, "input": 100, "output": 10},
        "modelID": "fake-model",
        "providerID": "fake",
        "time": {"created": ms, "completed": ms + 5},
    }
    if finish:
        data["finish"] = finish
    return parse_message(mid, "ses_1", ms, data)


def test_parse_message_assistant_fields() -> None:
    step = _step("msg_b", "msg_a", T0)
    assert step.role is Role.ASSISTANT
    assert step.parent_id == "msg_a"
    assert step.finish == "stop"
    assert step.provider_id == "fake" and step.model_id == "fake-model"
    assert step.time_created == datetime.fromtimestamp(T0 / 1000, tz=UTC)
    assert step.time_completed is not None and step.summary is False


def test_parse_message_user_summary_dict_is_not_a_compaction_summary() -> None:
    user = _user("msg_a", T0)
    assert user.role is Role.USER and user.summary is False
    assert user.provider_id == "fake" and user.model_id == "fake-model"


def test_parse_part_types() -> None:
    part = parse_part("prt_1", "msg_1", "ses_1", T0, {"type": "step-finish", "reason": "stop"})
    assert part.type is PartType.STEP_FINISH
    assert parse_part("prt_2", "msg_1", "ses_1", T0, {"type": "new-kind"}).type is PartType.OTHER


def test_parse_session_row() -> None:
    row = (
        "ses_dd3a065beffe4Dn6SpVU7nqbZD",
        "ses_dd3a066b8ffe2CyIV3p6Pw1Bsq",
        "lucky-sailor",
        "Fake subtask",
        "/p",
        "0ac5",
        "1.18.33",
        1796040792641,
        1796040793450,
    )
    session = parse_session(row)
    assert session.is_child and session.slug == "lucky-sailor" and session.version == "1.18.33"


MARKED = {
    "type": "text",
    "text": "Continue.",
    "metadata": {"autoretry": {"decision": "1", "kind": "blank", "injection": "1"}},
}
SYNTHETIC = {
    "type": "text",
    "text": "Continue if you have next steps",
    "synthetic": True,
    "metadata": {"compaction_continue": True},
}


def test_group_turns_keeps_injected_and_synthetic_users_as_followups() -> None:
    messages = [
        _user("msg_01", T0),
        _step("msg_02", "msg_01", T0 + 1),
        _user("msg_03", T0 + 2, MARKED),
        _step("msg_04", "msg_03", T0 + 3),
        _user("msg_05", T0 + 4, {"type": "compaction", "auto": True}),
        _user("msg_06", T0 + 5, SYNTHETIC),
        _step("msg_07", "msg_06", T0 + 6),
        _user("msg_08", T0 + 7),
        _step("msg_09", "msg_08", T0 + 8),
        _step("msg_10", "msg_unknown", T0 + 9),
    ]
    turns = group_turns("ses_1", messages)
    assert [t.id for t in turns] == ["msg_01", "msg_08"]
    assert [s.id for s in turns[0].steps] == ["msg_02", "msg_04", "msg_07"]
    assert [f.id for f in turns[0].followups] == ["msg_03", "msg_05", "msg_06"]
    assert [s.id for s in turns[1].steps] == ["msg_09", "msg_10"]  # unknown parent: current turn
    assert not is_real_user(messages[2]) and is_real_user(messages[0])


def test_group_turns_drops_steps_before_any_user_and_opens_on_a_lone_injection() -> None:
    turns = group_turns("ses_1", [_step("msg_00", "msg_x", T0), _user("msg_01", T0 + 1, MARKED)])
    assert [t.id for t in turns] == ["msg_01"] and turns[0].steps == ()


def test_turn_until_cuts_steps_and_followups() -> None:
    messages = [
        _user("msg_01", T0),
        _step("msg_02", "msg_01", T0 + 1),
        _user("msg_03", T0 + 2, MARKED),
        _step("msg_04", "msg_03", T0 + 3),
    ]
    turn = group_turns("ses_1", messages)[0]
    cut = turn_until(turn, "msg_02")
    assert [s.id for s in cut.steps] == ["msg_02"] and cut.followups == ()
    assert turn_until(turn, "msg_04") == turn
