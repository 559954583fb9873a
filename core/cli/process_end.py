"""A report ends its process without freeing what it built, one object at a time (issue 21).

A first ``diagnose 0`` of a 1 M-message database builds millions of small objects (the rows it
scanned, every classified step, the summary's tallies). Python frees each of them when the
functions holding them return (~0.25 s when the scan returns), and its shutdown walks and frees
the rest after the report is printed. Ending without that, measured on the heavy 1 M-message
bench DB (fresh processes, alternating): ``diagnose 0 --no-index`` 7.7 -> 6.0 s (median of 6),
a later ``diagnose 0`` on the index 331 -> 299 ms and ``errors`` 186 -> 170 ms (median of 12)
(bench/README.md, "Later: stop 33").

So a command that says so (``end_without_teardown``) hands what it built to ``leave`` and, once
click is done with it, the ``autoretry`` console script (``cli.main.console``) flushes stdout
and stderr and ends the process with ``os._exit``: the kernel takes the memory back at once.
Only the read-only reports say so; nothing of theirs waits for a clean shutdown: the report
index and doctor's kept line are committed or renamed into place before the output, their
worker threads are joined, the background index build is started (detached) when the
command's context closes, before click raises its ``SystemExit``, and the exit handlers their
imports register have nothing left to do (``logging``'s flush: no handler is configured;
``concurrent.futures``' join: the scan's pool is shut down). Anywhere else (click's test
runner, the daemon's index keeper, a test calling a report's builder) ``leave`` keeps nothing
and the process ends as usual.
"""

from __future__ import annotations

import os
import sys
from typing import NoReturn


class _Ending:
    """Whether this process is the console script, whether its command asked to end without
    teardown, and what it keeps until then."""

    def __init__(self) -> None:
        self.console = False
        self.asked = False
        self.kept: list[tuple[object, ...]] = []


_ENDING = _Ending()


def console_started() -> None:
    """This process is the ``autoretry`` console script: it ends when its command does."""
    _ENDING.console = True


def end_without_teardown() -> None:
    """This command's process ends with ``os._exit`` once its output is flushed (in the
    console script only: under click's test runner the caller goes on)."""
    _ENDING.asked = _ENDING.console


def ending_without_teardown() -> bool:
    return _ENDING.asked


def leave(*objects: object) -> None:
    """Keep ``objects`` until the process ends, so they are never freed one by one (only
    when it ends without teardown; otherwise nothing: they are freed as usual)."""
    if _ENDING.asked:
        _ENDING.kept.append(objects)


def end_now(code: object) -> NoReturn:
    """End the process with ``code`` (a ``SystemExit``'s, read as Python reads it) after
    flushing stdout and stderr; output that cannot be flushed makes a 0 a 1."""
    status = _status(code)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a reader gone (EPIPE), a stream closed
            status = status or 1
    os._exit(status)


def _status(code: object) -> int:
    """As the interpreter reads ``sys.exit(code)``: None is 0, an int itself, anything
    else printed to stderr and 1."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1
