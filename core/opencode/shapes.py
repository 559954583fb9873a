"""Pure parsing of OpenCode 1.18 rows and JSON into the shared models.

Nothing here touches a database: ``db.py`` fetches rows and hands their columns and parsed
``data`` JSON to these functions. Every parser is defensive because OpenCode's JSON has
changed shape across versions (and the prior art met several error shapes in the wild).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from opencode_autoretry.models import (
    EPOCH,
    ErrorInfo,
    Message,
    Part,
    PartType,
    Role,
    Session,
    Tokens,
    Turn,
)


def load_json(raw: str | bytes | None) -> dict[str, Any]:
    """A row's ``data`` column as a dict; malformed or non-object JSON reads as ``{}``."""
    if raw is None:
        return {}
    try:
        value = json.loads(raw)
    except (TypeError, ValueError, RecursionError):  # RecursionError: absurdly deep nesting
        return {}
    return value if isinstance(value, dict) else {}


def _int(value: object) -> int:
    """A count or epoch-ms from JSON; anything unreadable (also NaN, infinity) reads as 0."""
    if type(value) is int:  # nearly always: checked first (a report parses ~10 a message)
        return value
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            return 0
    if isinstance(value, float):
        return int(value) if math.isfinite(value) else 0
    return 0


#: The last millisecond ``datetime`` can hold (9999-12-31): later times are clamped to it.
_MAX_MS = 253_402_300_799_999


def _at(epoch_ms: object) -> datetime:
    """Clamped to 1970..9999: a corrupt row must not stop the reader (found by fuzzing)."""
    if type(epoch_ms) is int and 0 <= epoch_ms <= _MAX_MS:  # nearly always (~150 000 a
        return EPOCH + timedelta(0, 0, 0, epoch_ms)  # first report): no clamp, 1.9 -> 1.3 us
    ms = min(max(_int(epoch_ms), 0), _MAX_MS)
    return EPOCH + timedelta(0, 0, 0, ms)  # milliseconds, positional: ~25 % quicker


Built = TypeVar("Built")


def _assembled(cls: type[Built], fields: dict[str, Any]) -> Built:
    """A frozen dataclass from *every* one of its fields, already normalised, without its
    generated ``__init__``: a frozen one sets each field through ``object.__setattr__``
    (~4.5 us for a Message here; a first ``diagnose`` parses ~60 000 messages and ~35 000
    parts). ``tests/test_shapes_assembled.py`` keeps each use equal to the constructor."""
    built = object.__new__(cls)
    built.__dict__.update(fields)
    return built


def _mapping(value: object) -> Mapping[str, Any]:
    if type(value) is dict:  # what json.loads gives: no ABC check (~0.5 us each)
        return value
    return value if isinstance(value, Mapping) else {}


def _str_or_none(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def parse_tokens(raw: object) -> Tokens:
    data = _mapping(raw)
    cache = _mapping(data.get("cache"))
    return _assembled(Tokens, {
        "input": _int(data.get("input")),
        "output": _int(data.get("output")),
        "reasoning": _int(data.get("reasoning")),
        "cache_read": _int(cache.get("read")),
        "cache_write": _int(cache.get("write")),
        "total": _int(data.get("total")),
    })


def _cost(raw: object) -> float:
    """OpenCode's per-message cost in USD; anything but a finite non-negative number is 0."""
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        return 0.0
    return float(raw) if 0 <= raw < float("inf") else 0.0


def _error_name(error: Mapping[str, Any]) -> str | None:
    name = _str_or_none(error.get("name"))
    if name:
        return name
    inner = error.get("error")
    if isinstance(inner, Mapping):
        return _str_or_none(inner.get("name")) or _str_or_none(inner.get("type"))
    return None


def _error_message(error: Mapping[str, Any]) -> str:
    """First of ``data.message``, ``data`` (string), ``message``, ``error.message``, ``error``."""
    data = error.get("data")
    inner = error.get("error")
    candidates = (
        _mapping(data).get("message"),
        data if isinstance(data, str) else None,
        error.get("message"),
        _mapping(inner).get("message"),
        inner if isinstance(inner, str) else None,
    )
    return next((c for c in candidates if isinstance(c, str) and c), "")


def _status_code(data: Mapping[str, Any]) -> int | None:
    value = data.get("statusCode")
    if value is None or isinstance(value, bool):
        return None
    code = _int(value)
    return code or None


def parse_error(raw: object) -> ErrorInfo | None:
    """Normalise an assistant ``error`` (``{name, data}`` and the older shapes) or ``None``."""
    if raw is None or raw == {} or raw == "":
        return None
    if isinstance(raw, str):
        return ErrorInfo(name="UnknownError", message=raw)
    if not isinstance(raw, Mapping):
        return ErrorInfo(name="UnknownError", message=str(raw))
    data = _mapping(raw.get("data"))
    retryable = data.get("isRetryable")
    headers = _mapping(data.get("responseHeaders"))
    body = data.get("responseBody")
    return _assembled(ErrorInfo, {  # ~17 000 errored steps on a heavy first diagnose
        "name": _error_name(raw) or "UnknownError",
        "message": _error_message(raw),
        "status_code": _status_code(data),
        "is_retryable": retryable if isinstance(retryable, bool) else None,
        "code": _str_or_none(_mapping(data.get("metadata")).get("code")),
        "response_headers": {str(k): str(v) for k, v in headers.items()},
        "response_body": body if isinstance(body, str) else None,
    })


def parse_part(
    part_id: str, message_id: str, session_id: str, time_created: int, data: Mapping[str, Any]
) -> Part:
    return _assembled(Part, {
        "id": part_id,
        "message_id": message_id,
        "session_id": session_id,
        "type": PartType.parse(data.get("type")),
        "time_created": _at(time_created),
        "data": data,
    })


def _model_ids(data: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """Assistants carry ``providerID``/``modelID``; user messages a ``model`` object."""
    model = _mapping(data.get("model"))
    provider = _str_or_none(data.get("providerID")) or _str_or_none(model.get("providerID"))
    model_id = _str_or_none(data.get("modelID")) or _str_or_none(model.get("modelID"))
    return provider, model_id


def parse_message(
    message_id: str,
    session_id: str,
    time_created: int,
    data: Mapping[str, Any],
    parts: Iterable[Part] = (),
) -> Message:
    role = Role.ASSISTANT if data.get("role") == "assistant" else Role.USER
    times = _mapping(data.get("time"))
    provider, model_id = _model_ids(data)
    return _assembled(Message, {
        "id": message_id,
        "session_id": session_id,
        "role": role,
        "time_created": _at(time_created),
        "time_completed": _at(_int(times["completed"])) if times.get("completed") else None,
        "parent_id": _str_or_none(data.get("parentID")),
        "finish": _str_or_none(data.get("finish")),
        "tokens": parse_tokens(data.get("tokens")),
        "error": parse_error(data.get("error")),
        "agent": _str_or_none(data.get("agent")),
        "mode": _str_or_none(data.get("mode")),
        "provider_id": provider,
        "model_id": model_id,
        "variant": _str_or_none(data.get("variant")),
        "summary": data.get("summary") is True,
        "parts": tuple(parts),
        "cost": _cost(data.get("cost")),
    })


def stand_in_opener(step: Message) -> Message:
    """The user message that opened ``step``'s turn, as its steps show it: its id (the
    steps' ``parentID``), session and the step's time; no content (a report classifies a
    turn from its steps; ~40 000 of these on a heavy first ``diagnose``)."""
    return _assembled(Message, {
        "id": step.parent_id or "", "session_id": step.session_id, "role": Role.USER,
        "time_created": step.time_created.astimezone(UTC), "time_completed": None,
        "parent_id": None, "finish": None, "tokens": _NO_TOKENS, "error": None, "agent": None,
        "mode": None, "provider_id": None, "model_id": None, "variant": None, "summary": False,
        "parts": (), "cost": 0.0,
    })


_NO_TOKENS = Tokens()


SESSION_COLUMNS = (
    "id",
    "parent_id",
    "slug",
    "title",
    "directory",
    "project_id",
    "version",
    "time_created",
    "time_updated",
)


def parse_session(row: Mapping[str, Any] | Sequence[Any]) -> Session:
    """A ``session`` row, as a mapping or a tuple in ``SESSION_COLUMNS`` order."""
    values = row if isinstance(row, Mapping) else dict(zip(SESSION_COLUMNS, row, strict=True))
    return Session(
        id=str(values["id"]),
        parent_id=_str_or_none(values.get("parent_id")),
        slug=str(values.get("slug") or ""),
        title=str(values.get("title") or ""),
        directory=str(values.get("directory") or ""),
        project_id=str(values.get("project_id") or ""),
        version=str(values.get("version") or ""),
        time_created=_at(_int(values.get("time_created"))),
        time_updated=_at(_int(values.get("time_updated"))),
    )


def is_real_user(message: Message) -> bool:
    """A message a person typed: not injected by autoretry, not written by OpenCode itself."""
    return message.role is Role.USER and message.marker is None and not message.synthetic


def group_turns(session_id: str, messages: Iterable[Message]) -> list[Turn]:
    """Split a session's messages (in creation order) into turns.

    A turn opens at a real user message. Injected and synthetic user messages are followups of
    the current turn. An assistant step joins the turn its ``parentID`` points at (directly or
    through a followup); one with an unknown parent joins the current turn. Messages before
    the first user message have no turn and are dropped.
    """
    opened: list[tuple[Message, list[Message], list[Message]]] = []
    turn_of: dict[str, int] = {}
    for message in messages:
        if message.role is Role.USER:
            if is_real_user(message) or not opened:
                opened.append((message, [], []))
            else:
                opened[-1][2].append(message)
            turn_of[message.id] = len(opened) - 1
            continue
        if not opened:
            continue
        index = turn_of.get(message.parent_id or "", len(opened) - 1)
        opened[index][1].append(message)
    return [
        Turn(session_id=session_id, user=user, steps=tuple(steps), followups=tuple(followups))
        for user, steps, followups in opened
    ]


def turn_until(turn: Turn, message_id: str) -> Turn:
    """The turn as it looked when step ``message_id`` was its last step (for diagnose/trace)."""
    steps: list[Message] = []
    for step in turn.steps:
        steps.append(step)
        if step.id == message_id:
            break
    last = steps[-1].time_created if steps else turn.user.time_created
    followups = tuple(f for f in turn.followups if f.time_created <= last)
    return Turn(turn.session_id, turn.user, tuple(steps), followups)
