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

import itertools
import marshal
from collections.abc import Iterable, Iterator, Mapping, Sequence
from operator import itemgetter
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
RUNAWAY = Kind.RUNAWAY.value
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
) -> tuple[bytes, bytes, tuple[LightRow, ...]]:
    """(the light part, the objects, the light rows). ``items``: the session's lean findings,
    each with whether it came from the part scan alone (diagnose lists those after the
    others)."""
    rows = tuple(light_row(item, extra, pos) for pos, (item, extra) in enumerate(items))
    return marshal.dumps((header, rows)), encode([item for item, _ in items]), rows


def decode_digest(blob: bytes) -> tuple[Header, tuple[LightRow, ...]]:
    header, rows = marshal.loads(blob)
    return header, rows


def encode_head(header: Header, tally: tuple[Any, ...]) -> bytes:
    """What a report reads of every digest: where its candidates start, and its tally."""
    return marshal.dumps((header, tally))


def decode_head(blob: bytes) -> tuple[Header, tuple[Any, ...]]:
    header, tally = marshal.loads(blob)
    return header, tally


#: One of diagnose's entries in the ``light`` table: (kind, extra, at, id, pos).
Grouped = tuple[str, int, int, str, int]


def grouped(rows: Sequence[LightRow]) -> list[Grouped]:
    """A session's rows as diagnose lists them (``_group``): a runaway loop once, at its first
    step's place, shown by its newest step. ``rows`` in diagnose's order."""
    found: list[Grouped] = []
    loops: dict[str, int] = {}
    for row in rows:
        entry = (row[KIND], row[EXTRA], row[AT], row[ID], row[POS])
        if row[KIND] == RUNAWAY:
            first = loops.get(row[TURN])
            if first is not None:
                kind, extra, at, mid, _ = found[first]
                found[first] = (kind, extra, at, mid, row[POS])
                continue
            loops[row[TURN]] = len(found)
        found.append(entry)
    return found


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

    def heads(self, sessions: Sequence[str] | None = None) -> dict[str, tuple[int, int, bytes]]:
        """session -> (gen, valid_from, head) of these sessions' digests (None: all)."""
        return self._index.digest_heads(self._flags, sessions)

    def kept_fold(self) -> bytes | None:
        """The all-time window's light sessions summed, as a report last kept them."""
        return self._index.kept_fold(self._flags)

    def rows(self, sessions: Sequence[str]) -> dict[str, tuple[LightRow, ...]]:
        """The light rows of these sessions' digests."""
        found = self._index.digest_rows(self._flags, sessions)
        return {sid: decode_digest(blob)[1] for sid, blob in found.items()}

    def in_order(self, kind: Kind, newest_first: bool) -> Iterator[tuple[Any, ...]]:
        """(extra, at, id, session_id, pos) of the kind's grouped rows of every digest."""
        return self._index.light_in_order(self._flags, kind.value, newest_first)

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


#: diagnose's order of an entry: (1 if found by the part scan alone, creation ms, id).
Key = tuple[int, int, str]


class LightPart:
    """The sessions a report counts from their digests alone (no records about them): their
    tallies summed, and their grouped rows in the index's ``light`` table."""

    def __init__(
        self,
        objects: Objects,
        sessions: frozenset[str],
        folds: tuple[tuple[Any, ...], ...],
        found: Mapping[str, int],
    ) -> None:
        """``folds``: those sessions' tallies summed (``session_tally.Fold``); ``found``: how
        many entries of each kind (its value) they add."""
        self.objects, self.sessions, self.folds, self.found = objects, sessions, folds, found

    def rows(self, kind: Kind, newest_first: bool) -> Iterator[tuple[Key, LightRow]]:
        """The kind's grouped rows of these sessions: (key, a row ``Objects.item`` reads)."""
        sessions = self.sessions
        for extra, at, mid, sid, pos in self.objects.in_order(kind, newest_first):
            if sid in sessions:
                yield (extra, at, mid), (extra, at, mid, sid, kind.value, *_UNREAD, pos)


_UNREAD = (None,) * (POS - KIND - 1)


class LazyFindings(Sequence[ClassifiedStep]):
    """A kind's findings where most are still rows in the index: ``len`` and the newest
    rows are cheap; an item is built when it is read (``--limit 0`` reads them all)."""

    def __init__(
        self, kind: Kind, full: Sequence[tuple[Key, ClassifiedStep]], light: LightPart
    ) -> None:
        self.kind, self.full, self._light = kind, tuple(full), light
        self._count = len(self.full) + light.found.get(kind.value, 0)

    def __len__(self) -> int:
        return self._count

    def _entries(self, newest: int | None) -> list[tuple[Key, Entry]]:
        """The newest ``newest`` entries (None: all), in diagnose's order."""
        rows = self._light.rows(self.kind, newest_first=newest is not None)
        light = list(rows if newest is None else itertools.islice(rows, newest))
        merged: list[tuple[Key, Entry]] = sorted([*light, *self.full], key=itemgetter(0))
        return merged if newest is None else merged[max(0, len(merged) - newest):]

    def _built(self, entries: list[tuple[Key, Entry]]) -> list[ClassifiedStep]:
        objects = self._light.objects
        objects.load(e for _, e in entries if type(e) is tuple)
        return [objects.item(e) if type(e) is tuple else e for _, e in entries]  # type: ignore[misc]

    @overload
    def __getitem__(self, index: int) -> ClassifiedStep: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[ClassifiedStep]: ...

    def __getitem__(self, index: int | slice) -> ClassifiedStep | Sequence[ClassifiedStep]:
        newest = _newest_slice(index, self._count)
        if newest is not None:  # items[-n:], how the reports print a kind
            return tuple(self._built(self._entries(newest)))
        return list(self)[index]

    def __iter__(self) -> Iterator[ClassifiedStep]:
        return iter(self._built(self._entries(None)))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]


def _newest_slice(index: int | slice, count: int) -> int | None:
    """n when ``index`` is ``[-n:]`` (or ``[0:]``: all, newest first being no cheaper)."""
    if not isinstance(index, slice) or index.step not in (None, 1) or index.stop is not None:
        return None
    start = index.start or 0
    return -start if start < 0 else (count if start == 0 else None)


def entries_of(found: Iterable[ClassifiedStep]) -> Iterable[ClassifiedStep]:
    """A kind's findings built in full (a LazyFindings' others are counted from tallies)."""
    return [item for _, item in found.full] if isinstance(found, LazyFindings) else found


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
