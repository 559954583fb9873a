"""When a read after a write to OpenCode's -wal file sees that write's commit.

A file event comes with the writer's first frame, before the commit is readable: SQLite
publishes a commit in the -shm index (its header's last valid frame) after the last frame's
``write()``, and no file event marks that. A read in between misses the commit, and nothing
wakes the tailer again until OpenCode's next write (or the 60 s poll). watchdog's three threads
used to delay the read by about a millisecond, which mostly hid this; read at once, a loaded
machine missed 2-3 % of commits (a bench of a writer process beside two busy cores). And
OpenCode writes a commit as tens of frames ~35 us apart over 1-5 ms: a thread that drains the
events as they come wakes once per frame.

``CommitProbe`` looks at what the index publishes (its last frame and the WAL's salts) and
whether a commit is being published: a frame of the current WAL generation (its salts those
of the index header) right after the last published one, or the header's two copies
differing (https://www.sqlite.org/walformat.html). ``CommitGate`` answers an event at once
when no commit is being published; else it checks again every millisecond, without waking
for the frames in between, and answers as soon as the commit is out, or as soon as another
commit was published since its last answer (one made before must not wait for the next).
(SQLite's write lock would not do: OpenCode holds it between its commits too.)
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

RETRY_S = 0.001  # how often a commit being published is checked again
BACKOFF_AFTER_S = 0.01  # no event for this long while frames stay unpublished: back off ...
BACKOFF_MAX_S = 0.05  # ... to at most this period
GIVE_UP_S = 1.0  # frames unpublished this long (a transaction rolled back): read, stop waiting

# The -shm file starts with two copies of the index header (48 bytes each, native byte order):
# szPage u16 at 14 (1 means 65536), mxFrame u32 at 16 (the last valid frame), the WAL's two
# salts at 32 (8 bytes as in the -wal file). A -wal frame: a 24-byte header (page number u32,
# big-endian, at 0; the salts at 8) and a page; the file has a 32-byte header first.
INDEX_HEADER = 48
WAL_HEADER = 32
FRAME_HEADER = 24
_PAGE_SIZE = struct.Struct("=H")
_MAX_FRAME = struct.Struct("=I")
_PAGE_NUMBER = struct.Struct(">I")

Published = bytes  # the index header's last frame and salts: changes with every commit


class CommitProbe:
    """What the WAL index of one DB publishes, and whether a commit is being published.

    It reads through fds it keeps open. For the -shm file that matters: closing any fd of a
    file drops every POSIX lock this process holds on it, among them those of the daemon's
    own SQLite connections to that DB. So it is closed only when a new -shm file was created
    (``forget_shm``: the connections follow the new DB; the watch sees the name) and by
    ``close`` at the end. (SQLite locks nothing in the -wal file.)
    """

    def __init__(self, db_path: Path) -> None:
        self.shm_path = db_path.with_name(f"{db_path.name}-shm")
        self.wal_path = db_path.with_name(f"{db_path.name}-wal")
        self._shm: int | None = None
        self._wal: int | None = None

    def look(self) -> tuple[Published | None, bool]:
        """(what is published, None while the header is being written or without the files;
        whether a commit is being published). Without the files: (None, False)."""
        if self._shm is None:
            self._shm = _open_if_there(self.shm_path)
        if self._wal is None:
            self._wal = _open_if_there(self.wal_path)
        if self._shm is None or self._wal is None:
            return None, False
        try:
            headers = os.pread(self._shm, 2 * INDEX_HEADER, 0)
            if len(headers) < 2 * INDEX_HEADER:
                return None, False
            header = headers[:INDEX_HEADER]
            if header != headers[INDEX_HEADER:]:
                return None, True  # the header is being written
            return header[16:20] + header[32:40], _frame_after(header, self._wal)
        except OSError:
            return None, False

    def forget_shm(self) -> None:
        """The -shm file was created anew: read the new one from now on."""
        fd, self._shm = self._shm, None
        if fd is not None:
            os.close(fd)

    def forget_wal(self) -> None:
        """The -wal file was created anew."""
        fd, self._wal = self._wal, None
        if fd is not None:
            os.close(fd)

    def close(self) -> None:
        self.forget_wal()
        self.forget_shm()


def _frame_after(header: bytes, wal: int) -> bool:
    """A frame of this WAL generation right after the last one the index header publishes?"""
    page_size = _PAGE_SIZE.unpack_from(header, 14)[0]
    page_size = 65536 if page_size == 1 else page_size
    last = _MAX_FRAME.unpack_from(header, 16)[0]
    if not page_size:
        return False
    frame = os.pread(wal, FRAME_HEADER, WAL_HEADER + last * (FRAME_HEADER + page_size))
    if len(frame) < FRAME_HEADER or not _PAGE_NUMBER.unpack_from(frame, 0)[0]:
        return False
    return frame[8:16] == header[32:40]


def _open_if_there(path: Path) -> int | None:
    try:
        return os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None


class CommitGate:
    """Says when the tailer should read after events on the -wal file (see the module)."""

    def __init__(self, probe: CommitProbe) -> None:
        self._probe = probe
        self._first: float | None = None  # the first event not yet answered by a read
        self._last = 0.0  # the latest event
        self._answered: Published | None = None  # what was published at the last answer

    def event(self, now: float) -> None:
        if self._first is None:
            self._first = now
        self._last = now

    def clear(self) -> None:
        """A read is due for another reason (the directory went away): nothing to wait for."""
        self._first = None

    def ready(self, now: float) -> bool:
        """True when the tailer should read now."""
        if self._first is None:
            return False
        published, in_flight = self._probe.look()
        if not in_flight or now - self._first >= GIVE_UP_S:
            self._first, self._answered = None, published
            return True
        if published is not None and published != self._answered:
            self._answered = published  # an earlier commit is readable: read it, wait on
            return True
        return False

    def retry_in(self, now: float) -> float | None:
        """Seconds until ``ready`` should be asked again; None: not waiting."""
        if self._first is None:
            return None
        since_event = now - self._last
        if since_event < BACKOFF_AFTER_S:
            return RETRY_S
        return min(since_event, BACKOFF_MAX_S)  # frames that stay unpublished: back off
