"""A watchdog observer on OpenCode's DB directory, where inotify cannot be used directly.

Imported only then (watchdog costs the daemon tens of ms to import and three threads to run):
on macOS, or on Linux when ``inotify_init1`` failed. Every write of one of the two names
calls ``wake``; the tailer decides what is new.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver

log = logging.getLogger(__name__)


class _WakeOnWrite(FileSystemEventHandler):
    def __init__(self, names: frozenset[str], wake: Callable[[], None]) -> None:
        self._names = names
        self._wake = wake

    def on_any_event(self, event: FileSystemEvent) -> None:
        path = event.src_path if isinstance(event.src_path, str) else event.src_path.decode()
        if Path(path).name in self._names and event.event_type in ("modified", "created"):
            self._wake()


def start_observer(directory: Path, names: frozenset[str],
                   wake: Callable[[], None]) -> BaseObserver | None:
    """A started observer, or None when watchdog cannot watch here either (the same inotify
    limits, for one): the tailer's poll covers it."""
    observer = Observer()
    observer.schedule(_WakeOnWrite(names, wake), str(directory), recursive=False)
    observer.daemon = True
    try:
        observer.start()
    except OSError as exc:
        log.warning("cannot watch %s (%s); OpenCode's DB is polled instead", directory, exc)
        return None
    return observer
