"""A watchdog observer on OpenCode's DB files: every write only wakes the tailer.

OpenCode writes in WAL mode, so new rows land in ``opencode.db-wal`` first; watching the
directory (the -wal file comes and goes at checkpoints) and filtering on the two names keeps
the handler trivial. The tailer decides what is new; this module never reads the DB.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer


class _WakeOnWrite(FileSystemEventHandler):
    def __init__(self, names: frozenset[str], wake: Callable[[], None]) -> None:
        self._names = names
        self._wake = wake

    def on_any_event(self, event: FileSystemEvent) -> None:
        path = event.src_path if isinstance(event.src_path, str) else event.src_path.decode()
        if Path(path).name in self._names and event.event_type in ("modified", "created"):
            self._wake()


class WalWatcher:
    """Calls ``wake()`` whenever OpenCode's DB or its -wal file is written."""

    def __init__(self, db_path: Path, wake: Callable[[], None]) -> None:
        names = frozenset({db_path.name, f"{db_path.name}-wal"})
        self._directory = db_path.parent
        self._handler = _WakeOnWrite(names, wake)
        self._observer: Observer | None = None  # type: ignore[valid-type]

    def start(self) -> bool:
        """False when the directory does not exist yet (the fallback poll covers it)."""
        if not self._directory.is_dir():
            return False
        observer = Observer()
        observer.schedule(self._handler, str(self._directory), recursive=False)
        observer.daemon = True
        observer.start()
        self._observer = observer
        return True

    def stop(self) -> None:
        if self._observer is not None:
            self._observer.stop()
            self._observer.join(timeout=2.0)
            self._observer = None
