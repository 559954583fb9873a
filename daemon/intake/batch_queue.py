"""The daemon's inbox: a ``queue.Queue`` that can take the items of one read at once.

A bridge writes the deltas its window held for every streaming session in one write, which
the reader thread reads with one ``recv``: putting them one by one took the queue's lock and
notified the loop thread once per line. ``put_all`` takes the lock once and wakes the loop at
most once; the loop still gets the items one by one, in the same order (issue 21).
"""

from __future__ import annotations

import queue
from collections.abc import Sequence


class BatchQueue(queue.Queue[object]):
    """Unbounded (the bridge reader's back-pressure bounds it instead: bridges.py)."""

    def __init__(self) -> None:
        super().__init__(maxsize=0)

    def put_all(self, items: Sequence[object]) -> None:
        """``put`` of every item, in order, with one lock round trip and one wake-up."""
        if not items:
            return
        with self.not_empty:
            for item in items:
                self._put(item)
            self.unfinished_tasks += len(items)
            self.not_empty.notify()
