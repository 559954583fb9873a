"""How the report index stores a remembered classification: flat values, not object graphs.

A later ``diagnose 0`` at 1 M messages reads back ~10 000 remembered groups; unpickling their
dataclass graphs (a step, its turn and opener, a verdict, tokens, an error, datetimes, enum
members rebuilt by calling the enum) was half of the run (~65 µs a group). Here a group is a
tuple of plain values (str, int, None, dict) written with ``marshal`` and rebuilt with the
dataclasses' own constructors, sharing what repeats (tokens, errors, datetimes, enum members):
the same objects, field for field, several times faster.

Only the shapes the memo keeps are flat: a step with no parts (diagnose's lean steps), a turn
of that one step and no follow-ups. Anything else (trace's triggers keep their parts) is
pickled as before; the first byte says which (``M``: marshal, anything else: pickle, so
entries written by an older version still read).
"""

from __future__ import annotations

import marshal
import pickle
from collections.abc import Mapping, Sequence
from dataclasses import fields
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from opencode_autoretry.diagnostics.steps import ClassifiedStep
from opencode_autoretry.models import ErrorInfo, Kind, Message, Role, Tokens, Turn, Verdict

_FLAT = b"M"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_US = timedelta(microseconds=1)
_SAME_ERROR = "="  # the verdict's error is the step's (the usual case)
_ROLES = {r.value: r for r in Role}
_KINDS = {k.value: k for k in Kind}


class _NotFlat(Exception):
    """A value the flat form does not cover: pickle the group instead."""


def encode(value: Any) -> bytes:
    """``value``: a list of lean ``ClassifiedStep`` (flat), or anything (pickled)."""
    if isinstance(value, list) and all(type(i) is ClassifiedStep for i in value):
        try:
            return _FLAT + marshal.dumps(tuple(_item(i) for i in value))
        except (_NotFlat, ValueError):
            pass
    return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)


def decode(blob: bytes) -> Any:
    if blob[:1] == _FLAT:
        return _Decoder().items(marshal.loads(blob[1:]))
    return pickle.loads(blob)


# -- encoding ---------------------------------------------------------------------------------


def _time(value: datetime | None) -> int | None:
    if value is None:
        return None
    if value.tzinfo is not UTC:
        raise _NotFlat("a datetime not in UTC")
    return (value - _EPOCH) // _US


def _error(value: ErrorInfo | None) -> tuple[Any, ...] | None:
    if value is None:
        return None
    if type(value) is not ErrorInfo or type(value.response_headers) is not dict:
        raise _NotFlat("an unusual error")
    return (
        value.name,
        value.message,
        value.status_code,
        value.is_retryable,
        value.code,
        value.response_headers,
        value.response_body,
    )


def _message(m: Message) -> tuple[Any, ...]:
    if type(m) is not Message or m.parts or type(m.tokens) is not Tokens:
        raise _NotFlat("a message with parts")
    t = m.tokens
    return (
        m.id,
        m.session_id,
        m.role.value,
        _time(m.time_created),
        _time(m.time_completed),
        m.parent_id,
        m.finish,
        (t.input, t.output, t.reasoning, t.cache_read, t.cache_write, t.total),
        _error(m.error),
        m.agent,
        m.mode,
        m.provider_id,
        m.model_id,
        m.variant,
        m.summary,
    )


def _item(item: ClassifiedStep) -> tuple[Any, ...]:
    step, turn, v = item.step, item.turn, item.verdict
    if type(turn) is not Turn or turn.followups or turn.steps != (step,):
        raise _NotFlat("a turn of more than its step")
    if type(v) is not Verdict or type(v.kind) is not Kind:
        raise _NotFlat("an unusual verdict")
    error = _SAME_ERROR if v.error is step.error else _error(v.error)
    verdict = (v.kind.value, v.retryable, v.reason, v.message_id, v.retry_after_ms, error)
    return (_message(step), _message(turn.user), verdict + (v.text, v.give_up))


# -- decoding ---------------------------------------------------------------------------------


class _Decoder:
    """Rebuilds one blob's items; equal values decode to one shared (immutable) object."""

    def __init__(self) -> None:
        self._times: dict[int, datetime] = {}
        self._tokens: dict[tuple[int, ...], Tokens] = {}
        self._errors: dict[tuple[Any, ...], ErrorInfo] = {}

    def items(self, flat: Sequence[tuple[Any, ...]]) -> list[ClassifiedStep]:
        return [self._item(*values) for values in flat]

    def _item(
        self, step_values: tuple[Any, ...], user_values: tuple[Any, ...], v: tuple[Any, ...]
    ) -> ClassifiedStep:
        step, user = self._message(step_values), self._message(user_values)
        error = step.error if v[5] == _SAME_ERROR else self._error(v[5])
        verdict = _build(Verdict, _VERDICT, (_KINDS[v[0]], *v[1:5], error, *v[6:]))
        turn = _build(Turn, _TURN, (step.session_id, user, (step,), ()))
        return _build(ClassifiedStep, _ITEM, (step, turn, verdict))

    def _time(self, us: int | None) -> datetime | None:
        if us is None:
            return None
        found = self._times.get(us)
        if found is None:
            found = self._times[us] = _EPOCH + timedelta(microseconds=us)
        return found

    def _error(self, values: tuple[Any, ...] | None) -> ErrorInfo | None:
        if values is None:
            return None
        key = (*values[:5], _frozen(values[5]), values[6])
        found = self._errors.get(key)
        if found is None:
            found = self._errors[key] = ErrorInfo(*values)
        return found

    def _message(self, v: tuple[Any, ...]) -> Message:
        tokens = self._tokens.get(v[7])
        if tokens is None:
            tokens = self._tokens[v[7]] = Tokens(*v[7])
        created = self._time(v[3])
        assert created is not None
        values = (v[0], v[1], _ROLES[v[2]], created, self._time(v[4]), v[5], v[6], tokens)
        return _build(Message, _MESSAGE, (*values, self._error(v[8]), *v[9:], ()))


def _names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in fields(cls))


_MESSAGE, _TURN, _VERDICT, _ITEM = (_names(c) for c in (Message, Turn, Verdict, ClassifiedStep))
_T = TypeVar("_T")


def _build(cls: type[_T], names: tuple[str, ...], values: tuple[Any, ...]) -> _T:
    """A frozen dataclass without its ``__init__`` (one ``setattr`` per field: most of the
    decoding time). Only for classes without ``__post_init__`` or slots (checked below)."""
    obj = object.__new__(cls)
    object.__setattr__(obj, "__dict__", dict(zip(names, values, strict=True)))
    return obj


for _cls in (Message, Turn, Verdict, ClassifiedStep):
    assert not hasattr(_cls, "__post_init__") and not hasattr(_cls, "__slots__"), _cls


def _frozen(headers: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted(headers.items()))
