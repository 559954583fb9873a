"""Read-only reader of OpenCode's SQLite database (1.18 schema). All host SQL: here, dbtypes.

The file is opened with the ``mode=ro`` URI and ``query_only``: nothing here can write, create
or migrate it. Costs are kept independent of the database's size where the daemon needs it:
lookups go through OpenCode's own indexes (primary keys, ``(session_id, time_created, id)``,
``part(message_id, id)``, ``part(session_id)``) or through rowid ranges. ``msg_``/``prt_``/
``evt_`` ids and rowids grow with time; ``ses_`` ids shrink with time.
Failures surface as ``DbError`` subclasses whose text is one line fit for the terminal.
"""

from __future__ import annotations

import difflib
import json
import re
import sqlite3
from collections.abc import Iterable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, cast
from urllib.parse import quote

from opencode_autoretry.models import Message, Role, Session, Turn, to_epoch_ms
from opencode_autoretry.opencode.dbtypes import (
    ERRORED_STEP,
    MARKED_PART,
    MARKED_PARTS_SINCE,
    NOT_STEP_PART,
    PACKED_MESSAGE,
    TOOL_MARKUP_PARTS,
    UNPROVEN_STEPS,
    DbError,
    DbMissing,
    DbUnreadable,
    DbUnsupported,
    EventRow,
    MessageRow,
    chunks,
    in_one_row,
    marks,
    ms_or_zero,
    one_line,
    prefix_end,
    unpack_message_rows,
)
from opencode_autoretry.opencode.shapes import (
    SESSION_COLUMNS,
    group_turns,
    is_real_user,
    load_json,
    parse_message,
    parse_part,
    parse_session,
)
from opencode_autoretry.todos.continuation import Todo

BUSY_TIMEOUT_S = 5.0
REQUIRED_TABLES = ("session", "message", "part")
_SESSION_SELECT = f"SELECT {', '.join(SESSION_COLUMNS)} FROM session"
_MESSAGE_SELECT = "SELECT id, session_id, time_created, data FROM message"
_PART_SELECT = "SELECT id, message_id, session_id, time_created, data FROM part"
_BY_MESSAGE = "ORDER BY message_id, id"


class OpenCodeDB:
    """A read-only connection to one ``opencode.db``."""

    def __init__(self, path: Path, conn: sqlite3.Connection) -> None:
        self.path = path
        self._conn = conn

    @classmethod
    def open(cls, path: Path, timeout: float = BUSY_TIMEOUT_S) -> OpenCodeDB:
        path = Path(path).expanduser()
        try:  # OSError: e.g. a name too long (found by fuzzing the CLI)
            if not path.is_file():
                raise DbMissing(path)
            uri = f"file:{quote(str(path.resolve()))}?mode=ro"
        except (OSError, UnicodeEncodeError) as exc:
            raise DbUnreadable(f"cannot open {str(path)[:200]}: {one_line(exc)[:200]}") from exc
        try:
            # Read-only and used by one thread at a time, so it may be handed between threads
            # (the daemon opens it on one and tails on another); never use it concurrently.
            conn = sqlite3.connect(uri, uri=True, timeout=timeout, check_same_thread=False)
        except sqlite3.Error as exc:
            raise DbUnreadable(f"cannot open {path}: {one_line(exc)}") from exc
        db = cls(path, conn)
        try:
            db._check_schema()
        except DbError:
            conn.close()
            raise
        return db

    def _check_schema(self) -> None:
        self._rows("PRAGMA query_only = 1")
        tables = {r[0] for r in self._rows("SELECT name FROM sqlite_master WHERE type='table'")}
        missing = [t for t in REQUIRED_TABLES if t not in tables]
        if missing:
            raise DbUnsupported(
                f"{self.path} has no {', '.join(missing)} table: not an OpenCode >= 1.2 (SQLite) "
                "database; autoretry reads the 1.18 schema"
            )

    def close(self) -> None:
        self._conn.close()

    def _rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        try:
            return self._conn.execute(sql, tuple(params)).fetchall()
        except sqlite3.Error as exc:
            raise DbUnreadable(f"cannot read {self.path}: {one_line(exc)}") from exc

    def _scalar(self, sql: str, params: Sequence[Any] = ()) -> Any:
        rows = self._rows(sql, params)
        return rows[0][0] if rows else None

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

    def session(self, session_id: str) -> Session | None:
        rows = self._rows(f"{_SESSION_SELECT} WHERE id = ?", (session_id,))
        return parse_session(rows[0]) if rows else None

    def sessions(self, session_ids: Iterable[str]) -> dict[str, Session]:
        found: dict[str, Session] = {}
        for chunk in chunks(sorted(set(session_ids))):
            sql = f"{_SESSION_SELECT} WHERE id IN ({marks(chunk)})"
            found.update((s.id, s) for s in map(parse_session, self._rows(sql, chunk)))
        return found

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
        sql = f"{_SESSION_SELECT} WHERE id >= ? AND id < ? ORDER BY id LIMIT 50"
        by_prefix = [parse_session(r) for r in self._rows(sql, (ref, prefix_end(ref)))]
        if by_prefix:
            return by_prefix
        by_slug = self._rows(f"{_SESSION_SELECT} WHERE slug = ? ORDER BY id LIMIT 50", (ref,))
        if by_slug:
            return [parse_session(r) for r in by_slug]
        return self._sessions_ending_with(ref.lstrip("…"))

    def _sessions_ending_with(self, tail: str) -> list[Session]:
        """Sessions whose id ends with ``tail``: the ``…MPAXuBY0EWxz`` older reports printed
        (issue 24). Too short a tail would match by chance, so it needs 6 characters."""
        if len(tail) < 6:
            return []
        sql = f"{_SESSION_SELECT} WHERE substr(id, -?) = ? ORDER BY id LIMIT 50"
        return [parse_session(r) for r in self._rows(sql, (len(tail), tail))]

    def closest_sessions(self, ref: str, limit: int = 5) -> list[Session]:
        """The sessions whose id or slug look most like ``ref`` (for "did you mean")."""
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

    # -- messages and parts -------------------------------------------------------------------

    def _parts_by_message(
        self, message_ids: Sequence[str], step_parts: bool = True
    ) -> dict[str, list[Any]]:
        by_message: dict[str, list[Any]] = {mid: [] for mid in message_ids}
        only = "" if step_parts else f"AND {NOT_STEP_PART}"
        for chunk in chunks(list(message_ids)):
            sql = f"{_PART_SELECT} WHERE message_id IN ({marks(chunk)}) {only} {_BY_MESSAGE}"
            for pid, mid, sid, created, raw in self._rows(sql, chunk):
                by_message[mid].append(parse_part(pid, mid, sid, created, load_json(raw)))
        return by_message

    def with_parts(
        self, rows: Sequence[MessageRow], errored: bool = True, step_parts: bool = True
    ) -> list[Message]:
        """Messages for ``rows``, each with its parts (read through ``part(message_id, id)``);
        ``errored=False`` leaves the parts of rows with an error unread, ``step_parts=False``
        the step-start/step-finish parts (bookkeeping the classifier never reads)."""
        wanted = [r.id for r in rows if errored or not r.data.get("error")]
        parts = self._parts_by_message(wanted, step_parts)
        return [
            parse_message(r.id, r.session_id, r.time_created, r.data, parts.get(r.id, ()))
            for r in rows
        ]

    def _message_rows(
        self, where: str, params: Sequence[Any] = (), tail: str = "", at_once: bool = False
    ) -> list[MessageRow]:
        """Message rows selected by a ``WHERE`` clause written in this module (``at_once``:
        in one step, for worker threads; see ``dbtypes.in_one_row``)."""
        sql = f"{_MESSAGE_SELECT} WHERE {where} {tail}"
        if at_once:
            return unpack_message_rows(self._scalar(in_one_row(sql, PACKED_MESSAGE), params))
        return [MessageRow(i, s, t, load_json(d)) for i, s, t, d in self._rows(sql, params)]

    def message(self, message_id: str) -> Message | None:
        rows = self._message_rows("id = ?", (message_id,))
        return self.with_parts(rows)[0] if rows else None

    def session_messages(self, session_id: str, since_ms: int | None = None) -> list[Message]:
        """A session's messages in creation order, through ``(session_id, time_created, id)``."""
        where, params = "session_id = ?", list[Any]([session_id])
        if since_ms is not None:
            where += " AND time_created >= ?"
            params.append(since_ms)
        return self.with_parts(self._message_rows(where, params, "ORDER BY time_created, id"))

    def turns(self, session_id: str) -> list[Turn]:
        return group_turns(session_id, self.session_messages(session_id))

    def last_turn(self, session_id: str) -> Turn | None:
        """The newest turn, reading back only as far as its opening real user message."""
        opener = self._last_real_user(session_id)
        since = None if opener is None else to_epoch_ms(opener.time_created)
        turns = group_turns(session_id, self.session_messages(session_id, since))
        return turns[-1] if turns else None

    def _last_real_user(self, session_id: str, batch: int = 64) -> Message | None:
        cursor: tuple[int, str] | None = None
        while True:
            where, params = "session_id = ?", list[Any]([session_id])
            if cursor is not None:
                where += " AND (time_created, id) < (?, ?)"
                params.extend(cursor)
            rows = self._message_rows(
                where, params, f"ORDER BY time_created DESC, id DESC LIMIT {batch}"
            )
            users = [r for r in rows if r.data.get("role") == "user"]
            real = next((m for m in self.with_parts(users) if is_real_user(m)), None)
            if real is not None or len(rows) < batch:
                return real
            cursor = (rows[-1].time_created, rows[-1].id)

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

    def injected_messages(self, session_id: str) -> list[Message]:
        """User messages of the session carrying the autoretry marker, oldest first."""
        found = self.messages_by_id(self.marker_message_ids(session_id=session_id))
        return [m for m in found if m.role is Role.USER and m.marker]

    def user_messages_since(self, since_ms: int) -> list[Message]:
        """User messages created at or after ``since_ms`` (exec: what a run just asked)."""
        rows = self._message_rows("time_created >= ? AND json_extract(data, '$.role') = 'user'",
                                  (since_ms,), "ORDER BY time_created, id")
        return self.with_parts(rows)

    def messages_by_id(self, message_ids: Sequence[str]) -> list[Message]:
        return self.with_parts(self._rows_by_id(message_ids))

    def todos(self, session_id: str) -> list[Todo]:
        """The session's todo list as ``todowrite`` last wrote it, in order (PK lookup)."""
        if not self._has_table("todo"):
            return []
        sql = "SELECT content, status, priority FROM todo WHERE session_id = ? ORDER BY position"
        return [Todo(str(c), str(s), str(p)) for c, s, p in self._rows(sql, (session_id,))]

    # -- tailing (daemon) ---------------------------------------------------------------------

    def max_message_id(self) -> str | None:
        return cast(str | None, self._scalar("SELECT max(id) FROM message"))

    def messages_after(self, message_id: str | None, limit: int = 500) -> list[Message]:
        """Messages with an id above ``message_id`` (all when ``None``), by id, with parts."""
        rows = self._message_rows("id > ?", (message_id or "",), f"ORDER BY id LIMIT {int(limit)}")
        return self.with_parts(rows)

    def sessions_with_messages_since(self, cut: datetime) -> set[str]:
        """Sessions with a message created at or after ``cut`` (a rowid range, no scan)."""
        sql = "SELECT session_id FROM message WHERE rowid >= ? AND time_created >= ?"
        rows = self._rows(sql, (self.first_rowid_since("message", cut), to_epoch_ms(cut)))
        return {r[0] for r in rows}

    def max_event_rowid(self) -> int:
        if not self._has_table("event"):
            return 0
        return int(self._scalar("SELECT max(rowid) FROM event") or 0)

    def events_after(self, rowid: int, limit: int = 500) -> list[EventRow]:
        if not self._has_table("event"):
            return []
        sql = "SELECT rowid, aggregate_id, type, data FROM event WHERE rowid > ? ORDER BY rowid"
        rows = self._rows(f"{sql} LIMIT ?", (rowid, int(limit)))
        return [EventRow(r, a, t, load_json(d)) for r, a, t, d in rows]

    def _has_table(self, name: str) -> bool:
        sql = "SELECT 1 FROM sqlite_master WHERE type='table' AND name=?"
        return bool(self._rows(sql, (name,)))

    # -- time ranges (reports) ----------------------------------------------------------------

    def first_rowid_since(self, table: str, cut: datetime | None) -> int:
        """The smallest rowid of ``table`` created at or after ``cut`` (0 = from the start).
        Rows are appended as they are created, so ``time_created`` grows with the rowid: a
        binary search costs O(log² n), not a scan. Callers still filter ``time_created``, so
        a row written out of order is never shown outside the window (at worst missed)."""
        if table not in ("message", "part"):
            raise ValueError(f"no time-ordered rowids in {table}")
        if cut is None:
            return 0
        cut_ms = to_epoch_ms(cut)
        low = int(self._scalar(f"SELECT min(rowid) FROM {table}") or 0)
        high = int(self._scalar(f"SELECT max(rowid) FROM {table}") or 0) + 1
        probe = f"SELECT rowid, time_created FROM {table} WHERE rowid >= ? ORDER BY rowid LIMIT 1"
        while low < high:
            middle = (low + high) // 2
            found = self._rows(probe, (middle,))
            if found and found[0][1] < cut_ms:
                low = found[0][0] + 1
            else:  # no row in [middle, found): "rowid >= middle" selects the same rows
                high = middle
        return low

    # -- report queries -----------------------------------------------------------------------

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
            sql = f"SELECT message_id FROM part WHERE session_id = ? AND {MARKED_PART}"
            return sorted({r[0] for r in self._rows(sql, (session_id,))})
        params = (self.first_rowid_since("part", cut), ms_or_zero(cut))
        return sorted({r[0] for r in self._rows(MARKED_PARTS_SINCE, params)})

    def _rows_by_id(self, message_ids: Sequence[str], at_once: bool = False) -> list[MessageRow]:
        rows: list[MessageRow] = []
        for chunk in chunks(sorted(set(message_ids))):
            rows.extend(self._message_rows(f"id IN ({marks(chunk)})", chunk, at_once=at_once))
        rows.sort(key=lambda r: (r.time_created, r.id))
        return rows
