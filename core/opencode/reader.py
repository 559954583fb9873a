"""The connection every reader of OpenCode's SQLite database (1.18 schema) shares.

``DbReader`` opens the file with the ``mode=ro`` URI and ``query_only``: nothing here can write,
create or migrate it. It holds what both the daemon's reads (``daemon_reads``) and the reports'
queries (``report_queries``) build on: the SQL helpers, sessions by id, messages with their
parts, and the rowid search by time. Costs are kept independent of the database's size:
lookups go through OpenCode's own indexes (primary keys, ``(session_id, time_created, id)``,
``part(message_id, id)``, ``part(session_id)``) or through rowid ranges. ``msg_``/``prt_``/
``evt_`` ids and rowids grow with time; ``ses_`` ids shrink with time.
Failures surface as ``DbError`` subclasses whose text is one line fit for the terminal.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Self
from urllib.parse import quote

from opencode_autoretry.models import Message, Session, to_epoch_ms
from opencode_autoretry.opencode.dbtypes import (
    MARKED_PART,
    NOT_STEP_PART,
    PACKED_MESSAGE,
    DbError,
    DbMissing,
    DbUnreadable,
    DbUnsupported,
    MessageRow,
    chunks,
    in_one_row,
    marks,
    one_line,
    unpack_message_rows,
)
from opencode_autoretry.opencode.shapes import (
    SESSION_COLUMNS,
    load_json,
    parse_message,
    parse_part,
    parse_session,
)

BUSY_TIMEOUT_S = 5.0
REQUIRED_TABLES = ("session", "message", "part")
SESSION_SELECT = f"SELECT {', '.join(SESSION_COLUMNS)} FROM session"
_MESSAGE_SELECT = "SELECT id, session_id, time_created, data FROM message"
_PART_SELECT = "SELECT id, message_id, session_id, time_created, data FROM part"
_BY_MESSAGE = "ORDER BY message_id, id"


class DbReader:
    """A read-only connection to one ``opencode.db`` and the reads everyone shares."""

    def __init__(self, path: Path, conn: sqlite3.Connection) -> None:
        self.path = path
        self._conn = conn

    @classmethod
    def open(cls, path: Path, timeout: float = BUSY_TIMEOUT_S) -> Self:
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

    def _has_table(self, name: str) -> bool:
        sql = "SELECT 1 FROM sqlite_master WHERE type='table' AND name=?"
        return bool(self._rows(sql, (name,)))

    # -- sessions -----------------------------------------------------------------------------

    def session(self, session_id: str) -> Session | None:
        rows = self._rows(f"{SESSION_SELECT} WHERE id = ?", (session_id,))
        return parse_session(rows[0]) if rows else None

    def sessions(self, session_ids: Iterable[str]) -> dict[str, Session]:
        found: dict[str, Session] = {}
        for chunk in chunks(sorted(set(session_ids))):
            sql = f"{SESSION_SELECT} WHERE id IN ({marks(chunk)})"
            found.update((s.id, s) for s in map(parse_session, self._rows(sql, chunk)))
        return found

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
        """Message rows selected by a ``WHERE`` clause written in this package (``at_once``:
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

    def messages_by_id(self, message_ids: Sequence[str]) -> list[Message]:
        return self.with_parts(self._rows_by_id(message_ids))

    def _rows_by_id(self, message_ids: Sequence[str], at_once: bool = False) -> list[MessageRow]:
        rows: list[MessageRow] = []
        for chunk in chunks(sorted(set(message_ids))):
            rows.extend(self._message_rows(f"id IN ({marks(chunk)})", chunk, at_once=at_once))
        rows.sort(key=lambda r: (r.time_created, r.id))
        return rows

    def _session_marker_ids(self, session_id: str) -> list[str]:
        """Ids of the session's messages with a part carrying the autoretry marker, oldest
        first (through ``part(session_id)``)."""
        sql = f"SELECT message_id FROM part WHERE session_id = ? AND {MARKED_PART}"
        return sorted({r[0] for r in self._rows(sql, (session_id,))})

    # -- time ranges --------------------------------------------------------------------------

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
