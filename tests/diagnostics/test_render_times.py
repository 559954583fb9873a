"""The reports' local times: ``Style.local`` writes what ``strftime`` would, faster."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta, tzinfo
from zoneinfo import ZoneInfo

import pytest

from opencode_autoretry.diagnostics.render import Style


@pytest.mark.parametrize("zone", [None, UTC, ZoneInfo("Asia/Kathmandu"),
                                  ZoneInfo("America/Santiago")], ids=str)
def test_local_times_read_as_strftime_writes_them(zone: tzinfo | None) -> None:
    style = Style(colour=False, zone=zone)
    pick = random.Random(21)
    start, span = datetime(1970, 1, 2, tzinfo=UTC), 8029 * 365 * 86_400  # up to ~9998
    values = [start + timedelta(seconds=pick.randrange(span), microseconds=pick.randrange(10**6))
              for _ in range(2000)]
    values += [datetime(2026, 4, 4, 23, 59, 59, 999_999, tzinfo=UTC) + timedelta(minutes=m)
               for m in range(0, 24 * 60, 7)]  # Santiago's change of 2026-04-05 and a day around
    values.append(datetime(2026, 12, 3, 8, 5, 9))  # naive: the machine's zone, as strftime
    for value in values:
        shown = value.astimezone(zone)
        assert style.local(value) == shown.strftime("%Y-%m-%d %H:%M:%S"), value
        assert style.local(value, with_date=False) == shown.strftime("%H:%M:%S"), value
    assert style.local(None) == "-"
