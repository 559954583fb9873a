"""Which OpenCode versions autoretry was proven on, and how to tell an untested one.

The e2e suite runs the real binary of every version in the range; a version outside it may
work (the DB and bus shapes change slowly) but what OpenCode itself retries, and how it
reports a child's failure, differ by version (issue 11), so the daemon log and ``autoretry
doctor`` warn instead of refusing.
"""

from __future__ import annotations

import re

#: Oldest and newest OpenCode release the e2e suite passed on (inclusive). 1.17.11 is the
#: oldest (tests/e2e/versions.py ``OLDEST_SUPPORTED``, run on every push by
#: test_older_opencode_e2e.py); 1.15.x is outside: docs/versions.md says why.
TESTED_OPENCODE: tuple[str, str] = ("1.17.11", "1.18.33")

_VERSION = re.compile(r"(\d+)\.(\d+)\.(\d+)")


def parse_version(text: str | None) -> tuple[int, int, int] | None:
    """``"1.18.33"`` (also inside ``"opencode 1.18.33\\n"`` or ``"v1.18.33-beta"``) as a tuple;
    None when no ``X.Y.Z`` is in the text."""
    if not text:
        return None
    found = _VERSION.search(text)
    if found is None:
        return None
    major, minor, patch = (int(group) for group in found.groups())
    return major, minor, patch


def in_tested_range(version: str | None) -> bool | None:
    """True inside ``TESTED_OPENCODE``, False outside, None when the version is unreadable."""
    parsed = parse_version(version)
    if parsed is None:
        return None
    low, high = (parse_version(bound) for bound in TESTED_OPENCODE)
    assert low is not None and high is not None
    return low <= parsed <= high


def tested_range_text() -> str:
    low, high = TESTED_OPENCODE
    return low if low == high else f"{low} to {high}"


def untested_warning(version: str | None) -> str | None:
    """One line for the log and ``doctor`` when ``version`` is outside the tested range."""
    verdict = in_tested_range(version)
    if verdict is None:
        return f"OpenCode version {version!r} is unreadable; autoretry is tested on " \
               f"{tested_range_text()}"
    if verdict:
        return None
    return f"OpenCode {version} is outside the tested range ({tested_range_text()}): " \
           "recovery may differ from the documented behaviour"
