"""Reports on the report index: the same answers as the full scans, without the scans.

``IndexedDB`` is an ``OpenCodeDB`` whose report prefilters (``step_candidates``,
``tool_markup_candidates``, ``marker_message_ids``) answer from the index for the rows up to
its watermark and from OpenCode's DB above it (rows added since the sync), so the reports run
their usual code on the same candidates. ``GroupMemo`` remembers how each group of
candidates was classified and answers ``classify_rows`` for the groups whose session did not
change since, once nothing in them depends on the clock (every step older than ``SETTLE``).
Everything else (parts, turns, neighbours, the health counts) is still read from OpenCode's
DB, so the output is the scan's, byte for byte (tests/diagnostics/test_index_random.py).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, ClassVar

from opencode_autoretry.diagnostics.index.memo_codec import decode, encode
from opencode_autoretry.diagnostics.index.step_index import CandidateRow, Digest, StepIndex
from opencode_autoretry.diagnostics.steps import (
    SETTLE_MS,
    ClassifiedStep,
    classify_rows,
    lean_step,
)
from opencode_autoretry.diagnostics.trace.outcome import Outcome, message_links
from opencode_autoretry.diagnostics.trace.rows import Rendered, decode_rendered, encode_rendered
from opencode_autoretry.models import Message, to_epoch_ms
from opencode_autoretry.opencode.db import OpenCodeDB
from opencode_autoretry.opencode.dbtypes import (
    MARKED_PART_TEXT,
    TOOL_MARKUP_PARTS,
    MessageRow,
    in_one_row,
    ms_or_zero,
)
from opencode_autoretry.opencode.index_source import IndexSource
from opencode_autoretry.opencode.shapes import load_json, parse_message

MARKED = MARKED_PART_TEXT
#: More memo entries than this (old windows' groups pile up): start again.
MEMO_LIMIT = 500_000
#: The prefix of trace's entries (one per continuation message).
_LINKS = "links\0"
#: The prefix of trace --json's rendered continuations (one per marked message).
_RENDERED = "rendered\0"
#: From how many wanted continuations ``rendered`` reads them all in one range.
_READ_ALL_RENDERED = 4000


class StubData(dict[str, Any]):
    """A candidate's ``data`` as far as grouping needs it (role, parentID), its JSON kept
    for when it must be classified (parsing 14 000 rows would cost ~0.1 s)."""

    raw: str = "{}"
    group: str = ""


def _stub(row: CandidateRow) -> MessageRow:
    _, mid, sid, created, role, parent, group, raw = row
    data = StubData(role=role, parentID=parent)
    data.raw, data.group = raw, group
    return MessageRow(mid, sid, created, data)


def _full(row: MessageRow) -> MessageRow:
    if isinstance(row.data, StubData):
        return MessageRow(row.id, row.session_id, row.time_created, load_json(row.data.raw))
    return row


def _group_of(row: MessageRow) -> str:
    if isinstance(row.data, StubData):
        return row.data.group
    parsed = parse_message(row.id, row.session_id, row.time_created, row.data, ())
    return parsed.parent_id or ""


class IndexedDB(IndexSource):
    """``OpenCodeDB`` whose report prefilters read the index (see the module doc)."""

    index_file: ClassVar[Path | None] = None

    @classmethod
    def bound(cls, index_file: Path) -> type[IndexedDB]:
        """The class the report opens its connections with (worker threads too)."""
        return type("BoundIndexedDB", (cls,), {"index_file": index_file})

    def _index(self) -> StepIndex:
        found: StepIndex | None = getattr(self, "_opened_index", None)
        if found is None:
            assert self.index_file is not None, "use IndexedDB.bound(index_file)"
            found = StepIndex.open(self.index_file, readonly=True)
            self._opened_index = found
            self._meta = found.meta()
        return found

    def _mark(self, table: str) -> int:
        self._index()
        return int(self._meta.get(f"{table}_rowid", "0"))

    # -- for digest_findings.py ----------------------------------------------------------------

    def index(self) -> StepIndex:
        return self._index()

    def watermark(self, table: str) -> int:
        """The last rowid of ``table`` the index has read (rows above: added since)."""
        return self._mark(table)

    def stub(self, row: CandidateRow) -> MessageRow:
        return _stub(row)

    def rows_by_id(self, message_ids: Sequence[str]) -> list[MessageRow]:
        return self._rows_by_id(message_ids, at_once=True)

    def close(self) -> None:
        opened: StepIndex | None = getattr(self, "_opened_index", None)
        if opened is not None:
            opened.close()
        super().close()

    def count(self, table: str) -> int:
        """The sync counted the rows up to its watermarks; only those above are counted."""
        if table not in ("message", "part"):
            return super().count(table)
        self._index()
        mark = self._mark(table)
        return int(self._meta.get(f"{table}_count", "0")) + self.count_after(table, mark)

    def step_candidates(
        self, cut: datetime | None, rowids: tuple[int, int] | None = None
    ) -> list[MessageRow]:
        low, high = rowids or (self.first_rowid_since("message", cut), 1 << 62)
        edge = self._mark("message") + 1
        rows = self._index().candidates(low, min(high, edge), ms_or_zero(cut))
        found = [_stub(row) for row in rows]
        if high > edge:  # rows added since the sync
            found += super().step_candidates(cut, (max(low, edge), high))
        return found

    def tool_markup_candidates(
        self, cut: datetime | None, rowids: tuple[int, int] | None = None
    ) -> list[MessageRow]:
        low, high = rowids or (self.first_rowid_since("part", cut), 1 << 62)
        edge = self._mark("part") + 1
        ids = self._index().hit_messages("markup", low, min(high, edge), ms_or_zero(cut))
        if high > edge:
            params = (max(low, edge), high, ms_or_zero(cut))
            packed = self._scalar(in_one_row(TOOL_MARKUP_PARTS, ("message_id",)), params)
            ids += [row[0] for row in load_json_list(packed)]
        rows = self._rows_by_id(ids, at_once=True)
        return [r for r in rows if r.data.get("role") == "assistant"]

    def marker_message_ids(
        self, cut: datetime | None = None, session_id: str | None = None
    ) -> list[str]:
        if session_id is not None:
            return super().marker_message_ids(cut, session_id)
        low, edge = self.first_rowid_since("part", cut), self._mark("part") + 1
        ids = self._index().hit_messages("marked", low, edge, ms_or_zero(cut))
        sql = f"SELECT message_id FROM part WHERE rowid >= ? AND time_created >= ? AND {MARKED}"
        ids += [r[0] for r in self._rows(sql, (max(low, edge), ms_or_zero(cut)))]
        return sorted(set(ids))


def load_json_list(packed: str | None) -> list[list[Any]]:
    import json

    value = json.loads(packed) if packed else []
    return value if isinstance(value, list) else []


class GroupMemo:
    """Classifications remembered in the index, per group of candidates (``StepMemo``)."""

    def __init__(self, index_file: Path) -> None:
        self.index_file = index_file
        self._reader: StepIndex | None = StepIndex.open(index_file, readonly=True)
        self._gens = self._reader.generations()
        # Entries are read when a report asks for their keys (diagnose 7 needs a fifth of
        # them; reading every blob up front was ~0.1 s at 1 M messages).
        self._entries: dict[str, tuple[str, int, int, bytes]] = {}
        self._links_read = False
        self._new: list[tuple[str, str, int, int, bytes]] = []
        self._new_digests: list[Digest] = []
        self._new_folds: dict[str, bytes] = {}
        self.hits = 0
        self.misses = 0

    def classify(
        self,
        db: OpenCodeDB,
        rows: Sequence[MessageRow],
        *,
        now: datetime,
        runaway_steps: int,
        whole_turn: bool,
        lean: bool,
    ) -> list[ClassifiedStep]:
        groups: dict[tuple[str, str], list[MessageRow]] = {}
        for row in rows:
            if row.data.get("role") == "assistant":
                groups.setdefault((row.session_id, _group_of(row)), []).append(row)
        flags = (runaway_steps, whole_turn, lean)
        found: list[ClassifiedStep] = []
        missed: list[tuple[str, str, list[MessageRow]]] = []
        keyed = [
            (_key(flags, sid, parent, members), sid, members)
            for (sid, parent), members in groups.items()
        ]
        self._read([key for key, _, _ in keyed])
        for key, session_id, members in keyed:
            remembered = self._recall(key, session_id, now)
            if remembered is None:
                missed.append((key, session_id, members))
            else:
                found += remembered
        if missed:
            fresh = classify_rows(
                db,
                [_full(r) for _, _, members in missed for r in members],
                now=now,
                runaway_steps=runaway_steps,
                whole_turn=whole_turn,
                lean=lean,
            )
            by_id = {item.step.id: item for item in fresh}
            for key, session_id, members in missed:
                items = [by_id[r.id] for r in members if r.id in by_id]
                self._remember(key, session_id, items, now)
                found += items
        found.sort(key=lambda c: (c.step.time_created, c.step.id))
        return found

    @property
    def reads_digests(self) -> bool:
        """Whether the index is open for reading (closed after the report's last read)."""
        return self._reader is not None

    def valid_digests(
        self, digests: dict[str, tuple[int, int, bytes]], now: datetime
    ) -> dict[str, bytes]:
        """Of ``digests`` (session_id -> (gen, valid_from, head)), the valid ones' heads."""
        now_ms, gens = to_epoch_ms(now), self._gens
        return {
            sid: blob
            for sid, (gen, valid_from, blob) in digests.items()
            if gen == gens.get(sid, 0) and valid_from <= now_ms
        }

    def keep_digest(
        self,
        session_id: str,
        flags: str,
        valid_from: int,
        blob: bytes,
        heavy: bytes,
        head: bytes,
        grouped: Sequence[tuple[str, int, int, str, int]],
    ) -> None:
        gen = self._gens.get(session_id, 0)
        self._new_digests.append(
            (session_id, flags, gen, valid_from, blob, heavy, head, grouped)
        )

    def _read(self, keys: Sequence[str]) -> None:
        wanted = [k for k in keys if k not in self._entries]
        if wanted and self._reader is not None:
            self._entries.update(self._reader.memo_for(wanted))

    def _read_links(self) -> None:
        if not self._links_read and self._reader is not None:
            self._entries.update(self._reader.memo_under(_LINKS))
        self._links_read = True

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None

    def _recall(self, key: str, session_id: str, now: datetime) -> Any:
        entry = self._entries.get(key)
        if entry is None:
            self.misses += 1
            return None
        owner, gen, valid_from, blob = entry
        if owner != session_id or gen != self._gens.get(session_id, 0):
            self.misses += 1
            return None
        if to_epoch_ms(now) < valid_from:
            self.misses += 1
            return None
        self.hits += 1
        return decode(blob)

    def _remember(
        self, key: str, session_id: str, items: list[ClassifiedStep], now: datetime
    ) -> None:
        """Kept only once the clock no longer matters: every step older than SETTLE."""
        if items:
            since = max(to_epoch_ms(i.step.time_created) for i in items) + SETTLE_MS
            self._keep(key, session_id, [lean_step(i) for i in items], since, now)

    def _keep(self, key: str, session_id: str, value: Any, valid_from: int, now: datetime) -> None:
        if to_epoch_ms(now) < valid_from:
            return  # it may still change with the clock alone
        blob = encode(value)
        gen = self._gens.get(session_id, 0)
        self._new.append((key, session_id, gen, valid_from, blob))

    def links(
        self, db: OpenCodeDB, message: Message, now: datetime
    ) -> tuple[ClassifiedStep | None, Outcome]:
        """``trace``'s ``message_links``, remembered per continuation message."""
        key, session_id = f"{_LINKS}{message.id}", message.session_id
        self._read_links()
        remembered = self._recall(key, session_id, now)
        if remembered is not None:
            trigger, outcome = remembered
            return trigger, outcome
        trigger, outcome = message_links(db, message, now)
        since = to_epoch_ms(trigger.step.time_created) + SETTLE_MS if trigger else 0
        kept = lean_step(trigger, keep_parts=True) if trigger else None
        self._keep(key, session_id, (kept, outcome), since, now)
        return trigger, outcome

    def rendered(
        self, now: datetime, wanted: Sequence[str]
    ) -> dict[str, tuple[Rendered, int | None]]:
        """``trace``'s remembered continuations of the ``wanted`` marked messages, valid at
        ``now`` (trace/rows.py): only those are read (a window's, not every one kept)."""
        if self._reader is None:
            return {}
        now_ms, found = to_epoch_ms(now), {}
        keys = [f"{_RENDERED}{mid}" for mid in wanted]
        if len(keys) < _READ_ALL_RENDERED:
            entries = self._reader.memo_for(keys)
        else:  # one range of the primary key, not one probe per key (trace 0: ~12 700)
            every, asked = self._reader.memo_under(_RENDERED), set(keys)
            entries = {k: v for k, v in every.items() if k in asked}
        for key, (sid, gen, valid_from, blob) in entries.items():
            if gen == self._gens.get(sid, 0) and valid_from <= now_ms:
                mid = key[len(_RENDERED) :]
                found[mid] = decode_rendered(mid, blob)
        return found

    def keep_rendered(
        self, item: Rendered, marker: int | None, valid_from: int, now: datetime
    ) -> None:
        key = f"{_RENDERED}{item.message_id}"
        if to_epoch_ms(now) >= valid_from:
            gen = self._gens.get(item.session_id, 0)
            self._new.append((key, item.session_id, gen, valid_from, encode_rendered(item, marker)))

    def keep_fold(self, flags: str, blob: bytes) -> None:
        """Keep the all-time window's light sessions summed (light_fold.py)."""
        self._new_folds[flags] = blob

    def flush(self) -> None:
        """Write what was learnt (one transaction; a failure only loses the memo)."""
        self.close()
        if not self._new and not self._new_digests and not self._new_folds:
            return
        index = StepIndex.open(self.index_file)
        try:
            index.conn.execute("BEGIN IMMEDIATE")
            if index.memo_count() + len(self._new) > MEMO_LIMIT:
                index.drop_memo()
            index.put_memo(self._new)
            index.put_digests(self._new_digests)
            index.put_folds(self._new_folds)
            index.conn.execute("COMMIT")
        finally:
            index.close()
        self._new, self._new_digests, self._new_folds = [], [], {}


def _key(
    flags: tuple[int, bool, bool], session_id: str, parent: str, rows: list[MessageRow]
) -> str:
    ids = [rows[0].id] if len(rows) == 1 else sorted(r.id for r in rows)
    text = "\0".join([repr(flags), session_id, parent, *ids])
    return hashlib.sha1(text.encode()).hexdigest()
