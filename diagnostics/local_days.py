"""Local calendar days of epoch milliseconds, without a datetime per value.

The summary counts each failed step on its local day (``datetime.astimezone(zone).date()``);
at 1 M messages that is ~10 000 conversions a report. A zone's offset from UTC changes only at
its transitions, so the offset of a whole UTC day is taken once, when its first and last
millisecond share it (two transitions within one day exist in no zone's rules); a day with a
transition is converted value by value, as before.
"""

from __future__ import annotations

from datetime import date, timedelta, tzinfo

from opencode_autoretry.models import EPOCH

DAY_MS = 86_400_000


def _offset_ms(ms: int, zone: tzinfo | None) -> int:
    local = (EPOCH + timedelta(milliseconds=ms)).astimezone(zone)
    offset = local.utcoffset()
    return 0 if offset is None else offset // timedelta(milliseconds=1)


def exact_day(ms: int, zone: tzinfo | None) -> date:
    """The reference: what ``astimezone(zone).date()`` gives (``None``: the machine's zone)."""
    return (EPOCH + timedelta(milliseconds=ms)).astimezone(zone).date()


class LocalDays:
    """``day(ms)`` == ``exact_day(ms, zone)``, the offset cached per UTC day."""

    def __init__(self, zone: tzinfo | None) -> None:
        self.zone = zone
        self._offsets: dict[int, int | None] = {}
        self._days: dict[int, date] = {}

    def offset(self, utc_day: int) -> int | None:
        """The day's offset in ms, None if it changes within the day."""
        if utc_day not in self._offsets:
            first = _offset_ms(utc_day * DAY_MS, self.zone)
            last = _offset_ms((utc_day + 1) * DAY_MS - 1, self.zone)
            self._offsets[utc_day] = first if first == last else None
        return self._offsets[utc_day]

    def day(self, ms: int) -> date:
        offset = self.offset(ms // DAY_MS)
        if offset is None:
            return exact_day(ms, self.zone)
        number = (ms + offset) // DAY_MS
        found = self._days.get(number)
        if found is None:
            found = self._days[number] = (EPOCH + timedelta(days=number)).date()
        return found
