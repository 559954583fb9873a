"""The report index, end to end: open it, bring it up to date, hand the reports a reader.

``prepare`` syncs the index of one OpenCode DB (index_sync.py) and returns the class the
report opens OpenCode's DB with (``IndexedDB`` bound to that index) and the memo of
classifications. Any failure of the index itself (unwritable state dir, a corrupt file, a full
disk) is told in one line on stderr and answered with None: the report then scans as it did
without an index, so it is never wrong nor stopped because of it. A corrupt index file is
deleted and built again once. The daemon calls ``refresh`` from its own thread.
"""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from opencode_autoretry.diagnostics.index.indexed_db import GroupMemo, IndexedDB
from opencode_autoretry.diagnostics.index.step_index import (
    CorruptIndex,
    IndexError_,
    StepIndex,
    index_file,
)
from opencode_autoretry.diagnostics.index.sync import SyncResult, sync
from opencode_autoretry.opencode.dbtypes import DbError
from opencode_autoretry.opencode.index_source import IndexSource

Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class IndexedReports:
    """The report index, synced, and what a report reads through it."""

    reader: type[IndexedDB]
    memo: GroupMemo
    file: Path
    sync: SyncResult


def refresh(
    db_path: Path, state_dir: Path, *, progress: Progress | None = None, rebuild: bool = False
) -> tuple[Path, SyncResult]:
    """Bring the index of ``db_path`` up to date (raises ``IndexError_``/``DbError``)."""
    file = index_file(state_dir, db_path)
    for attempt in (1, 2):
        try:
            return file, _sync_file(file, db_path, progress, rebuild)
        except (sqlite3.DatabaseError, CorruptIndex) as exc:  # a corrupt file: start again once
            if attempt == 2 or isinstance(exc, sqlite3.OperationalError):
                raise IndexError_(f"report index {file}: {exc}") from exc
            _remove(file)
    raise AssertionError("unreachable")


def _sync_file(file: Path, db_path: Path, progress: Progress | None, rebuild: bool) -> SyncResult:
    index = StepIndex.open(file)
    try:
        source = IndexSource.open(db_path)
        try:
            return sync(index, source, progress=progress, rebuild=rebuild)
        finally:
            source.close()
    finally:
        index.close()


def _remove(file: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        file.with_name(file.name + suffix).unlink(missing_ok=True)


def prepare(
    db_path: Path, state_dir: Path, *, progress: Progress | None = None, rebuild: bool = False
) -> IndexedReports | None:
    """The index, up to date, for one report run; None (and a line on stderr) if unusable."""
    try:
        file, result = refresh(db_path, state_dir, progress=progress, rebuild=rebuild)
        return IndexedReports(IndexedDB.bound(file), GroupMemo(file), file, result)
    except DbError:
        return None  # OpenCode's DB itself: the report opens it and says what is wrong
    except (IndexError_, OSError, sqlite3.Error) as exc:
        print(f"autoretry: report index not used ({exc}); scanning instead", file=sys.stderr)
        return None


def save(prepared: IndexedReports | None) -> None:
    """Keep what the report learnt (best effort: the next run recomputes it otherwise)."""
    if prepared is None:
        return
    try:
        prepared.memo.flush()
    except (IndexError_, OSError, sqlite3.Error) as exc:
        print(f"autoretry: report index not updated ({exc})", file=sys.stderr)
