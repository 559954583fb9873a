"""autoretry's own index of OpenCode's report candidates: one SQLite file per OpenCode DB.

It lives in autoretry's state dir (``report-index/<hash of the DB path>.sqlite3``), never in
OpenCode's DB, and holds what the full scans of ``diagnose`` and ``trace`` would find:

- ``candidate``: the message rows ``step_candidates`` selects (the JSON as the scan parsed it);
- ``markup`` / ``marked``: the part rows ``tool_markup_candidates`` / the marker scan select;
- ``open_row``: assistant rows OpenCode may still update (no ``time.completed``), with a
  fingerprint of the row and its parts, re-read on every sync until they end;
- ``session_gen``: a counter per session, bumped whenever a row of the session changes;
- ``memo``: classifications (flat values, see ``memo_codec.py``) keyed by what they were computed
  from, valid while their session's counter is unchanged;
- ``digest``: per session, what ``diagnose 0`` found in it, reduced to the values the reports
  print and count (``session_digest.py``), voided with the session's counter like the memo;
- ``meta``: the DB's identity (device, inode), the rowid watermarks and the id at each (a
  VACUUM that renumbered rows changes it), the row counts (rows deleted lower them).

Only ``index_sync`` writes the candidates and ``IndexedDB`` the memo; any error reads as "no
index" to the caller, which then scans (reports never depend on the index to be right).
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from opencode_autoretry.store.sqlite_uri import readonly_uri

#: Bump to make every existing index rebuild itself (its layout or meaning changed).
INDEX_VERSION = "3"  # 2: the per-session digests; 3: their tallies and grouped rows
BUSY_TIMEOUT_S = 30.0
#: Keys per ``IN (...)`` query (SQLite's default limit of variables is 32 766 since 3.32).
_IN_CHUNK = 500

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS candidate (
    row INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, session_id TEXT NOT NULL,
    time_created INTEGER NOT NULL, role TEXT NOT NULL, parent TEXT NOT NULL,
    group_parent TEXT NOT NULL, data TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS markup (
    row INTEGER PRIMARY KEY, message_id TEXT NOT NULL, session_id TEXT NOT NULL,
    time_created INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS markup_message ON markup (message_id);
CREATE TABLE IF NOT EXISTS marked (
    row INTEGER PRIMARY KEY, message_id TEXT NOT NULL, session_id TEXT NOT NULL,
    time_created INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS marked_message ON marked (message_id);
CREATE TABLE IF NOT EXISTS open_row (
    id TEXT PRIMARY KEY, session_id TEXT NOT NULL, fingerprint TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS session_gen (session_id TEXT PRIMARY KEY, gen INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS memo (
    key TEXT PRIMARY KEY, session_id TEXT NOT NULL, gen INTEGER NOT NULL,
    valid_from INTEGER NOT NULL, blob BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS memo_session ON memo (session_id);
CREATE TABLE IF NOT EXISTS digest (
    session_id TEXT NOT NULL, flags TEXT NOT NULL, gen INTEGER NOT NULL,
    valid_from INTEGER NOT NULL, blob BLOB NOT NULL, heavy BLOB NOT NULL, tally BLOB NOT NULL,
    PRIMARY KEY (session_id, flags));
CREATE TABLE IF NOT EXISTS light (
    flags TEXT NOT NULL, kind TEXT NOT NULL, extra INTEGER NOT NULL, at INTEGER NOT NULL,
    id TEXT NOT NULL, session_id TEXT NOT NULL, pos INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS fold (flags TEXT PRIMARY KEY, blob BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS light_order ON light (flags, kind, extra, at, id);
CREATE INDEX IF NOT EXISTS light_session ON light (session_id);
CREATE INDEX IF NOT EXISTS candidate_time ON candidate (time_created, row, session_id);
CREATE INDEX IF NOT EXISTS candidate_session ON candidate (session_id, row);
CREATE INDEX IF NOT EXISTS markup_session ON markup (session_id, row);
"""
#: (rowid, id, session_id, time_created, role, parent as the scan groups it, parent as the
#: classifier groups it, the row's JSON as the scan parsed it).
CandidateRow = tuple[int, str, str, int, str, str, str, str]
#: (session_id, flags, gen, valid_from, light rows, objects, tally, grouped rows: (kind, extra,
#: at, id, pos) each) of one session's digest (session_digest.py).
Digest = tuple[str, str, int, int, bytes, bytes, bytes, Sequence[tuple[str, int, int, str, int]]]
_TABLES = (
    "candidate", "markup", "marked", "open_row", "session_gen", "memo", "digest", "light", "fold",
    "meta",
)


class IndexError_(Exception):
    """The index file cannot be used (the caller scans instead)."""


class CorruptIndex(IndexError_):
    """The file is not an SQLite database: delete it and build again."""


def index_file(state_dir: Path, db_path: Path) -> Path:
    """Where the index of ``db_path`` lives (one file per OpenCode DB)."""
    # fsencode: a path from the shell may hold bytes that are not UTF-8 (surrogate escapes).
    key = hashlib.sha1(os.fsencode(Path(db_path).expanduser().resolve())).hexdigest()[:16]
    return state_dir / "report-index" / f"{key}.sqlite3"


def _drop_older_layout(conn: sqlite3.Connection) -> None:
    """An index of another version may lack columns of this one (``CREATE TABLE IF NOT
    EXISTS`` keeps its tables): drop them, and the sync builds the index anew."""
    try:
        row = conn.execute("SELECT value FROM meta WHERE key = 'version'").fetchone()
    except sqlite3.OperationalError:
        return  # a new file: no meta table yet
    if row is not None and row[0] != INDEX_VERSION:
        for table in _TABLES:
            conn.execute(f"DROP TABLE IF EXISTS {table}")


class StepIndex:
    """One connection to an index file (its own writer: never the daemon's store)."""

    def __init__(self, path: Path, conn: sqlite3.Connection) -> None:
        self.path = path
        self.conn = conn

    @classmethod
    def open(cls, path: Path, readonly: bool = False) -> StepIndex:
        try:
            if readonly:
                conn = sqlite3.connect(
                    readonly_uri(path),
                    uri=True,
                    timeout=BUSY_TIMEOUT_S,
                    check_same_thread=False,
                )
            else:
                path.parent.mkdir(parents=True, exist_ok=True)
                conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, check_same_thread=False)
                conn.execute("PRAGMA journal_mode = WAL")
                conn.execute("PRAGMA synchronous = NORMAL")
                _drop_older_layout(conn)
                conn.executescript(_SCHEMA)
        except sqlite3.OperationalError as exc:  # locked, unreadable, no space
            raise IndexError_(f"cannot open the report index {path}: {exc}") from exc
        except sqlite3.DatabaseError as exc:  # not a database (any more)
            raise CorruptIndex(f"the report index {path} is corrupt: {exc}") from exc
        except (OSError, sqlite3.Error) as exc:
            raise IndexError_(f"cannot open the report index {path}: {exc}") from exc
        conn.isolation_level = None  # transactions are explicit (index_sync, IndexedDB)
        return cls(path, conn)

    def close(self) -> None:
        self.conn.close()

    # -- meta ---------------------------------------------------------------------------------

    def meta(self) -> dict[str, str]:
        return {k: v for k, v in self.conn.execute("SELECT key, value FROM meta")}

    def set_meta(self, values: dict[str, str]) -> None:
        self.conn.executemany(
            "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", values.items()
        )

    def clear(self) -> None:
        """Forget everything (a rebuild follows)."""
        for table in _TABLES:
            self.conn.execute(f"DELETE FROM {table}")

    # -- candidates ---------------------------------------------------------------------------

    def put_candidates(self, rows: Iterable[CandidateRow]) -> None:
        self.conn.executemany(
            "INSERT OR REPLACE INTO candidate"
            " (row, id, session_id, time_created, role, parent, group_parent, data)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            rows,
        )

    def drop_candidates(self, message_ids: Sequence[str]) -> None:
        self.conn.executemany("DELETE FROM candidate WHERE id = ?", ((m,) for m in message_ids))

    def candidates(self, low: int, high: int, cut_ms: int) -> list[CandidateRow]:
        """The candidates in ``[low, high)`` created at or after ``cut_ms``, in rowid order."""
        sql = (
            "SELECT row, id, session_id, time_created, role, parent, group_parent, data"
            " FROM candidate WHERE row >= ? AND row < ? AND time_created >= ? ORDER BY row"
        )
        return self.conn.execute(sql, (low, high, cut_ms)).fetchall()

    # -- part hits ----------------------------------------------------------------------------

    def put_hits(self, table: str, hits: Iterable[tuple[int, str, str, int]]) -> None:
        assert table in ("markup", "marked"), table
        self.conn.executemany(
            f"INSERT OR REPLACE INTO {table} (row, message_id, session_id, time_created)"
            " VALUES (?, ?, ?, ?)",
            hits,
        )

    def drop_hits_of(self, message_ids: Sequence[str]) -> None:
        for table in ("markup", "marked"):
            self.conn.executemany(
                f"DELETE FROM {table} WHERE message_id = ?", ((m,) for m in message_ids)
            )

    def hit_messages(self, table: str, low: int, high: int, cut_ms: int) -> list[str]:
        """Message ids of the hits in ``[low, high)`` created at or after ``cut_ms``, by row."""
        assert table in ("markup", "marked"), table
        sql = (
            f"SELECT message_id FROM {table} WHERE row >= ? AND row < ? AND time_created >= ?"
            " ORDER BY row"
        )
        return [r[0] for r in self.conn.execute(sql, (low, high, cut_ms))]

    # -- open rows and session counters ------------------------------------------------------

    def open_rows(self) -> dict[str, tuple[str, str]]:
        """id -> (session_id, fingerprint)."""
        rows = self.conn.execute("SELECT id, session_id, fingerprint FROM open_row")
        return {mid: (sid, fp) for mid, sid, fp in rows}

    def put_open(self, rows: Iterable[tuple[str, str, str]]) -> None:
        self.conn.executemany(
            "INSERT OR REPLACE INTO open_row (id, session_id, fingerprint) VALUES (?, ?, ?)", rows
        )

    def drop_open(self, message_ids: Sequence[str]) -> None:
        self.conn.executemany("DELETE FROM open_row WHERE id = ?", ((m,) for m in message_ids))

    def bump(self, session_ids: Iterable[str]) -> None:
        """A row of each session changed: its memo entries no longer hold."""
        sessions = [(s,) for s in set(session_ids)]
        self.conn.executemany(
            "INSERT INTO session_gen (session_id, gen) VALUES (?, 1)"
            " ON CONFLICT (session_id) DO UPDATE SET gen = gen + 1",
            sessions,
        )
        self.conn.executemany("DELETE FROM memo WHERE session_id = ?", sessions)
        self.conn.executemany("DELETE FROM digest WHERE session_id = ?", sessions)
        self.conn.executemany("DELETE FROM light WHERE session_id = ?", sessions)

    def generations(self) -> dict[str, int]:
        return {s: g for s, g in self.conn.execute("SELECT session_id, gen FROM session_gen")}

    # -- memo ---------------------------------------------------------------------------------

    def memo_entries(self) -> dict[str, tuple[str, int, int, bytes]]:
        """key -> (session_id, gen, valid_from, blob)."""
        rows = self.conn.execute("SELECT key, session_id, gen, valid_from, blob FROM memo")
        return {k: (s, g, v, b) for k, s, g, v, b in rows}

    def memo_for(self, keys: Sequence[str]) -> dict[str, tuple[str, int, int, bytes]]:
        """The entries of ``keys`` (those remembered), as ``memo_entries``."""
        found: dict[str, tuple[str, int, int, bytes]] = {}
        for start in range(0, len(keys), _IN_CHUNK):
            chunk = keys[start : start + _IN_CHUNK]
            sql = (
                "SELECT key, session_id, gen, valid_from, blob FROM memo"
                f" WHERE key IN ({','.join('?' * len(chunk))})"
            )
            found.update((k, (s, g, v, b)) for k, s, g, v, b in self.conn.execute(sql, chunk))
        return found

    def memo_under(self, prefix: str) -> dict[str, tuple[str, int, int, bytes]]:
        """The entries whose key starts with ``prefix`` (a range of the primary key)."""
        sql = "SELECT key, session_id, gen, valid_from, blob FROM memo WHERE key >= ? AND key < ?"
        rows = self.conn.execute(sql, (prefix, prefix[:-1] + chr(ord(prefix[-1]) + 1)))
        return {k: (s, g, v, b) for k, s, g, v, b in rows}

    def put_memo(self, entries: Iterable[tuple[str, str, int, int, bytes]]) -> None:
        self.conn.executemany(
            "INSERT OR REPLACE INTO memo (key, session_id, gen, valid_from, blob)"
            " VALUES (?, ?, ?, ?, ?)",
            entries,
        )

    def memo_count(self) -> int:
        return int(self.conn.execute("SELECT count(*) FROM memo").fetchone()[0])

    def drop_memo(self) -> None:
        self.conn.execute("DELETE FROM memo")
        self.conn.execute("DELETE FROM digest")
        self.conn.execute("DELETE FROM light")
        self.conn.execute("DELETE FROM fold")

    # -- digests (session_digest.py) ---------------------------------------------------------

    def digest_heads(
        self, flags: str, sessions: Sequence[str] | None = None
    ) -> dict[str, tuple[int, int, bytes]]:
        """session_id -> (gen, valid_from, tally) of the digests made with ``flags``, of
        ``sessions`` (None: all, in the index's order)."""
        if sessions is None:
            sql = "SELECT session_id, gen, valid_from, tally FROM digest WHERE flags = ?"
            rows: Iterable[tuple[str, int, int, bytes]] = self.conn.execute(sql, (flags,))
        else:
            rows = self._digest_rows("gen, valid_from, tally", flags, sessions)
        return {s: (g, v, t) for s, g, v, t in rows}

    def put_digests(self, entries: Iterable[Digest]) -> None:
        """Each session's digest: its row and its grouped rows in ``light``."""
        for sid, flags, gen, valid_from, blob, heavy, tally, grouped in entries:
            self.conn.execute("DELETE FROM light WHERE session_id = ? AND flags = ?", (sid, flags))
            self.conn.execute(
                "INSERT OR REPLACE INTO digest"
                " (session_id, flags, gen, valid_from, blob, heavy, tally)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                (sid, flags, gen, valid_from, blob, heavy, tally),
            )
            self.conn.executemany(
                "INSERT INTO light (flags, kind, extra, at, id, session_id, pos)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                ((flags, kind, extra, at, mid, sid, pos) for kind, extra, at, mid, pos in grouped),
            )

    def kept_fold(self, flags: str) -> bytes | None:
        """The all-time window's digests summed (light_fold.py), as last kept (None: none, or
        an index made before the table)."""
        try:
            row = self.conn.execute("SELECT blob FROM fold WHERE flags = ?", (flags,)).fetchone()
        except sqlite3.OperationalError:
            return None
        return None if row is None else bytes(row[0])

    def put_folds(self, folds: Mapping[str, bytes]) -> None:
        sql = "INSERT OR REPLACE INTO fold (flags, blob) VALUES (?, ?)"
        self.conn.executemany(sql, folds.items())

    def digest_rows(self, flags: str, sessions: Sequence[str]) -> dict[str, bytes]:
        """The light rows part of these sessions' digests."""
        return self._digest_column("blob", flags, sessions)

    def light_in_order(
        self, flags: str, kind: str, newest_first: bool
    ) -> Iterator[tuple[int, int, str, str, int]]:
        """(extra, at, id, session_id, pos) of a kind's grouped rows, in diagnose's order."""
        way = "DESC" if newest_first else "ASC"
        sql = (
            "SELECT extra, at, id, session_id, pos FROM light WHERE flags = ? AND kind = ?"
            f" ORDER BY extra {way}, at {way}, id {way}"
        )
        return iter(self.conn.execute(sql, (flags, kind)))

    def digest_objects(self, flags: str, sessions: Sequence[str]) -> dict[str, bytes]:
        """The objects part of these sessions' digests (read only for the rows printed)."""
        return self._digest_column("heavy", flags, sessions)

    def _digest_column(self, column: str, flags: str, sessions: Sequence[str]) -> dict[str, bytes]:
        assert column in ("blob", "heavy"), column
        return dict(self._digest_rows(column, flags, sessions))

    def _digest_rows(self, columns: str, flags: str, sessions: Sequence[str]) -> list[Any]:
        """(session_id, *columns) of these sessions' digests (one query per 500)."""
        found: list[Any] = []
        for start in range(0, len(sessions), _IN_CHUNK):
            chunk = sessions[start : start + _IN_CHUNK]
            sql = (
                f"SELECT session_id, {columns} FROM digest WHERE flags = ?"
                f" AND session_id IN ({','.join('?' * len(chunk))})"
            )
            found += self.conn.execute(sql, (flags, *chunk))
        return found

    def sessions_in(self, table: str, low: int, high: int, cut_ms: int) -> set[str]:
        """Sessions with a row of ``table`` (candidate, markup) in ``[low, high)`` since the cut."""
        assert table in ("candidate", "markup"), table
        if cut_ms <= 0:  # the whole index: its (session_id, row) index, read in order (~4x)
            sql = (
                f"SELECT DISTINCT session_id FROM {table} INDEXED BY {table}_session"
                " WHERE row >= ? AND row < ?"
            )
            return {r[0] for r in self.conn.execute(sql, (low, high))}
        sql = (
            f"SELECT DISTINCT session_id FROM {table}"
            " WHERE row >= ? AND row < ? AND time_created >= ?"
        )
        return {r[0] for r in self.conn.execute(sql, (low, high, cut_ms))}

    def candidates_of(
        self, sessions: Sequence[str], low: int, high: int, cut_ms: int
    ) -> list[CandidateRow]:
        """``candidates`` of these sessions only, in rowid order."""
        found: list[CandidateRow] = []
        for start in range(0, len(sessions), _IN_CHUNK):
            chunk = sessions[start : start + _IN_CHUNK]
            sql = (
                "SELECT row, id, session_id, time_created, role, parent, group_parent, data"
                f" FROM candidate WHERE session_id IN ({','.join('?' * len(chunk))})"
                " AND row >= ? AND row < ? AND time_created >= ?"
            )
            found += self.conn.execute(sql, (*chunk, low, high, cut_ms)).fetchall()
        found.sort()
        return found

    def hits_of(
        self, table: str, sessions: Sequence[str], low: int, high: int, cut_ms: int
    ) -> list[tuple[int, str, str, int]]:
        """(row, message_id, session_id, time_created) of these sessions' hits, by row."""
        assert table in ("markup", "marked"), table
        found: list[tuple[int, str, str, int]] = []
        for start in range(0, len(sessions), _IN_CHUNK):
            chunk = sessions[start : start + _IN_CHUNK]
            sql = (
                f"SELECT row, message_id, session_id, time_created FROM {table}"
                f" WHERE session_id IN ({','.join('?' * len(chunk))})"
                " AND row >= ? AND row < ? AND time_created >= ?"
            )
            found += self.conn.execute(sql, (*chunk, low, high, cut_ms)).fetchall()
        found.sort()
        return found
