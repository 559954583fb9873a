"""The DB tailer: a producer thread that reads only what is new in OpenCode's DB.

It keeps one cursor, the last message id, so the cost of a read depends on what changed,
never on the size of the DB. OpenCode's durable ``event`` table is not read: the loop has no
use for it (1.18 leaves it empty for v1 sessions; the bridges stream the events). It reads
when woken (the -wal watcher: on Linux this thread polls its inotify fd itself, see
``wakeup``) or, if the file system stays silent, every ``poll_interval`` seconds; what it
reads goes into the inbox as one ``DbRows`` item. It never decides anything.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import sqlite3
import threading
from collections.abc import Callable, Sequence
from typing import Protocol

from opencode_autoretry.daemon.inbox import DbRows
from opencode_autoretry.daemon.intake.db_guard import file_identity
from opencode_autoretry.daemon.intake.wakeup import Wakeup
from opencode_autoretry.models import Message, Role
from opencode_autoretry.opencode.dbtypes import DbError

log = logging.getLogger(__name__)

BATCH = 500


class TailReader(Protocol):
    """The part of ``opencode.db.OpenCodeDB`` the tailer needs."""

    def max_message_id(self) -> str | None: ...
    def messages_after(self, message_id: str | None, limit: int) -> Sequence[Message]: ...


class DbTailer:
    def __init__(
        self,
        open_reader: Callable[[], TailReader],
        inbox: queue.Queue[object],
        poll_interval: float,
        batch: int = BATCH,
    ) -> None:
        self._open_reader = open_reader
        self._inbox = inbox
        self._poll_interval = poll_interval
        self._batch = batch
        self._reader: TailReader | None = None
        self._reader_thread: int | None = None
        self._identity: tuple[int, int] | None = None
        self._primed = False
        self._message_id: str | None = None
        self._wakeup = Wakeup()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def wakeup(self) -> Wakeup:
        """What the tailer's thread sleeps on; the -wal watcher attaches its fd to it."""
        return self._wakeup

    def wake(self) -> None:
        self._wakeup.wake()

    def prime(self) -> bool:
        """Start the cursor at the DB's current end (history is the loop's rebuild's job).
        False when the DB cannot be opened yet; a later read retries."""
        if self._primed:
            return True
        reader = self._reader_here()
        if reader is None:
            return False
        try:
            self._message_id = reader.max_message_id()
        except (sqlite3.Error, DbError) as exc:
            log.debug("OpenCode DB not readable yet: %s", exc)
            return False
        self._primed = True
        return True

    def _reader_here(self) -> TailReader | None:
        """A reader opened in the calling thread (sqlite connections stay in their thread)."""
        thread = threading.get_ident()
        if self._reader is None or self._reader_thread != thread:
            try:
                self._reader = self._open_reader()
            except (OSError, sqlite3.Error, DbError) as exc:
                log.debug("OpenCode DB not readable yet: %s", exc)
                return None
            self._reader_thread = thread
            path = getattr(self._reader, "path", None)
            self._identity = file_identity(path) if path is not None else None
        return self._reader

    def _follow_replacement(self) -> None:
        """A deleted or replaced DB file: the old connection would read the old file forever,
        and the cursor belongs to it. Start over at the new file's end (the loop's gap review
        judges what was written before we looked)."""
        path = getattr(self._reader, "path", None)
        if path is None or file_identity(path) == self._identity:
            return
        log.info("OpenCode's DB %s was replaced or removed; following the new file", path)
        with contextlib.suppress(Exception):
            self._reader.close()  # type: ignore[union-attr]
        self._reader, self._primed = None, False

    def read_new(self) -> DbRows | None:
        """Read every message after the cursor, enqueue them as one item and return it."""
        self._follow_replacement()
        reader = self._reader_here() if self.prime() else None
        if reader is None:
            return None
        try:
            messages = self._drain_messages(reader)
        except (sqlite3.Error, DbError) as exc:  # a busy or rotated DB: the next wake reads again
            log.warning("reading OpenCode's DB failed: %s", exc)
            return None
        if not messages:
            return None
        rows = DbRows(messages=tuple(messages))
        self._inbox.put(rows)
        return rows

    def _drain_messages(self, reader: TailReader) -> list[Message]:
        found: list[Message] = []
        while True:
            batch = list(reader.messages_after(self._message_id, self._batch))
            if not batch:
                return found
            self._message_id = batch[-1].id
            found.extend(batch)
            if len(batch) < self._batch:
                return found

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="db-tailer", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wakeup.wake()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
        self._wakeup.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wakeup.wait(self._poll_interval)
            if self._stop.is_set():
                return
            self.read_new()


class UnownedWatch:
    """Failed turns of sessions no bridge reports, seen through the DB alone.

    OpenCode 1.18 leaves the durable ``event`` table empty for v1 sessions, so an assistant
    row's later error or finish is not a new row. The tailer hands over each new assistant
    row; the unfinished ones of unowned sessions are re-read by primary key until they finish,
    so the cost follows the number of steps in flight, never the size of the DB.
    """

    LIMIT = 256

    def __init__(self) -> None:
        self._unfinished: dict[str, str] = {}  # message id -> session id

    def __len__(self) -> int:
        return len(self._unfinished)

    def on_rows(self, rows: DbRows, owned: Callable[[str], bool]) -> set[str]:
        """Sessions to judge now; unfinished steps are remembered for ``recheck``."""
        due: set[str] = set()
        for message in rows.messages:
            if message.role is not Role.ASSISTANT or owned(message.session_id):
                continue
            if _finished(message):
                due.add(message.session_id)
            else:
                self._unfinished[message.id] = message.session_id
        while len(self._unfinished) > self.LIMIT:
            self._unfinished.pop(next(iter(self._unfinished)))
        return due

    def recheck(self, reader: MessageReader, owned: Callable[[str], bool]) -> set[str]:
        due: set[str] = set()
        for message_id, session_id in list(self._unfinished.items()):
            message = reader.message(message_id)
            if message is None or owned(session_id):
                self._unfinished.pop(message_id, None)
            elif _finished(message):
                self._unfinished.pop(message_id, None)
                due.add(session_id)
        return due


class MessageReader(Protocol):
    def message(self, message_id: str) -> Message | None: ...


def _finished(message: Message) -> bool:
    return message.error is not None or message.time_completed is not None
