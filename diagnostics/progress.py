"""A progress bar on stderr while ``diagnose`` scans a large database (a terminal only).

Nothing is drawn when stderr is not a terminal (piped, redirected, in tests) or for a scan
that ends before ``DELAY`` (so a fast report never flickers); the bar is removed when done.
``rich`` is imported only when a bar is drawn.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import IO, Any

#: Seconds of scanning before the bar appears.
DELAY = 0.5


@contextmanager
def scan_progress(
    stream: IO[str] | None = None, clock: Callable[[], float] = time.monotonic
) -> Iterator[Callable[[int, int], None] | None]:
    """A ``progress(done, total)`` callback drawing on ``stream`` (stderr), or None."""
    stream = stream or sys.stderr
    if not getattr(stream, "isatty", bool)():
        yield None
        return
    started = clock()
    shown: dict[str, Any] = {}

    def advance(done: int, total: int) -> None:
        if "bar" not in shown:
            if clock() - started < DELAY or done >= total:
                return
            shown["bar"] = _start_bar(stream, total)
        bar, task = shown["bar"]
        bar.update(task, completed=done, total=total)

    try:
        yield advance
    finally:
        if "bar" in shown:
            shown["bar"][0].stop()


def _start_bar(stream: IO[str], total: int) -> tuple[Any, Any]:
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TaskProgressColumn, TimeElapsedColumn

    bar = Progress(
        "scanning OpenCode's database",
        BarColumn(),
        TaskProgressColumn(),
        TimeElapsedColumn(),
        console=Console(file=stream),
        transient=True,
    )
    bar.start()
    return bar, bar.add_task("scan", total=total)
