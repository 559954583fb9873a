"""What one session's failures add to the summary, counted once when its digest is made.

A later ``diagnose`` used to tally every light row of every digest (~38 000 at 1 M messages
with 5 % of the steps failing: most of a warm report's time). A session without decisions
always adds the same counts, so its digest keeps them (``SessionTally``, plain values) and the
report adds ~5 000 small tallies instead. Only a session the daemon's store has records about
is judged step by step (its fate needs the decisions).

The counts match ``_Judge.tally_light`` exactly: the fate of a step without a decision depends
only on its kind, whether it is retryable and whether its session is a subagent's (static in
OpenCode); its turn is its user message; a turn's fate is that of its newest step. Local days
depend on the zone: the tally keeps the UTC offset of every UTC day its steps fall on, and a
report in a zone whose offsets differ (or a step on a day the offset changes) recounts the
session from its rows.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from operator import itemgetter
from typing import Any

from opencode_autoretry.diagnostics.index.session_digest import (
    AT,
    EXTRA,
    ID,
    KIND,
    KINDS,
    MODEL,
    PARENT,
    PROVIDER,
    RETRYABLE,
    RUNAWAY,
    TURN,
    LightRow,
)
from opencode_autoretry.diagnostics.local_days import DAY_MS, LocalDays
from opencode_autoretry.models import Kind

#: (steps, turns ((fate, why, n), ...), first key of the first ownerless turn or None,
#:  UTC offsets ((utc day, offset ms), ...) or None, local days ((ordinal, n), ...),
#:  models ((model, first at, first id, n), ...), kinds ((kind name, n), ...),
#:  diagnose's entries ((kind value, n), ...): a runaway loop counts once), a subagent's?).
SessionTally = tuple[Any, ...]
STEPS, TURNS, OWNERLESS, OFFSETS, DAYS, MODELS, KIND_COUNTS, FOUND, CHILD = range(9)


def fate_without_decision(kind: Kind, retryable: bool, child: bool) -> tuple[str, str | None]:
    """What the daemon would never have acted on anyway, else unattended."""
    if kind is Kind.USER_ABORT:
        return "left_alone", "user_abort"
    if kind is Kind.ORPHAN:
        return "left_alone", "no_owner"
    if child:
        return "left_alone", "child"
    if not retryable:
        return "left_alone", "not_retryable"
    return "unattended", None


def model_name(provider: str | None, model: str | None) -> str:
    return f"{provider or '-'}/{model or '-'}"


def session_tally(rows: Sequence[LightRow], child: bool, days: LocalDays) -> SessionTally:
    """The tally of one session's light rows (its abnormal findings), as diagnose lists
    them: a runaway loop by its newest step only."""
    ordered = sorted(_listed(rows), key=itemgetter(AT, ID))
    turns: dict[str, tuple[tuple[int, str], str, str | None]] = {}  # turn -> first key, fate
    local: dict[int, int] = {}
    models: dict[str, list[Any]] = {}
    kinds: dict[str, int] = {}
    for row in ordered:
        kind = KINDS[row[KIND]]
        fate, why = fate_without_decision(kind, row[RETRYABLE], child)
        first = turns.get(row[PARENT])
        turns[row[PARENT]] = ((row[AT], row[ID]) if first is None else first[0], fate, why)
        day = days.day(row[AT]).toordinal()
        local[day] = local.get(day, 0) + 1
        name = model_name(row[PROVIDER], row[MODEL])
        if name not in models:
            models[name] = [row[AT], row[ID], 0]
        models[name][2] += 1
        kinds[str(kind)] = kinds.get(str(kind), 0) + 1
    fates: dict[tuple[str, str | None], int] = {}
    for _, fate, why in turns.values():
        fates[(fate, why)] = fates.get((fate, why), 0) + 1
    ownerless = min(
        (key for key, fate, why in turns.values() if (fate, why) == ("left_alone", "no_owner")),
        default=None,
    )
    return (
        len(ordered),
        tuple((fate, why, n) for (fate, why), n in fates.items()),
        ownerless,
        _offsets(ordered, days),
        tuple(local.items()),
        tuple((name, at, first_id, n) for name, (at, first_id, n) in models.items()),
        tuple(kinds.items()),
        tuple(Counter(row[KIND] for row in ordered).items()),
        child,
    )


def child_of(tally: SessionTally) -> bool:
    return bool(tally[CHILD])


def _listed(rows: Sequence[LightRow]) -> list[LightRow]:
    """The rows diagnose lists (``_group``): of a runaway loop only its newest step."""
    newest: dict[str, LightRow] = {}
    for row in sorted(rows, key=itemgetter(EXTRA, AT, ID)):
        if row[KIND] == RUNAWAY:
            newest[row[TURN]] = row
    return [r for r in rows if r[KIND] != RUNAWAY or newest[r[TURN]] is r]


#: Many sessions' tallies summed (``fold_tallies``), plain values (kept in the report index):
#: (failed steps, sessions with some, turns ((fate, why, n), ...), ownerless (((at, id),
#:  session), ...), local days ((ordinal, n), ...), models ((model, at, id, n), ...): the
#:  first failure of each, kinds ((kind name, n), ...), diagnose's entries ((kind value, n),
#:  ...)).
Fold = tuple[Any, ...]
F_STEPS, F_SESSIONS, F_TURNS, F_OWNERLESS, F_DAYS, F_MODELS, F_KINDS, F_FOUND = range(8)


def fold_tallies(tallies: Iterable[tuple[str, SessionTally]]) -> Fold:
    """The sum of these (session, tally) pairs: in plain counters (~5 000 tallies at 1 M
    messages; a method call per kind and model of each was a third of the sum)."""
    steps = sessions = 0
    turns: dict[tuple[str, str | None], int] = {}
    ownerless: list[tuple[tuple[int, str], str]] = []
    days: dict[int, int] = {}
    models: dict[str, list[Any]] = {}  # model -> [at, id, failed] of its first failure
    kinds: dict[str, int] = {}
    found: dict[str, int] = {}
    for sid, tally in tallies:
        if not tally[STEPS]:
            continue
        steps += tally[STEPS]
        sessions += 1
        for fate, why, count in tally[TURNS]:
            turns[(fate, why)] = turns.get((fate, why), 0) + count
        if tally[OWNERLESS] is not None:
            at, step_id = tally[OWNERLESS]
            ownerless.append(((at, step_id), sid))
        for day, failed in tally[DAYS]:
            days[day] = days.get(day, 0) + failed
        for model, at, first_id, failed in tally[MODELS]:
            seen = models.get(model)
            if seen is None:
                models[model] = [at, first_id, failed]
            else:
                seen[0:2] = min(seen[0:2], [at, first_id])
                seen[2] += failed
        for kind, failed in tally[KIND_COUNTS]:
            kinds[kind] = kinds.get(kind, 0) + failed
        for kind, count in tally[FOUND]:
            found[kind] = found.get(kind, 0) + count
    return (
        steps,
        sessions,
        tuple((fate, why, n) for (fate, why), n in turns.items()),
        tuple(ownerless),
        tuple(days.items()),
        tuple((model, at, first_id, n) for model, (at, first_id, n) in models.items()),
        tuple(kinds.items()),
        tuple(found.items()),
    )


def found_counts(folds: Iterable[Fold]) -> dict[str, int]:
    """diagnose's entries per kind (its value) of these folds' sessions."""
    found: dict[str, int] = {}
    for fold in folds:
        for kind, count in fold[F_FOUND]:
            found[kind] = found.get(kind, 0) + count
    return found


def _offsets(rows: Iterable[LightRow], days: LocalDays) -> tuple[tuple[int, int], ...] | None:
    """The UTC offset of each UTC day the rows fall on (None: one of them has two)."""
    found: dict[int, int] = {}
    for row in rows:
        utc_day = row[AT] // DAY_MS
        offset = days.offset(utc_day)
        if offset is None:
            return None
        found[utc_day] = offset
    return tuple(found.items())


def days_hold(tally: SessionTally, days: LocalDays) -> bool:
    """Whether the tally's local days are this zone's (the same offset on every day)."""
    offsets = tally[OFFSETS]
    return offsets is not None and all(days.offset(d) == o for d, o in offsets)


