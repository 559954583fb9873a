"""One build of a report index at a time: an exclusive lock on ``<index>.building``.

The background build (background.py) holds it for its whole round; the daemon's index keeper
takes it for each of its rounds and skips the round when it is held; a report that finds it
held scans instead of waiting for the build's write transaction.
"""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def lock_file(index: Path) -> Path:
    return index.with_name(index.name + ".building")


@contextmanager
def build_lock(index: Path) -> Iterator[bool]:
    """Hold the build lock of ``index`` while inside; yields False (held by another) at once."""
    path = lock_file(index)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def building_now(index: Path) -> bool:
    """A background build of ``index`` is under way (its lock is held)."""
    if not lock_file(index).exists():
        return False
    with build_lock(index) as free:
        return not free
