"""The loop's connection to OpenCode's DB, kept usable when the DB is locked, deleted, replaced
by a corrupt file or unreadable.

A read that fails closes the connection and marks the DB down (one log line, shown by
``autoretry status``); the loop goes on without it, and the guard re-opens it at most once per
``RETRY_EVERY``. A deleted or replaced file is noticed by its identity (device, inode): an open
connection would keep reading the old file forever. When the DB is back, ``on_lost`` has already
told the gap review when it was lost, so the turns that ended meanwhile are judged.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path

from opencode_autoretry.daemon.parts import OPENCODE_DB, PartHealth
from opencode_autoretry.opencode.daemon_reads import DaemonReads
from opencode_autoretry.opencode.dbtypes import DbError, DbMissing

log = logging.getLogger(__name__)

RETRY_EVERY = timedelta(seconds=1)


def file_identity(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


class DbGuard:
    def __init__(
        self,
        path: Path,
        open_db: Callable[[], DaemonReads],
        parts: PartHealth,
        clock: Callable[[], datetime],
        on_lost: Callable[[datetime], None],
    ) -> None:
        self._path = path
        self._open_db = open_db
        self._parts = parts
        self._clock = clock
        self._on_lost = on_lost
        self._db: DaemonReads | None = None
        self._identity: tuple[int, int] | None = None
        self._last_try: datetime | None = None
        self._ever_open = False

    def get(self) -> DaemonReads | None:
        """The open connection, or a fresh one when it is time to try again; None if down."""
        if self._db is not None:
            return self._db
        now = self._clock()
        if self._last_try is not None and now - self._last_try < RETRY_EVERY:
            return None
        self._last_try = now
        try:
            db = self._open_db()
        except DbError as exc:
            self._down(exc, now)
            return None
        self._db, self._identity, self._ever_open = db, file_identity(self._path), True
        self._parts.ok(OPENCODE_DB, now)
        return db

    def failed(self, exc: BaseException, now: datetime) -> None:
        """A read through the connection failed (locked, corrupt, gone): drop it."""
        self._close()
        self._down(exc, now)

    def check(self, now: datetime) -> None:
        """Per tick: a DB file deleted or replaced under the open connection; a DB that is
        down is tried again (so its coming back is seen without waiting for an event)."""
        if self._db is None:
            self.get()
            return
        identity = file_identity(self._path)
        if identity == self._identity:
            return
        self._close()
        if identity is None:
            self._down(DbMissing(self._path), now)
        else:
            log.info("OpenCode's DB %s was replaced; re-opening it", self._path)
            self._on_lost(now)  # what was written to the new file before we look is a gap

    def _down(self, exc: BaseException, now: datetime) -> None:
        if isinstance(exc, DbMissing) and not self._ever_open:
            log.debug("OpenCode DB not available yet: %s", exc)  # a fresh machine: no news
        else:
            self._parts.fail(OPENCODE_DB, str(exc), now)
        self._on_lost(now)

    def _close(self) -> None:
        if self._db is not None:
            try:
                self._db.close()
            except Exception:  # closing a broken connection must not stop the loop
                log.debug("closing OpenCode's DB failed", exc_info=True)
        self._db = None
        self._last_try = None
