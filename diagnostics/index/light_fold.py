"""The summary's share of the sessions a report counts from their digests alone, summed once.

A warm ``diagnose 0`` at 1 M messages decoded and summed the tallies of every digested session
each run (~5 000 on the heavy bench DB: ~60 ms of ~340). The sum (``fold_tallies``) is now kept
in the report index under a key made of all it was made from: the window's bounds and the heads
of exactly the sessions summed (a head holds where the session's candidates start and its
tally, and changes with them). A later run over the same digests reads one blob instead.

The local days: a tally counts its steps on the local days of the zone it was made in, valid
in this zone when each of its UTC days has the same offset here (``days_hold``). The kept sum
lists every (UTC day, offset) its sessions rely on, checked each run, and leaves out the
sessions whose days did not hold: those are counted again from their rows each run, as before.
Only the all-time window is kept: a dated window's edge moves with the clock.
"""

from __future__ import annotations

import hashlib
import marshal
from collections.abc import Mapping
from typing import Any

from opencode_autoretry.diagnostics.index.session_digest import Objects, decode_head, fits
from opencode_autoretry.diagnostics.local_days import LocalDays
from opencode_autoretry.diagnostics.summary.session_tally import (
    OFFSETS,
    Fold,
    SessionTally,
    child_of,
    days_hold,
    fold_tallies,
    session_tally,
)

#: The window's bounds: (first message row, first part row, cut in ms).
Bounds = tuple[int, int, int]
#: What a fold leaves out or relies on: (sessions whose candidates start before the window,
#: (UTC day, offset ms) of every day the summed tallies count, (session, a subagent's?) of
#: those counted again from their rows).
_Terms = tuple[tuple[str, ...], tuple[tuple[int, int], ...], tuple[tuple[str, bool], ...]]


class _Summed:
    """The sessions' tallies summed, and what the sum relies on."""

    def __init__(self, unfit: tuple[str, ...], checks: tuple[tuple[int, int], ...],
                 recount: tuple[tuple[str, bool], ...], fold: Fold) -> None:
        self.unfit, self.checks, self.recount, self.fold = unfit, checks, recount, fold

    def holds(self, days: LocalDays) -> bool:
        return all(days.offset(day) == offset for day, offset in self.checks)

    def encode(self, key: bytes) -> bytes:
        return marshal.dumps((key, self.unfit, self.checks, self.recount, self.fold))


def light_folds(
    objects: Objects,
    heads: Mapping[str, bytes],
    bounds: Bounds,
    days: LocalDays,
    kept: tuple[bytes | None, str] | None,
) -> tuple[frozenset[str], tuple[Fold, ...], bytes | None]:
    """Of ``heads`` (session -> digest head, sessions without records), those inside the
    window and their tallies summed: (sessions, folds, the blob to keep or None). ``kept``:
    (the blob a report kept, flags) for the all-time window, None for a dated one."""
    key = _key(heads, bounds, kept[1]) if kept is not None else b""
    summed = _recalled(kept[0], key, days) if kept is not None else None
    blob = None
    if summed is None:
        summed = _summed(heads, bounds, days)
        blob = summed.encode(key) if kept is not None else None
    recounted = _recounted(objects, summed.recount, days)
    light = frozenset(heads.keys() - set(summed.unfit))
    return light, (summed.fold, fold_tallies(recounted.items())), blob


def _key(heads: Mapping[str, bytes], bounds: Bounds, flags: str) -> bytes:
    """All a sum is made from, in one unambiguous serialisation (marshal, in C). The heads in
    the index's order, unsorted: should that order change, the key only misses once."""
    summed = marshal.dumps((bounds, flags, list(heads.items())))
    return hashlib.sha256(summed).digest()


def _recalled(blob: bytes | None, key: bytes, days: LocalDays) -> _Summed | None:
    if blob is None:
        return None
    try:
        kept_key, *terms = marshal.loads(blob)
    except (EOFError, ValueError, TypeError):
        return None  # unreadable: summed again and kept anew
    if kept_key != key or len(terms) != 4:
        return None
    summed = _Summed(*terms)
    return summed if summed.holds(days) else None


def _summed(heads: Mapping[str, bytes], bounds: Bounds, days: LocalDays) -> _Summed:
    unfit: list[str] = []
    holding: dict[str, SessionTally] = {}
    recount: list[tuple[str, bool]] = []
    for sid in sorted(heads):
        header, tally = decode_head(heads[sid])
        if not fits(header, *bounds):
            unfit.append(sid)
        elif days_hold(tally, days):
            holding[sid] = tally
        else:
            recount.append((sid, child_of(tally)))
    checks = sorted({pair for tally in holding.values() for pair in tally[OFFSETS]})
    return _Summed(tuple(unfit), tuple(checks), tuple(recount), fold_tallies(holding.items()))


def _recounted(
    objects: Objects, recount: tuple[tuple[str, bool], ...], days: LocalDays
) -> dict[str, Any]:
    """The tallies made in a zone with other local days, counted again from their rows (read
    in one go)."""
    if not recount:
        return {}
    rows = objects.rows([sid for sid, _ in recount])
    return {sid: session_tally(rows[sid], child=child, days=days) for sid, child in recount}
