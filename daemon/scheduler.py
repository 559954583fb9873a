"""Timers for delayed retries: APScheduler jobs whose only effect is one ``TimerDue`` item.

The store holds the due time (the injection intent); a timer is just a wake-up, so losing one
(a restart, a clock jump) costs nothing: the loop's tick also looks for intents that are due.
"""

from __future__ import annotations

import contextlib
import queue
from datetime import UTC, datetime, timedelta
from typing import Protocol

from apscheduler.jobstores.base import JobLookupError
from apscheduler.schedulers.background import BackgroundScheduler

from opencode_autoretry.daemon.inbox import TimerDue

CANCEL_MARGIN = timedelta(seconds=2)


class Timers(Protocol):
    def arm(self, injection_id: int, due: datetime) -> None: ...
    def cancel(self, injection_id: int) -> None: ...


def _job_id(injection_id: int) -> str:
    return f"injection-{injection_id}"


class RetryScheduler:
    """A BackgroundScheduler whose jobs enqueue ``TimerDue``; started and stopped by the loop."""

    def __init__(self, inbox: queue.Queue[object]) -> None:
        self._inbox = inbox
        self._scheduler = BackgroundScheduler(timezone=UTC)

    def start(self) -> None:
        self._scheduler.start()

    def shutdown(self) -> None:
        if self._scheduler.running:
            self._scheduler.shutdown(wait=False)

    def arm(self, injection_id: int, due: datetime) -> None:
        self._scheduler.add_job(
            self._inbox.put,
            trigger="date",
            run_date=due,
            args=[TimerDue(injection_id)],
            id=_job_id(injection_id),
            replace_existing=True,
            misfire_grace_time=None,  # late is fine: the loop re-checks before sending
        )

    def cancel(self, injection_id: int) -> None:
        """Drop a timer that is still well in the future. One that is due (or nearly) is left
        to fire: removing it while APScheduler runs it makes its thread's own removal raise
        and stop the scheduler; a stray ``TimerDue`` finds no open intent and does nothing."""
        job = self._scheduler.get_job(_job_id(injection_id))
        if job is None or job.next_run_time is None:
            return
        if job.next_run_time - datetime.now(tz=UTC) > CANCEL_MARGIN:
            with contextlib.suppress(JobLookupError):
                self._scheduler.remove_job(job.id)
