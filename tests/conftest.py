"""The whole suite: the longest tests (``@pytest.mark.long``) start first.

With xdist workers (``--dist worksteal``) a worker that picks up a minute-long test near the
end leaves the other idle for that minute; started first, the long tests run while the other
worker takes the many short ones, and stealing evens out the rest.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import pytest


def pytest_configure(config: pytest.Config) -> None:
    """Started as a background job of a non-interactive shell (``cmd &``), the suite inherits
    SIGINT ignored, and so would every process it starts: the tests that end ``status --watch``
    and ``logs -f`` with Ctrl-C then hung until their timeout. Ctrl-C is restored here (in the
    controller and in each xdist worker), so those children start with it."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: item.get_closest_marker("long") is None)  # stable otherwise


@pytest.fixture(autouse=True)
def _umask_kept() -> Iterator[None]:
    """The CLI sets umask 077 in-process (issue 20): each test starts from the same umask."""
    old = os.umask(0o022)
    os.umask(old)
    yield
    os.umask(old)
