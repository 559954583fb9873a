"""The watch on OpenCode's DB files: every write only makes the tailer read.

OpenCode writes in WAL mode, so new rows land in ``opencode.db-wal`` first; watching the
directory (the -wal file comes and goes at checkpoints) and filtering on the two names keeps
the watch trivial. The tailer decides what is new; this module never reads the DB.

On Linux the tailer's own thread polls an inotify fd (``InotifySource``, attached to its
``Wakeup``): a commit wakes that one thread, once or twice (``commit_gate``: the read waits
until the commit is published, without a wake-up per frame). Elsewhere, or when inotify
cannot be set up, a watchdog observer (``watch_fallback``) calls ``Wakeup.wake``.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

from opencode_autoretry.daemon.intake.commit_gate import CommitGate, CommitProbe
from opencode_autoretry.daemon.intake.inotify import (
    IN_CREATE,
    IN_DELETE_SELF,
    IN_IGNORED,
    IN_MODIFY,
    IN_MOVE_SELF,
    IN_MOVED_TO,
    IN_ONLYDIR,
    IN_Q_OVERFLOW,
    Inotify,
    InotifyEvent,
)
from opencode_autoretry.daemon.intake.wakeup import Wakeup

if TYPE_CHECKING:
    from watchdog.observers.api import BaseObserver

log = logging.getLogger(__name__)

WATCH_MASK = IN_MODIFY | IN_CREATE | IN_MOVED_TO | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR
NEW_FILE = IN_CREATE | IN_MOVED_TO
LOST = IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED  # the watch on the directory is gone


class InotifySource:
    """An inotify watch on the DB's directory, read by the tailer's thread when it wakes; a
    write is answered once its commit is readable (``CommitGate``)."""

    def __init__(self, inotify: Inotify, db_path: Path, probe: CommitProbe) -> None:
        self._inotify = inotify
        self._directory = db_path.parent
        self._names = frozenset(os.fsencode(name) for name in _watched_names(db_path))
        self._shm_name = os.fsencode(probe.shm_path.name)
        self._wal_name = os.fsencode(probe.wal_path.name)
        self._probe = probe
        self._gate = CommitGate(probe)
        self._wd: int | None = None

    @classmethod
    def open(cls, db_path: Path, probe: CommitProbe) -> InotifySource | None:
        """None where inotify is not available or the watch cannot be added (the per-user
        limits); nothing is left open then."""
        inotify = Inotify.open()
        if inotify is None:
            return None
        source = cls(inotify, db_path, probe)
        try:
            source.arm()
        except OSError as exc:
            log.info("cannot watch %s with inotify: %s", db_path.parent, exc)
            inotify.close()
            return None
        return source

    @property
    def armed(self) -> bool:
        return self._wd is not None

    def arm(self) -> None:
        self._wd = self._inotify.add_watch(os.fsencode(self._directory), WATCH_MASK)

    def fileno(self) -> int:
        return self._inotify.fileno()

    def on_readable(self) -> bool:
        """Every queued event is consumed; True when a read is due now."""
        return self._take_events() or self._gate.ready(time.monotonic())

    def retry_in(self) -> float | None:
        return self._gate.retry_in(time.monotonic())

    def on_timeout(self) -> bool:
        """The gate's retry (the events queued meanwhile are taken too), or the end of the
        tailer's wait: a directory that was removed or moved is watched again once back."""
        if self._wd is None:
            self._rearm()
        return self._take_events() or self._gate.ready(time.monotonic())

    def _take_events(self) -> bool:
        """Reads the queued events (to the gate); True when the watch was lost: read at once
        (a DB gone or replaced is followed there)."""
        wanted = lost = False
        for event in self._inotify.read_events():
            wanted = self._calls_for_a_read(event) or wanted
            lost = self._drop_if_lost(event) or lost
            self._follow_new_files(event)
        if lost:
            self._gate.clear()
        elif wanted:
            self._gate.event(time.monotonic())
        return lost

    def close(self) -> None:
        self._inotify.close()

    def _calls_for_a_read(self, event: InotifyEvent) -> bool:
        if event.mask & IN_Q_OVERFLOW:  # events were dropped: one of them may have been ours
            return True
        return event.wd == self._wd and event.name in self._names

    def _follow_new_files(self, event: InotifyEvent) -> None:
        if not event.mask & NEW_FILE or event.wd != self._wd:
            return
        if event.name == self._shm_name:
            self._probe.forget_shm()
        elif event.name == self._wal_name:
            self._probe.forget_wal()

    def _drop_if_lost(self, event: InotifyEvent) -> bool:
        if event.wd != self._wd or not event.mask & LOST:  # (or the tail of a watch given up)
            return False
        log.info("OpenCode's DB directory %s was removed or moved; polling it until it is back",
                 self._directory)
        wd, self._wd = self._wd, None
        if event.mask & IN_MOVE_SELF:  # the kernel keeps the watch of a moved directory
            self._inotify.rm_watch(wd)
        self._rearm()
        return True

    def _rearm(self) -> None:
        if not self._directory.is_dir():
            return
        try:
            self.arm()
        except OSError as exc:
            log.debug("cannot watch %s again yet: %s", self._directory, exc)
            return
        log.info("watching OpenCode's DB directory %s again", self._directory)


def _watched_names(db_path: Path) -> frozenset[str]:
    return frozenset({db_path.name, f"{db_path.name}-wal"})


class WalWatcher:
    """Makes ``wakeup``'s sleeper (the tailer) read whenever OpenCode's DB or its -wal file
    is written."""

    def __init__(self, db_path: Path, wakeup: Wakeup) -> None:
        self._db_path = db_path
        self._directory = db_path.parent
        self._wakeup = wakeup
        self._probe = CommitProbe(db_path)
        self._source: InotifySource | None = None
        self._observer: BaseObserver | None = None

    @property
    def kind(self) -> str | None:
        """"inotify", "watchdog", or None when not watching (the tailer's poll only)."""
        if self._source is not None:
            return "inotify"
        return "watchdog" if self._observer is not None else None

    def start(self) -> bool:
        """False when the directory does not exist yet or cannot be watched (the fallback
        poll covers it)."""
        if not self._directory.is_dir():
            return False
        self._source = InotifySource.open(self._db_path, self._probe)
        if self._source is not None:
            self._wakeup.attach(self._source)
            return True
        from opencode_autoretry.daemon.intake.watch_fallback import start_observer

        self._observer = start_observer(self._directory, _watched_names(self._db_path),
                                        self._wakeup.wake)
        return self._observer is not None

    def stop(self) -> None:
        source, self._source = self._source, None
        if source is not None and self._wakeup.detach(source):
            source.close()  # (not when the tailer's thread still polls it: see Wakeup.detach)
            self._probe.close()
        observer, self._observer = self._observer, None
        if observer is not None:
            observer.stop()
            observer.join(timeout=2.0)
