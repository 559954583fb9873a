"""The whole suite: the longest tests (``@pytest.mark.long``) start first.

With two xdist workers (``--dist worksteal``) a worker that picks up a minute-long test near the
end leaves the other idle for that minute; started first, the long tests run while the other
worker takes the many short ones, and stealing evens out the rest.
"""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: item.get_closest_marker("long") is None)  # stable otherwise
