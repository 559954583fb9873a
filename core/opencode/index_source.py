"""The host SQL the report index needs (diagnostics/index/sync.py), on a read-only connection.

``IndexSource`` is an ``OpenCodeDB`` that also reads what an incremental index has to know:
rowid watermarks and the id at a rowid (to notice a VACUUM that renumbered rows), the report
prefilters over rowid ranges or over given ids (the same predicates as the full scans, from
``dbtypes``, so an indexed candidate is exactly a scanned one), the assistant rows still open
(no ``time.completed``: OpenCode updates them until the step ends), and a fingerprint of
rows and their parts. Nothing here writes.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from opencode_autoretry.opencode.db import OpenCodeDB
from opencode_autoretry.opencode.dbtypes import (
    MARKED_PART_TEXT,
    PACKED_MESSAGE,
    TOOL_MARKUP_TEXT,
    UNPROVEN_STEPS,
    DbUnreadable,
    MessageRow,
    chunks,
    in_one_row,
    marks,
    one_line,
)

#: An assistant row OpenCode may still update: it has no ``time.completed`` yet.
_OPEN = """data NOT LIKE '{"role":"user"%' AND json_valid(data)
    AND json_extract(data, '$.role') = 'assistant'
    AND json_extract(data, '$.time.completed') IS NULL"""
_TABLES = ("message", "part")
_PACKED = ("row_", *PACKED_MESSAGE)


@dataclass(frozen=True)
class PartHit:
    """A part row one of the part prefilters selected."""

    rowid: int
    message_id: str
    session_id: str
    time_created: int


@dataclass(frozen=True)
class OpenRow:
    """An assistant step not yet completed: the report index reads it again until it is."""

    rowid: int
    id: str
    session_id: str


class IndexSource(OpenCodeDB):
    """An ``OpenCodeDB`` with the reads of the report index."""

    def begin(self) -> None:
        """One read transaction (a snapshot in WAL mode) for a consistent sync."""
        self._execute("BEGIN")

    def end(self) -> None:
        if self._conn.in_transaction:
            self._execute("COMMIT")

    def _execute(self, sql: str) -> None:
        try:
            self._conn.execute(sql)
        except sqlite3.Error as exc:
            raise DbUnreadable(f"cannot read {self.path}: {one_line(exc)}") from exc

    def max_rowid(self, table: str) -> int:
        assert table in _TABLES, table
        return int(self._scalar(f"SELECT max(rowid) FROM {table}") or 0)

    def id_at(self, table: str, rowid: int) -> str | None:
        assert table in _TABLES, table
        found = self._scalar(f"SELECT id FROM {table} WHERE rowid = ?", (rowid,))
        return None if found is None else str(found)

    def count_after(self, table: str, rowid: int) -> int:
        assert table in _TABLES, table
        return int(self._scalar(f"SELECT count(*) FROM {table} WHERE rowid > ?", (rowid,)) or 0)

    def sessions_after(self, table: str, rowid: int) -> set[str]:
        """Sessions with a row of ``table`` above ``rowid`` (a rowid range: no scan; with
        ``DISTINCT`` SQLite walked the whole session index instead: 0.15 s at 1 M)."""
        assert table in _TABLES, table
        sql = f"SELECT session_id FROM {table} WHERE rowid > ?"
        return {str(r[0]) for r in self._rows(sql, (rowid,))}

    def candidates_in(self, low: int, high: int) -> list[tuple[int, MessageRow]]:
        """(rowid, row) of what ``step_candidates`` selects in ``[low, high)``, at any time
        (the scan's own predicate and JSON, so the rows compare equal)."""
        return self._candidates(UNPROVEN_STEPS, (low, high, 0))

    def candidates_among(self, message_ids: Sequence[str]) -> list[tuple[int, MessageRow]]:
        """(rowid, row) of the rows of ``message_ids`` that ``step_candidates`` would select."""
        found: list[tuple[int, MessageRow]] = []
        for chunk in chunks(sorted(set(message_ids))):
            where = f"{UNPROVEN_STEPS} AND id IN ({marks(chunk)})"
            found += self._candidates(where, (0, 1 << 62, 0, *chunk))
        return found

    def _candidates(self, where: str, params: Sequence[Any]) -> list[tuple[int, MessageRow]]:
        sql = f"SELECT rowid AS row_, id, session_id, time_created, data FROM message WHERE {where}"
        packed = self._scalar(in_one_row(f"{sql} ORDER BY rowid", _PACKED), params)
        rows = json.loads(packed) if packed else []
        return [
            (int(rowid), MessageRow(i, s, t, d if isinstance(d, dict) else {}))
            for rowid, i, s, t, d in rows
        ]

    def open_rows(self, low: int, high: int) -> list[OpenRow]:
        sql = (
            "SELECT rowid AS row_, id, session_id FROM message"
            f" WHERE rowid >= ? AND rowid < ? AND {_OPEN}"
        )
        packed = self._scalar(in_one_row(sql, ("row_", "id", "session_id")), (low, high))
        return [OpenRow(int(r), str(i), str(s)) for r, i, s in json.loads(packed or "[]")]

    def still_open(self, message_ids: Sequence[str]) -> set[str]:
        found: set[str] = set()
        for chunk in chunks(sorted(set(message_ids))):
            sql = f"SELECT id FROM message WHERE id IN ({marks(chunk)}) AND {_OPEN}"
            found.update(str(r[0]) for r in self._rows(sql, chunk))
        return found

    def markup_parts(self, low: int, high: int) -> list[PartHit]:
        return self._part_hits(TOOL_MARKUP_TEXT, "rowid >= ? AND rowid < ?", (low, high))

    def marked_parts(self, low: int, high: int) -> list[PartHit]:
        return self._part_hits(MARKED_PART_TEXT, "rowid >= ? AND rowid < ?", (low, high))

    def part_hits_of(self, message_ids: Sequence[str]) -> tuple[list[PartHit], list[PartHit]]:
        """(markup, marked) hits among the parts of ``message_ids``."""
        markup: list[PartHit] = []
        marked: list[PartHit] = []
        for chunk in chunks(sorted(set(message_ids))):
            where = f"message_id IN ({marks(chunk)})"
            markup += self._part_hits(TOOL_MARKUP_TEXT, where, chunk)
            marked += self._part_hits(MARKED_PART_TEXT, where, chunk)
        return markup, marked

    def _part_hits(self, test: str, where: str, params: Sequence[Any]) -> list[PartHit]:
        sql = (
            "SELECT rowid AS row_, message_id, session_id, time_created FROM part"
            f" WHERE {where} AND {test}"
        )
        packed = self._scalar(
            in_one_row(sql, ("row_", "message_id", "session_id", "time_created")), params
        )
        return [
            PartHit(int(r), str(m), str(s), int(t)) for r, m, s, t in json.loads(packed or "[]")
        ]

    def fingerprints(self, message_ids: Sequence[str]) -> dict[str, str]:
        """A digest of each message row and its parts (absent rows are left out)."""
        digests: dict[str, Any] = {}
        for chunk in chunks(sorted(set(message_ids))):
            sql = f"SELECT id, time_updated, data FROM message WHERE id IN ({marks(chunk)})"
            for mid, updated, data in self._rows(sql, chunk):
                digests[mid] = hashlib.sha1(f"{updated}\0{data}".encode())
            sql = (
                "SELECT message_id, id, time_updated, data FROM part"
                f" WHERE message_id IN ({marks(chunk)}) ORDER BY message_id, id"
            )
            for mid, pid, updated, data in self._rows(sql, chunk):
                if mid in digests:
                    digests[mid].update(f"\0{pid}\0{updated}\0{data}".encode())
        return {mid: digest.hexdigest() for mid, digest in digests.items()}
