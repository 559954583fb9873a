"""Bring the report index (step_index.py) up to date with OpenCode's DB, from where it stopped.

What changes in OpenCode's DB, and how a sync sees it (reference §2.4, §3.3):

- new rows: ``message`` and ``part`` are rowid tables appended in creation order, so the rows
  above the last watermark are the new ones (a rowid range, no scan);
- rows updated later: an assistant step's row is written when the step starts and updated
  until it ends (``finish``, ``tokens``, then ``time.completed``), its parts while it streams.
  Such a row is *open* until it has ``time.completed``; each sync compares the fingerprint of
  every open row and its parts and re-reads the changed ones. A new part on an older message
  is a new row (above the part watermark). What the sync trusts: a step with
  ``time.completed`` is never rewritten, nor are its parts;
- deleted rows (a session deleted, a revert): the row counts fall below the last count plus
  the new rows: rebuild;
- a VACUUM may renumber rowids: the id at each watermark rowid is kept and checked: rebuild;
- another file (replaced, restored): its device or inode differ: rebuild.

Every change bumps its session's counter, which voids that session's memoised results. The
full build scans like ``diagnose 0`` (2 worker threads, rowid ranges, ``progress`` told as
each range is read); the sync runs in one read transaction (a WAL snapshot) of OpenCode's DB
and one write transaction of the index, so two syncs (a report and the daemon) serialise.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from opencode_autoretry.diagnostics.index.step_index import INDEX_VERSION, CandidateRow, StepIndex
from opencode_autoretry.opencode.dbtypes import MessageRow
from opencode_autoretry.opencode.index_source import IndexSource, OpenRow, PartHit
from opencode_autoretry.opencode.shapes import parse_message

#: Rows per range of the full build (the same sizes as diagnose's scan).
MESSAGE_RANGE = 50_000
PART_RANGE = 250_000
WORKERS = 2
Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class SyncResult:
    rebuilt: str | None  # why the index was rebuilt (None: brought up to date)
    new_messages: int
    new_parts: int
    reopened: int  # open rows that changed and were read again
    seconds: float


def _identity(path: Path) -> tuple[str, str]:
    stat = os.stat(path)
    return str(stat.st_dev), str(stat.st_ino)


def stale_reason(meta: dict[str, str], db: IndexSource, counts: dict[str, int]) -> str | None:
    """Why the index cannot be brought up to date incrementally (None: it can)."""
    if meta.get("version") != INDEX_VERSION:
        return "new index" if not meta else "index format changed"
    if meta.get("db_path") != str(db.path.resolve()):
        return "another database path"
    if (meta.get("dev"), meta.get("ino")) != _identity(db.path):
        return "the database file was replaced"
    for table in ("message", "part"):
        rowid = int(meta[f"{table}_rowid"])
        if rowid and db.id_at(table, rowid) != meta[f"{table}_id"]:
            return f"the {table} rows were renumbered (VACUUM) or deleted"
        if counts[table] != int(meta[f"{table}_count"]) + db.count_after(table, rowid):
            return f"{table} rows were deleted"
    return None


#: The files must have been left alone this long before the last sync for a sync to trust
#: that unchanged sizes and modification times mean unchanged contents (see ``untouched``).
QUIET_NS = 2_000_000_000  # 2 s: file systems that keep mtimes to 1 or 2 s (FAT) too


def files_signature(path: Path) -> str:
    """Size and modification time (ns) of the DB file and of its write-ahead log."""
    parts = []
    for file in (path, path.with_name(path.name + "-wal")):
        try:
            stat = os.stat(file)
            parts.append(f"{stat.st_size}:{stat.st_mtime_ns}")
        except FileNotFoundError:
            parts.append("-")
    return " ".join(parts)


def _newest_mtime_ns(signature: str) -> int:
    return max((int(p.split(":")[1]) for p in signature.split() if p != "-"), default=0)


def untouched(meta: dict[str, str], db: IndexSource, signature: str) -> bool:
    """Whether nothing was written to OpenCode's DB since the last sync, so the index is
    up to date as it is (no count, no write). Exact when the files had been quiet for
    ``QUIET_NS`` when the last sync looked at them (``files_at``, taken *before* its read
    snapshot): any later commit writes the DB or its WAL (SQLite writes with ``write``, not
    through a mapping), and the kernel then stamps a modification time after that moment
    (its coarse clock lags by a tick; a file system may round it to 2 s), so the signature
    differs. A recent write, another file, or another index version: no."""
    if meta.get("version") != INDEX_VERSION or meta.get("files") != signature:
        return False
    if meta.get("db_path") != str(db.path.resolve()):
        return False
    if (meta.get("dev"), meta.get("ino")) != _identity(db.path):
        return False
    seen_at = int(meta.get("files_at") or 0)
    return seen_at - _newest_mtime_ns(signature) >= QUIET_NS


def sync(
    index: StepIndex, db: IndexSource, *, progress: Progress | None = None, rebuild: bool = False
) -> SyncResult:
    """Update ``index`` from ``db`` (``rebuild``: from scratch, whatever it holds)."""
    started = time.perf_counter()
    signature, seen_at = files_signature(db.path), time.time_ns()  # before the snapshot
    if not rebuild and untouched(index.meta(), db, signature):
        return SyncResult(None, 0, 0, 0, time.perf_counter() - started)
    index.conn.execute("BEGIN IMMEDIATE")  # one writer at a time (a report, the daemon)
    try:
        db.begin()
        try:
            meta = index.meta()
            marks = {t: db.max_rowid(t) for t in ("message", "part")}
            counts = {t: db.count(t) for t in ("message", "part")}  # one scan each: once
            reason = "asked" if rebuild else stale_reason(meta, db, counts)
            if reason is not None:
                index.clear()
                news = _build(index, db, marks, progress)
            else:
                news = _catch_up(index, db, meta, marks)
            reopened = _reread_open(index, db)
            files = {"files": signature, "files_at": str(seen_at)}
            index.set_meta(_meta(db, marks, counts) | files)
        finally:
            db.end()
        index.conn.execute("COMMIT")
    except BaseException:
        if index.conn.in_transaction:
            index.conn.execute("ROLLBACK")
        raise
    return SyncResult(reason, news[0], news[1], reopened, time.perf_counter() - started)


def _meta(db: IndexSource, marks: dict[str, int], counts: dict[str, int]) -> dict[str, str]:
    dev, ino = _identity(db.path)
    meta = {"version": INDEX_VERSION, "db_path": str(db.path.resolve()), "dev": dev, "ino": ino}
    for table, rowid in marks.items():
        meta[f"{table}_rowid"] = str(rowid)
        meta[f"{table}_id"] = db.id_at(table, rowid) or "" if rowid else ""
        meta[f"{table}_count"] = str(counts[table])  # the same snapshot: none above ``rowid``
    return meta


def _put_candidates(index: StepIndex, rows: Iterable[tuple[int, MessageRow]]) -> None:
    index.put_candidates(candidate_row(rowid, r) for rowid, r in rows)


def candidate_row(rowid: int, row: MessageRow) -> CandidateRow:
    """What the index keeps of a candidate: enough to group it without parsing its JSON."""
    role = row.data.get("role")
    parent = parse_message(row.id, row.session_id, row.time_created, row.data, ()).parent_id
    return (
        rowid,
        row.id,
        row.session_id,
        row.time_created,
        role if isinstance(role, str) else "",
        str(row.data.get("parentID") or ""),  # diagnose's streaming groups (steps.py)
        parent or "",  # classify_rows' groups
        json.dumps(row.data),
    )


def _hit_tuples(hits: Iterable[PartHit]) -> list[tuple[int, str, str, int]]:
    return [(h.rowid, h.message_id, h.session_id, h.time_created) for h in hits]


@dataclass(frozen=True)
class _Range:
    """What one worker read of a rowid range of the full build."""

    candidates: list[tuple[int, MessageRow]]
    open_rows: list[OpenRow]
    markup: list[PartHit]
    marked: list[PartHit]


def _scan_messages(db: IndexSource, low: int, high: int) -> _Range:
    return _Range(db.candidates_in(low, high), db.open_rows(low, high), [], [])


def _scan_parts(db: IndexSource, low: int, high: int) -> _Range:
    return _Range([], [], db.markup_parts(low, high), db.marked_parts(low, high))


def _store(index: StepIndex, found: _Range) -> None:
    _put_candidates(index, found.candidates)
    index.put_open((o.id, o.session_id, "") for o in found.open_rows)  # "": read again
    index.put_hits("markup", _hit_tuples(found.markup))
    index.put_hits("marked", _hit_tuples(found.marked))


def _ranges(high: int, size: int) -> list[tuple[int, int]]:
    return [(low, min(low + size, high + 1)) for low in range(0, high + 1, size)]


def _in_worker(
    path: Path, scan: Callable[[IndexSource, int, int], _Range], low: int, high: int
) -> _Range:
    db = IndexSource.open(path)
    try:
        return scan(db, low, high)
    finally:
        db.close()


def _build(
    index: StepIndex, db: IndexSource, marks: dict[str, int], progress: Progress | None
) -> tuple[int, int]:
    """Scan every row up to the watermarks (rows added meanwhile are the next sync's)."""
    # Imported here: a report on an index already built (most runs) never needs the threads
    # (concurrent.futures brings logging: ~8 ms of a ~250 ms report).
    from concurrent.futures import ThreadPoolExecutor

    Scan = Callable[[IndexSource, int, int], _Range]
    jobs: list[tuple[Scan, int, int]] = [
        (cast(Scan, _scan_messages), low, high)
        for low, high in _ranges(marks["message"], MESSAGE_RANGE)
    ] + [(_scan_parts, low, high) for low, high in _ranges(marks["part"], PART_RANGE)]
    with ThreadPoolExecutor(max_workers=WORKERS) as pool:
        futures = [pool.submit(_in_worker, db.path, scan, low, high) for scan, low, high in jobs]
        for done, future in enumerate(futures, 1):
            _store(index, future.result())
            if progress is not None:
                progress(done, len(futures))
    return marks["message"], marks["part"]


def _catch_up(
    index: StepIndex, db: IndexSource, meta: dict[str, str], marks: dict[str, int]
) -> tuple[int, int]:
    """The rows above the last watermarks, and the sessions they belong to."""
    seen = {t: int(meta[f"{t}_rowid"]) for t in ("message", "part")}
    touched: set[str] = set()
    if marks["message"] > seen["message"]:
        found = _scan_messages(db, seen["message"] + 1, marks["message"] + 1)
        _store(index, found)
        touched |= db.sessions_after("message", seen["message"])
    if marks["part"] > seen["part"]:
        found = _scan_parts(db, seen["part"] + 1, marks["part"] + 1)
        _store(index, found)
        touched |= db.sessions_after("part", seen["part"])
    index.bump(touched)
    return marks["message"] - seen["message"], marks["part"] - seen["part"]


def _reread_open(index: StepIndex, db: IndexSource) -> int:
    """Read again the open rows that changed since their fingerprint: their candidacy,
    their parts' hits; drop those that ended (or vanished). The fingerprint is taken before
    the reads, so a change made meanwhile shows at the next sync."""
    known = index.open_rows()
    if not known:
        return 0
    now = db.fingerprints(list(known))
    changed = [mid for mid, (_, fp) in known.items() if now.get(mid) != fp]
    if not changed:
        return 0
    _reclassify(index, db, changed)
    still = db.still_open(changed)
    index.drop_open([m for m in changed if m not in still])
    index.put_open((m, known[m][0], now[m]) for m in changed if m in still and m in now)
    index.bump(known[m][0] for m in changed)
    return len(changed)


def _reclassify(index: StepIndex, db: IndexSource, message_ids: Sequence[str]) -> None:
    index.drop_candidates(message_ids)
    _put_candidates(index, db.candidates_among(message_ids))
    index.drop_hits_of(message_ids)
    markup, marked = db.part_hits_of(message_ids)
    index.put_hits("markup", _hit_tuples(markup))
    index.put_hits("marked", _hit_tuples(marked))
