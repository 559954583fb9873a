"""The reports' window: the last DAYS days before now, or (DAYS = 0) all time.

Apart from diagnose.py so that trace, which windows its continuations the same way, does not
import diagnose's report and summary to compute a date.
"""

from __future__ import annotations

from datetime import datetime, timedelta


def window_start(now: datetime, days: int) -> datetime | None:
    """``days`` = 0 means everything."""
    return None if days <= 0 else now - timedelta(days=days)
