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
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from opencode_autoretry.diagnostics.steps import ClassifiedStep
from opencode_autoretry.models import EPOCH, ErrorInfo, Kind, Message, Role, Tokens, Turn, Verdict

_FLAT = b"M"
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
            return _FLAT + marshal.dumps(_items(value))
        except (_NotFlat, ValueError, TypeError):  # TypeError: an unhashable opener
            pass
    import pickle  # here only: a warm diagnose reads flat entries alone (issue 21)

    return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)


def decode(blob: bytes) -> Any:
    if blob[:1] == _FLAT:
        return _Decoder().items(marshal.loads(blob[1:]))
    import pickle  # trace's triggers, with their parts; entries of older versions

    return pickle.loads(blob)


# -- encoding ---------------------------------------------------------------------------------


def _time(value: datetime | None) -> int | None:
    if value is None:
        return None
    if value.tzinfo is not UTC:
        raise _NotFlat("a datetime not in UTC")
    return (value - EPOCH) // _US


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


def _items(items: list[ClassifiedStep]) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """(the openers, each once; the items, each naming its opener by position): a group's
    steps share one opener, and so do their decoded turns."""
    openers: dict[tuple[Any, ...], int] = {}
    flat = []
    for item in items:
        step, opener, verdict = _item(item)
        flat.append((step, openers.setdefault(opener, len(openers)), verdict))
    return tuple(openers), tuple(flat)


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

    def items(self, flat: tuple[Sequence[tuple[Any, ...]], Sequence[Any]]) -> list[ClassifiedStep]:
        openers, items = flat
        users = [self._message(values) for values in openers]
        return [self._item(step, users[user], verdict) for step, user, verdict in items]

    def _item(
        self, step_values: tuple[Any, ...], user: Message, v: tuple[Any, ...]
    ) -> ClassifiedStep:
        step = self._message(step_values)
        error = step.error if v[5] == _SAME_ERROR else self._error(v[5])
        verdict = _new(Verdict)
        _fill(
            verdict,
            {
                "kind": _KINDS[v[0]],
                "retryable": v[1],
                "reason": v[2],
                "message_id": v[3],
                "retry_after_ms": v[4],
                "error": error,
                "text": v[6],
                "give_up": v[7],
            },
        )
        turn = _new(Turn)
        _fill(
            turn, {"session_id": step.session_id, "user": user, "steps": (step,), "followups": ()}
        )
        item = _new(ClassifiedStep)
        _fill(item, {"step": step, "turn": turn, "verdict": verdict})
        return item

    def _time(self, us: int | None) -> datetime | None:
        if us is None:
            return None
        found = self._times.get(us)
        if found is None:
            found = self._times[us] = EPOCH + timedelta(microseconds=us)
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
        message = _new(Message)
        _fill(
            message,
            {
                "id": v[0],
                "session_id": v[1],
                "role": _ROLES[v[2]],
                "time_created": self._time(v[3]),
                "time_completed": self._time(v[4]),
                "parent_id": v[5],
                "finish": v[6],
                "tokens": tokens,
                "error": self._error(v[8]),
                "agent": v[9],
                "mode": v[10],
                "provider_id": v[11],
                "model_id": v[12],
                "variant": v[13],
                "summary": v[14],
                "parts": (),
            },
        )
        return message


def _new(cls: type[_T]) -> _T:
    """A frozen dataclass without its ``__init__`` (one ``setattr`` per field: most of the
    decoding time); ``_fill`` gives it every field (the displays above name them all:
    tests/diagnostics/test_memo_codec.py compares every field). Only for classes without
    ``__post_init__`` or slots (checked below)."""
    return object.__new__(cls)


def _fill(obj: object, values: dict[str, Any]) -> None:
    object.__setattr__(obj, "__dict__", values)


_T = TypeVar("_T")
for _cls in (Message, Turn, Verdict, ClassifiedStep):
    assert not hasattr(_cls, "__post_init__") and not hasattr(_cls, "__slots__"), _cls
    assert "__slots__" not in vars(_cls) and "__dict__" in dir(_cls), _cls


def _frozen(headers: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted(headers.items()))
