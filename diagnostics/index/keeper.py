"""Keeps the report index current in the background while the daemon runs.

A worker thread of its own (the loop is single-threaded and never waits for it), with its own
connections: every ``INTERVAL_S`` it brings the index up to date (diagnostics/index/report_index.py)
and, when anything changed, builds ``diagnose 0`` and ``trace 0`` once on it, which leaves
every settled classification in the index's memo, so a user's first report is already a fast
one. It writes only the index file (its own writer, never the daemon's store) and reads
OpenCode's DB read-only. A failure is logged once and retried at the next round; reports work
the same without it (they sync the index themselves).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

log = logging.getLogger("opencode_autoretry.daemon.index")

#: Seconds between two rounds (a report syncs what happened since by itself).
INTERVAL_S = 60.0


class IndexKeeper:
    def __init__(
        self,
        db_path: Path,
        state_dir: Path,
        now: Callable[[], datetime],
        runaway_steps: int = 6,
        interval: float = INTERVAL_S,
    ) -> None:
        self.db_path, self.state_dir, self.now = db_path, state_dir, now
        self.runaway_steps, self.interval = runaway_steps, interval
        self.rounds = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failing = False

    def start(self) -> IndexKeeper:
        self._thread = threading.Thread(target=self._run, name="report-index", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 1.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.round()
            self._stop.wait(self.interval)

    def round(self) -> None:
        """One update of the index (and of its memo when anything changed)."""
        from opencode_autoretry.diagnostics.index.step_index import IndexError_
        from opencode_autoretry.opencode.dbtypes import DbError

        try:
            changed = self._locked_update()
        except (DbError, IndexError_, OSError) as exc:
            if not self._failing:
                log.warning("report index not updated: %s (retrying every %.0fs)", exc,
                            self.interval)
            self._failing = True
            return
        except Exception:  # never let the thread die: the daemon outlives its helpers
            log.exception("report index: unexpected failure")
            return
        if self._failing:
            log.info("report index updated again")
        self._failing = False
        self.rounds += 1
        if changed:
            log.debug("report index updated (round %d)", self.rounds)

    def _locked_update(self) -> bool:
        """``_update`` under the build lock; nothing (False) while another process builds."""
        from opencode_autoretry.diagnostics.index.build_lock import build_lock
        from opencode_autoretry.diagnostics.index.step_index import index_file

        with build_lock(index_file(self.state_dir, self.db_path)) as mine:
            return self._update() if mine else False

    def _update(self) -> bool:
        import sqlite3

        from opencode_autoretry.diagnostics.index.indexed_db import GroupMemo, IndexedDB
        from opencode_autoretry.diagnostics.index.report_index import refresh
        from opencode_autoretry.diagnostics.index.step_index import IndexError_

        try:
            file, result = refresh(self.db_path, self.state_dir)
            if self.rounds and not (result.rebuilt or result.new_messages or result.new_parts
                                    or result.reopened):
                return False
            memo = GroupMemo(file)
            self._warm(IndexedDB.bound(file), memo)
            memo.flush()
        except sqlite3.Error as exc:
            raise IndexError_(str(exc)) from exc
        return True

    def _warm(self, reader: type, memo: object) -> None:
        """Build the reports once on the index, so their classifications are remembered."""
        from pathlib import Path as _Path

        from opencode_autoretry.diagnostics.diagnose import build_diagnose
        from opencode_autoretry.diagnostics.index.indexed_db import GroupMemo, IndexedDB
        from opencode_autoretry.diagnostics.records import DaemonRecords
        from opencode_autoretry.diagnostics.trace.report import build_trace

        assert issubclass(reader, IndexedDB) and isinstance(memo, GroupMemo)
        db = reader.open(self.db_path)
        try:
            now = self.now()
            build_diagnose(db, DaemonRecords(), now=now, days=0, bridge_path=_Path("/dev/null"),
                           runaway_steps=self.runaway_steps, memo=memo)
            build_trace(db, DaemonRecords(), now=now, memo=memo, rendered=True)  # for --json
        finally:
            db.close()
