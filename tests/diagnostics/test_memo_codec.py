"""The memo's flat form rebuilds the very classifications it was given (diagnostics/memo_codec)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta, timezone

from seeded_reports import NOW, Seeded

from opencode_autoretry.diagnostics.index.indexed_db import lean_step
from opencode_autoretry.diagnostics.index.memo_codec import decode, encode
from opencode_autoretry.diagnostics.steps import ClassifiedStep, classify_rows
from opencode_autoretry.models import ErrorInfo
from opencode_autoretry.opencode.db import OpenCodeDB


def _classified(seeded: Seeded) -> list[ClassifiedStep]:
    db = OpenCodeDB.open(seeded.db)
    try:
        rows = db.step_candidates(None) + db.tool_markup_candidates(None)
        return classify_rows(db, rows, now=NOW, lean=True)
    finally:
        db.close()


def _fields(item: ClassifiedStep) -> tuple[object, ...]:
    """Every field, errors' headers included (``ErrorInfo`` leaves them out of ``==``)."""
    errors = (item.step.error, item.turn.user.error, item.verdict.error)
    return (item, [(e, e.response_headers) if e else None for e in errors])


def test_lean_steps_round_trip_flat(seeded: Seeded) -> None:
    items = [lean_step(i) for i in _classified(seeded)]
    assert items and any(i.step.error for i in items)
    blob = encode(items)
    assert blob[:1] == b"M"  # the flat form, not a pickle
    back = decode(blob)
    assert [_fields(i) for i in back] == [_fields(i) for i in items]
    assert [type(i.verdict.kind) for i in back] == [type(i.verdict.kind) for i in items]
    assert [i.step.time_created.tzinfo for i in back] == [i.step.time_created.tzinfo for i in items]


def test_other_shapes_are_pickled_and_still_read(seeded: Seeded) -> None:
    item = _classified(seeded)[0]
    with_parts = lean_step(item, keep_parts=True)
    for value in (
        [with_parts] if with_parts.step.parts else [item],  # a turn of several steps or parts
        (lean_step(item), "outcome"),  # trace's (trigger, outcome)
        [
            replace(
                lean_step(item),
                step=replace(
                    lean_step(item).step,
                    time_created=item.step.time_created.astimezone(timezone(timedelta(hours=2))),
                ),
            )
        ],
        [
            replace(
                lean_step(item),
                step=replace(
                    lean_step(item).step, error=ErrorInfo("X", response_headers={"a": b"\x00"})
                ),
            )
        ],  # type: ignore[dict-item]
    ):
        blob = encode(value)
        assert decode(blob) == value
