"""What the reports ask of OpenCode's DB: health counts, sessions by a loose reference, a
session's neighbouring messages and windows, and the prefilters (steps that are not proven
healthy, text that looks like tool markup, errored rows, marked messages) over rowid ranges.

The prefilters' predicates live in ``dbtypes`` so that the report index selects exactly the
same rows (``index_source``)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from datetime import datetime

from opencode_autoretry.models import Message, Role, Session, to_epoch_ms
from opencode_autoretry.opencode.dbtypes import (
    ERRORED_STEP,
    MARKED_PARTS_SINCE,
    TOOL_MARKUP_PARTS,
    UNPROVEN_STEPS,
    MessageRow,
    chunks,
    in_one_row,
    marks,
    ms_or_zero,
    prefix_end,
)
from opencode_autoretry.opencode.reader import SESSION_SELECT, DbReader
from opencode_autoretry.opencode.shapes import parse_session


class ReportQueries(DbReader):
    """The reports' queries (diagnose, errors, timeline, trace, summary, doctor)."""

    # -- health -------------------------------------------------------------------------------

    def size_bytes(self) -> int:
        """The main file plus its write-ahead log (both hold live data)."""
        wal = self.path.with_name(self.path.name + "-wal")
        return self.path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)

    def count(self, table: str) -> int:
        assert table in ("session", "message", "part", "event"), table  # never user input
        return int(self._scalar(f"SELECT count(*) FROM {table}") or 0)

    def versions(self) -> list[str]:
        return [r[0] for r in self._rows("SELECT DISTINCT version FROM session ORDER BY version")]

    # -- sessions -----------------------------------------------------------------------------

    def parent_ids(self, session_ids: Iterable[str]) -> dict[str, str | None]:
        """Each known session's ``parent_id`` (None for a root session), without parsing
        the whole row (the reports' summary asks it of thousands of sessions)."""
        found: dict[str, str | None] = {}
        for chunk in chunks(sorted(set(session_ids))):
            sql = f"SELECT id, parent_id FROM session WHERE id IN ({marks(chunk)})"
            found.update((sid, parent or None) for sid, parent in self._rows(sql, chunk))
        return found

    def find_sessions(self, ref: str) -> list[Session]:
        """Sessions matching ``ref``: the exact id, else ids starting with it, else the slug,
        else ids ending with it."""
        ref = ref.strip()
        if not ref:
            return []
        exact = self.session(ref)
        if exact is not None:
            return [exact]
        sql = f"{SESSION_SELECT} WHERE id >= ? AND id < ? ORDER BY id LIMIT 50"
        by_prefix = [parse_session(r) for r in self._rows(sql, (ref, prefix_end(ref)))]
        if by_prefix:
            return by_prefix
        by_slug = self._rows(f"{SESSION_SELECT} WHERE slug = ? ORDER BY id LIMIT 50", (ref,))
        if by_slug:
            return [parse_session(r) for r in by_slug]
        return self._sessions_ending_with(ref.lstrip("…"))

    def _sessions_ending_with(self, tail: str) -> list[Session]:
        """Sessions whose id ends with ``tail``: the ``…MPAXuBY0EWxz`` older reports printed
        (issue 24). Too short a tail would match by chance, so it needs 6 characters."""
        if len(tail) < 6:
            return []
        sql = f"{SESSION_SELECT} WHERE substr(id, -?) = ? ORDER BY id LIMIT 50"
        return [parse_session(r) for r in self._rows(sql, (len(tail), tail))]

    def closest_sessions(self, ref: str, limit: int = 5) -> list[Session]:
        """The sessions whose id or slug look most like ``ref`` (for "did you mean")."""
        import difflib  # only when a session is not found

        rows = self._rows("SELECT id, slug FROM session")
        scored: list[tuple[float, str]] = []
        needle = ref.lower()
        for session_id, slug in rows:
            score = max(
                difflib.SequenceMatcher(None, needle, str(key).lower()).ratio()
                + (0.5 if needle and needle in str(key).lower() else 0.0)
                for key in (session_id, slug or "")
            )
            scored.append((score, session_id))
        best = sorted(scored, key=lambda item: (-item[0], item[1]))[:limit]
        found = self.sessions(session_id for _, session_id in best)
        return [found[sid] for _, sid in best if sid in found]

    # -- messages around a message ------------------------------------------------------------

    def neighbours(
        self, message: Message, role: Role | None, before: bool, limit: int = 50
    ) -> Message | None:
        """The nearest message (of ``role``, if given) before/after ``message`` in its session."""
        sign, order = ("<", "DESC") if before else (">", "ASC")
        rows = self._message_rows(
            f"session_id = ? AND (time_created, id) {sign} (?, ?)",
            (message.session_id, to_epoch_ms(message.time_created), message.id),
            f"ORDER BY time_created {order}, id {order} LIMIT {limit}",
        )
        match = next((r for r in rows if role is None or r.data.get("role") == role), None)
        return self.with_parts([match])[0] if match else None

    def window(self, session_id: str, start_ms: int, end_ms: int) -> list[Message]:
        """A session's messages created in ``[start_ms, end_ms]``, with parts, in order."""
        rows = self._message_rows(
            "session_id = ? AND time_created BETWEEN ? AND ?",
            (session_id, start_ms, end_ms),
            "ORDER BY time_created, id",
        )
        return self.with_parts(rows)

    def next_row(self, message: Message) -> MessageRow | None:
        """The session's message created right after ``message``, without parts."""
        key = (message.session_id, to_epoch_ms(message.time_created), message.id)
        where = "session_id = ? AND (time_created, id) > (?, ?)"
        rows = self._message_rows(where, key, "ORDER BY time_created, id LIMIT 1")
        return rows[0] if rows else None

    def has_later(self, message: Message) -> bool:
        """Whether any message of the session was created after ``message``."""
        return self.next_row(message) is not None

    def ids_between(self, session_id: str, start_ms: int, end_ms: int) -> list[str]:
        """Ids of a session's messages created in ``[start_ms, end_ms]`` (index only)."""
        sql = "SELECT id FROM message WHERE session_id = ? AND time_created BETWEEN ? AND ?"
        return [r[0] for r in self._rows(sql, (session_id, start_ms, end_ms))]

    def row(self, message_id: str) -> MessageRow | None:
        rows = self._message_rows("id = ?", (message_id,))
        return rows[0] if rows else None

    # -- prefilters over time ranges ----------------------------------------------------------

    def step_candidates(
        self, cut: datetime | None, rowids: tuple[int, int] | None = None
    ) -> list[MessageRow]:
        """Assistant rows since ``cut`` (within ``rowids``) that ``message.data`` does not show
        healthy, whatever its key order (see ``dbtypes.UNPROVEN_STEPS``)."""
        low, high = rowids or (self.first_rowid_since("message", cut), 1 << 62)
        params = (low, high, ms_or_zero(cut))
        return self._message_rows(UNPROVEN_STEPS, params, "ORDER BY rowid", at_once=True)

    def rowid_ranges(self, table: str, cut: datetime | None, size: int) -> list[tuple[int, int]]:
        """``[low, high)`` rowid ranges of ``size`` rows covering ``table``'s rows since ``cut``."""
        low = self.first_rowid_since(table, cut)
        high = int(self._scalar(f"SELECT max(rowid) FROM {table}") or 0) + 1
        return [(start, min(start + size, high)) for start in range(low, high, max(1, size))]

    def tool_markup_candidates(
        self, cut: datetime | None, rowids: tuple[int, int] | None = None
    ) -> list[MessageRow]:
        """Assistant rows since ``cut`` with a text part (in ``rowids``) like a tool call."""
        low, high = rowids or (self.first_rowid_since("part", cut), 1 << 62)
        params = (low, high, ms_or_zero(cut))
        found = self._scalar(in_one_row(TOOL_MARKUP_PARTS, ("message_id",)), params)
        rows = self._rows_by_id([row[0] for row in json.loads(found or "[]")], at_once=True)
        return [r for r in rows if r.data.get("role") == "assistant"]

    def errored_rows(self, limit: int = 10) -> list[MessageRow]:
        """The newest assistant rows that carry an error (reads back from the newest row)."""
        return self._message_rows(ERRORED_STEP, (), f"ORDER BY rowid DESC LIMIT {int(limit)}")

    def search_errors(self, keyword: str, limit: int = 5) -> list[MessageRow]:
        """The newest assistant rows whose error (name, message, body) contains ``keyword``."""
        pattern = "%" + re.sub(r"([\\%_])", r"\\\1", keyword) + "%"
        sql = f"{ERRORED_STEP} AND json_extract(data, '$.error') LIKE ? ESCAPE '\\'"
        return self._message_rows(sql, (pattern,), f"ORDER BY rowid DESC LIMIT {int(limit)}")

    def marker_message_ids(
        self, cut: datetime | None = None, session_id: str | None = None
    ) -> list[str]:
        """Ids of messages with a part carrying the autoretry marker, oldest first (no SQL
        DISTINCT: it makes SQLite walk the message_id index and fetch every row by rowid)."""
        if session_id is not None:
            return self._session_marker_ids(session_id)
        params = (self.first_rowid_since("part", cut), ms_or_zero(cut))
        return sorted({r[0] for r in self._rows(MARKED_PARTS_SINCE, params)})
