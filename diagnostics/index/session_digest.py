"""What ``diagnose 0`` found in one session, kept in the report index as plain values.

A later ``diagnose`` at 1 M messages used to rebuild one object graph per failed step (a step,
its turn and opener, a verdict, tokens, an error, datetimes: ~10 000 of them) only to count
them and print the newest 20 of each kind. A *digest* keeps, per session, each finding as a
*light row* (a tuple of what the reports count and sort by: time, ids, kind, retryable,
provider/model, turn) and, in one nested blob read only when needed, the lean objects
themselves (``memo_codec``). A report turns light rows into objects only for the rows it
prints (``LazyFindings``) and for the sessions the daemon's store has decisions about (their
fate and relabelling need the whole step).

A digest also records where the session's candidates start (the lowest rowid and creation time
of its candidate messages and of its tool-markup parts), so a windowed report (``diagnose 7``)
uses it only when the whole session lies inside the window: then the window sees exactly the
members ``diagnose 0`` saw. It is valid while the session's counter is unchanged (``bump``
deletes it) and once every step in it is older than ``SETTLE`` (``valid_from``), like the memo.
"""

from __future__ import annotations

import marshal
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, overload

from opencode_autoretry.diagnostics.index.memo_codec import decode, encode
from opencode_autoretry.diagnostics.index.step_index import StepIndex
from opencode_autoretry.diagnostics.steps import ClassifiedStep
from opencode_autoretry.models import Kind, to_epoch_ms

#: Fields of a light row (a plain tuple: ~10 000 of them are read per report).
EXTRA, AT, ID, SESSION, KIND, RETRYABLE, PROVIDER, MODEL, PARENT, TURN, POS = range(11)
LightRow = tuple[Any, ...]
Entry = ClassifiedStep | LightRow
#: No row of that kind: never below a window's bounds.
NONE_YET = 1 << 62
KINDS = {k.value: k for k in Kind}
#: (lowest candidate rowid, its lowest creation ms, lowest markup part rowid, lowest ms).
Header = tuple[int, int, int, int]


def light_row(item: ClassifiedStep, extra: bool, pos: int) -> LightRow:
    step, verdict = item.step, item.verdict
    return (
        int(extra),
        to_epoch_ms(step.time_created),
        step.id,
        step.session_id,
        verdict.kind.value,
        verdict.retryable,
        step.provider_id,
        step.model_id,
        step.parent_id or "",
        item.turn.id,
        pos,
    )


def encode_digest(
    header: Header, items: Sequence[tuple[ClassifiedStep, bool]]
) -> tuple[bytes, bytes]:
    """(the light part, the objects). ``items``: the session's lean findings, each with
    whether it came from the part scan alone (diagnose lists those after the others)."""
    rows = tuple(light_row(item, extra, pos) for pos, (item, extra) in enumerate(items))
    return marshal.dumps((header, rows)), encode([item for item, _ in items])


def decode_digest(blob: bytes) -> tuple[Header, tuple[LightRow, ...]]:
    header, rows = marshal.loads(blob)
    return header, rows


def fits(header: Header, low_message: int, low_part: int, cut_ms: int) -> bool:
    """Whether every candidate of the session lies inside the window."""
    row, at, part_row, part_at = header
    return row >= low_message and at >= cut_ms and part_row >= low_part and part_at >= cut_ms


def entry_key(entry: Entry) -> tuple[int, int, str]:
    """diagnose's order: the message scan's findings by time, then the part scan's."""
    if type(entry) is tuple:
        return entry[EXTRA], entry[AT], entry[ID]
    raise TypeError("a full item carries no scan mark: use keyed()")


class Objects:
    """Reads the digests and turns light rows into objects (one blob per session, read and
    decoded once). It reads the index on a connection of its own, in one read transaction
    (a snapshot), so the objects read when the report is printed — after OpenCode's DB and
    the report's index reader are closed — are those of the light rows it handed out."""

    def __init__(self, index_file: Path, flags: str) -> None:
        self._index = StepIndex.open(index_file, readonly=True)
        self._index.conn.execute("BEGIN")
        self._flags = flags
        self._decoded: dict[str, list[ClassifiedStep]] = {}

    def digests(self) -> dict[str, tuple[int, int, bytes]]:
        return self._index.digests(self._flags)

    def _read(self, sessions: Sequence[str]) -> Mapping[str, bytes]:
        return self._index.digest_objects(self._flags, sessions)

    def load(self, rows: Iterable[LightRow]) -> None:
        """Read the objects of these rows' sessions at once (one query per 500)."""
        wanted = sorted({r[SESSION] for r in rows} - self._decoded.keys())
        if wanted:
            for sid, blob in self._read(wanted).items():
                self._decoded[sid] = decode(blob)

    def item(self, row: LightRow) -> ClassifiedStep:
        sid = row[SESSION]
        if sid not in self._decoded:
            self.load([row])
        return self._decoded[sid][row[POS]]


class LazyFindings(Sequence[ClassifiedStep]):
    """A kind's findings where some are still light rows: ``len`` and the newest rows are
    cheap; an item is built when it is read (``--limit 0`` reads them all)."""

    def __init__(self, entries: Sequence[Entry], objects: Objects) -> None:
        self.entries = tuple(entries)
        self._objects = objects

    def __len__(self) -> int:
        return len(self.entries)

    def _full(self, entry: Entry) -> ClassifiedStep:
        return self._objects.item(entry) if type(entry) is tuple else entry  # type: ignore[return-value]

    @overload
    def __getitem__(self, index: int) -> ClassifiedStep: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[ClassifiedStep]: ...

    def __getitem__(self, index: int | slice) -> ClassifiedStep | Sequence[ClassifiedStep]:
        if isinstance(index, slice):
            picked = self.entries[index]
            self._objects.load(e for e in picked if type(e) is tuple)
            return tuple(self._full(e) for e in picked)
        return self._full(self.entries[index])

    def __iter__(self) -> Iterator[ClassifiedStep]:
        self._objects.load(e for e in self.entries if type(e) is tuple)
        return (self._full(e) for e in self.entries)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]


def entries_of(found: Iterable[ClassifiedStep]) -> Iterable[Entry]:
    """A kind's findings as entries: light rows where it still has them."""
    return found.entries if isinstance(found, LazyFindings) else found


def kind_of(entry: Entry) -> Kind:
    return KINDS[entry[KIND]] if type(entry) is tuple else entry.verdict.kind  # type: ignore[union-attr]


def loop_of(entry: Entry) -> tuple[str, str]:
    """A runaway finding's loop: (session, turn)."""
    if type(entry) is tuple:
        return entry[SESSION], entry[TURN]
    return entry.step.session_id, entry.turn.id  # type: ignore[union-attr]


def cast_full(entries: Iterable[Entry]) -> list[ClassifiedStep]:
    """Entries known to be objects (a scan, no digest)."""
    return [e for e in entries if isinstance(e, ClassifiedStep)]
