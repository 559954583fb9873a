"""``trace`` on the report index: each continuation found only in OpenCode's DB (a marked
message the store has nothing on) kept as the JSON text ``trace_json`` writes for it and as the
pieces of the lines ``render_trace`` writes (all but the local time and the colours).

A later ``trace 0 --json`` at 1 M messages loaded every one of ~3 000 marked messages with its
parts, rebuilt its remembered trigger and wrote them all out again with the indenting JSON
encoder (pure Python): ~1 s. The index remembers, per marked message, its time and its
rendered JSON (``GroupMemo.keep_rendered``: valid while its session's counter is unchanged and
once its trigger settled, like the links it is made of); a report reuses it when the daemon's
store cannot change it: no decision in its session (it would relabel the trigger), not the
message of an injection, its marker naming no injection of the store. Everything else is built
as before. ``splice`` puts the texts in the report at the place and indentation
``json.dumps(..., indent=2)`` gives them, so the output is byte for byte the same.
"""

from __future__ import annotations

import json
import marshal
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from opencode_autoretry.diagnostics.steps import SETTLE_MS
from opencode_autoretry.models import EPOCH, Message, to_epoch_ms

#: Stands for the continuations while the rest of the report is encoded.
PLACEHOLDER = "\0continuations\0"
_INDENT = "    "  # two levels of ``indent=2``: the report's object, then the list


#: A continuation's plain-text lines without what the terminal decides (the local time, the
#: outcome's colour): (what follows the time, the trigger line, outcome status, its detail).
TextPieces = tuple[str, str, str, str]


@dataclass(frozen=True)
class Rendered:
    """A continuation as the JSON text of its list item (already indented for the report),
    and the pieces of its lines in the text report."""

    time: datetime
    message_id: str
    session_id: str
    text: str
    pieces: TextPieces


def render_item(item: dict[str, Any]) -> str:
    """One continuation's JSON as ``dump_json`` nests it in the report's list."""
    return json.dumps(item, ensure_ascii=False, indent=2).replace("\n", "\n" + _INDENT)


def splice(report_text: str, items: list[str]) -> str:
    """Put the continuations' texts where the placeholder was encoded."""
    # The indent joined in with the separator: not one more copy of every item (trace 0 --json:
    # ~12 700 items, several MB).
    listed = "[]" if not items else f"[\n{_INDENT}" + f",\n{_INDENT}".join(items) + "\n  ]"
    encoded = json.dumps(PLACEHOLDER, ensure_ascii=False)
    assert report_text.count(encoded) == 1, "the placeholder must appear once"
    return report_text.replace(encoded, listed, 1)


def reusable(
    kept: Mapping[str, tuple[Rendered, int | None]],
    wanted: set[str],
    decided: set[str],
    confirmed: set[str],
    known: set[int],
) -> dict[str, Rendered]:
    """The remembered continuations of ``wanted`` (the window's marked messages) the store's
    records leave as they were: no decision in
    the session (it would relabel the trigger), not an injection's message, a marker naming
    no injection of the store."""
    return {
        mid: item
        for mid, (item, marker) in kept.items()
        if mid in wanted
        and item.session_id not in decided
        and mid not in confirmed
        and marker not in known
    }


def encode_rendered(item: Rendered, marker: int | None) -> bytes:
    return marshal.dumps((_time_us(item.time), item.session_id, marker, item.text, item.pieces))


def decode_rendered(message_id: str, blob: bytes) -> tuple[Rendered, int | None]:
    time_us, session_id, marker, text, pieces = marshal.loads(blob)
    at = EPOCH + timedelta(microseconds=time_us)
    return Rendered(at, message_id, session_id, text, pieces), marker


def _time_us(value: datetime) -> int:
    return (value - EPOCH) // timedelta(microseconds=1)


class RenderedMemo(Protocol):
    """Where the rendered continuations are remembered (``GroupMemo``)."""

    def rendered(
        self, now: datetime, wanted: Sequence[str]
    ) -> dict[str, tuple[Rendered, int | None]]: ...

    def keep_rendered(
        self, item: Rendered, marker: int | None, valid_from: int, now: datetime
    ) -> None: ...


def with_rendered(
    fresh: Sequence[Any],
    reused: Mapping[str, Rendered],
    memo: RenderedMemo,
    render: Callable[[Any], dict[str, Any]],
    pieces: Callable[[Any], TextPieces],
    decided: set[str],
    now: datetime,
) -> list[Any]:
    """The continuations of the marked messages, in the order ``build_trace`` lists them
    (by time, then id): ``fresh`` (``Continuation``) built now, each of those the store leaves
    alone turned into its text and remembered (once its trigger settled), and ``reused``."""
    found: list[Any] = list(reused.values())
    for item in fresh:
        message = item.message
        if item.injection is not None or message is None or item.session_id in decided:
            found.append(item)
            continue
        text = Rendered(
            item.time, message.id, item.session_id, render_item(render(item)), pieces(item)
        )
        trigger = item.trigger
        since = to_epoch_ms(trigger.step.time_created) + SETTLE_MS if trigger else 0
        memo.keep_rendered(text, marker_of(message), since, now)
        found.append(text)
    found.sort(key=lambda c: (c.time, c.message_id if isinstance(c, Rendered) else c.message.id))
    return found


def marker_of(message: Message) -> int | None:
    marker = message.marker or {}
    try:
        return int(str(marker.get("injection")))
    except ValueError:
        return None
