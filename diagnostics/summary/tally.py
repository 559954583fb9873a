"""What autoretry did for you over the window: the summary ``diagnose`` opens with.

Every failed step the report found (``steps.py``) is joined with the daemon's decisions on
the step it was about (``decision.message_id``, or the abort the daemon itself caused) and,
when a continuation was sent, with that continuation's outcome (the first assistant step
after the injected message, judged as ``trace`` does). A failed *turn* takes the fate of its
newest failed step:

- ``recovered``: continued automatically and the reply came back with output;
- ``gave_up``: the budget ran out, the daemon told the user and waits for them;
- ``left_alone``: on purpose, with a reason (``not_retryable``, ``user_abort``, ``child``,
  ``switched_off``, ``no_owner``, ``waiting``, ``other``);
- ``not_recovered``: continued, but the reply failed again, or the continuation was never
  delivered (not sent, cancelled);
- ``in_progress``: a continuation is scheduled or its reply has not finished;
- ``unattended``: no decision on record (the daemon was not running then).

Nothing here knows the list of decision kinds or actions: counts are keyed by the strings the
store holds, so a kind or action added later shows up in every breakdown as it is.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, tzinfo
from operator import itemgetter
from typing import Any, Final

from opencode_autoretry.causes import Cause
from opencode_autoretry.diagnostics.index.session_digest import (
    AT,
    ID,
    KIND,
    KINDS,
    MODEL,
    PARENT,
    PROVIDER,
    RETRYABLE,
    SESSION,
    LightRow,
    entries_of,
)
from opencode_autoretry.diagnostics.local_days import LocalDays
from opencode_autoretry.diagnostics.records import NO_OWNER, DaemonRecords, daemon_abort_for
from opencode_autoretry.diagnostics.repetition_view import RepetitionStop
from opencode_autoretry.diagnostics.steps import ABNORMAL_KINDS, ClassifiedStep
from opencode_autoretry.diagnostics.trace.report import Outcome, outcome_of, undelivered
from opencode_autoretry.models import Kind, Role, to_epoch_ms
from opencode_autoretry.opencode.db import OpenCodeDB
from opencode_autoretry.store.database import DecisionRecord, InjectionRecord

FATES = ("recovered", "gave_up", "left_alone", "not_recovered", "in_progress", "unattended")
#: Why a failure was left alone, by the skip decision's cause (any other: ``other``).
LEFT_ALONE_REASONS: tuple[tuple[str, frozenset[Cause]], ...] = (
    ("switched_off", frozenset({Cause.OFF})),
    ("user_abort", frozenset({Cause.USER_ABORT})),
    ("waiting", frozenset({Cause.WAITING_PERMISSION, Cause.WAITING_QUESTION,
                           Cause.WAITING_CHILD, Cause.BUSY, Cause.OPENCODE_RETRYING})),
    ("child", frozenset({Cause.CHILD_SESSION, Cause.PARENT_UNKNOWN, Cause.NOT_A_CHILD})),
    ("no_owner", NO_OWNER),
    ("not_retryable", frozenset({Cause.NOT_RETRIED, Cause.NOT_RETRYABLE, Cause.HEALTHY,
                                 Cause.RUNNING})),
)
LEFT_ALONE = (*(name for name, _ in LEFT_ALONE_REASONS), "other")
#: A skip that only repeats an earlier decision about the same failure says nothing new.
_DUPLICATE = frozenset({Cause.ALREADY_HANDLED, Cause.ALREADY_SWITCHED, Cause.ALREADY_SCHEDULED,
                        Cause.ALREADY_PENDING})
#: A budget spent earlier in the turn: the failure was given up on.
_EXHAUSTED = frozenset({Cause.GROUP_EXHAUSTED})
#: Continuation outcomes that reached the model and finished (the success rate's base).
SETTLED = ("recovered", "failed", "blank")


@dataclass(frozen=True)
class Tally:
    """One row of a breakdown."""

    failed: int = 0
    recovered: int = 0
    continuations: int = 0
    decisions: int = 0


@dataclass(frozen=True)
class DayCount:
    day: date
    failed: int
    recovered: int


@dataclass(frozen=True)
class Summary:
    failed_steps: int
    failed_turns: int
    failed_sessions: int
    turns: Mapping[str, int]  # fate -> turns, every fate listed
    left_alone: Mapping[str, int]  # why -> turns, every reason listed
    loops: Mapping[str, int]  # reminded / replanned / stopped / skipped -> decisions
    continuations: Mapping[str, int]  # outcome status -> continuations
    decisions: Mapping[str, Mapping[str, int]]  # action -> kind -> decisions
    per_day: tuple[DayCount, ...]
    by_model: Mapping[str, Tally]
    by_kind: Mapping[str, Tally]
    #: Observe mode's would-be actions (issue 23): action -> kind -> decisions.
    observed: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    #: The sessions of the turns left alone for want of a live owner: the one list both the
    #: summary's "no live owner N" and diagnose's "Sessions with no live owner" are drawn from.
    ownerless_sessions: tuple[str, ...] = ()

    @property
    def recovered_share(self) -> float | None:
        return self.turns["recovered"] / self.failed_turns if self.failed_turns else None

    @property
    def continuations_sent(self) -> int:
        return sum(self.continuations.values())

    @property
    def success_rate(self) -> float | None:
        settled = sum(self.continuations.get(s, 0) for s in SETTLED)
        return self.continuations.get("recovered", 0) / settled if settled else None


#: What became of one failed step: a plain tuple (~10 000 a report; a class or a NamedTuple
#: cost more to build than the rest of the summary) of (its creation in epoch ms, its id,
#: session, provider/model, kind, turn (session, turn id), fate, why it was left alone).
_Fate = tuple[int, str, str, str, str, tuple[str, str], str, str | None]
F_AT: Final = 0
F_ID: Final = 1
F_SESSION: Final = 2
F_MODEL: Final = 3
F_KIND: Final = 4
F_TURN: Final = 5
F_FATE: Final = 6
F_WHY: Final = 7


def continuation_outcomes(
    db: OpenCodeDB, injections: Iterable[InjectionRecord]
) -> dict[int, Outcome]:
    """Each injection's outcome: two indexed look-ups per delivered one."""
    found: dict[int, Outcome] = {}
    for injection in injections:
        if injection.state in ("failed", "cancelled"):
            found[injection.id] = undelivered(injection)
            continue
        message = db.message(injection.message_id) if injection.message_id else None
        if message is None:
            found[injection.id] = Outcome("pending", f"… pending ({injection.state})")
            continue
        reply = db.neighbours(message, Role.ASSISTANT, before=False)
        found[injection.id] = outcome_of(reply)
    return found


def _rank(decision: DecisionRecord, sends: set[int]) -> int:
    """Which decision about a step tells what became of it: a send, then a notice, then a
    skip with a reason of its own, then a skip that repeats an earlier decision."""
    if decision.id in sends:
        return 3
    if decision.action == "notify":
        return 2
    return 0 if decision.cause in _DUPLICATE else 1


def _left_alone_reason(cause: Cause) -> str:
    return next((name for name, causes in LEFT_ALONE_REASONS if cause in causes), "other")


def _fate_of_send(outcomes: Sequence[Outcome]) -> str:
    statuses = {o.status for o in outcomes}
    if "recovered" in statuses:
        return "recovered"
    if not statuses or "pending" in statuses:
        return "in_progress"
    return "not_recovered"


class _Judge:
    """Joins failed steps with the store's decisions and the continuations' outcomes."""

    def __init__(
        self,
        records: DaemonRecords,
        outcomes: Mapping[int, Outcome],
        parents: Mapping[str, str | None],
    ) -> None:
        self.records, self.outcomes, self.parents = records, outcomes, parents
        self.by_step: dict[str, list[DecisionRecord]] = defaultdict(list)
        by_session: dict[str, list[DecisionRecord]] = defaultdict(list)
        for decision in records.decisions:
            by_session[decision.session_id].append(decision)
            if decision.message_id:
                self.by_step[decision.message_id].append(decision)
        # one small set of records per session: finding the daemon's own abort of a step
        # then costs that session's decisions, not the whole store's
        self.of_session = {
            sid: DaemonRecords(decisions=tuple(found)) for sid, found in by_session.items()
        }
        self.by_decision: dict[int, list[InjectionRecord]] = defaultdict(list)
        for injection in records.injections:
            self.by_decision[injection.decision_id].append(injection)
        self._light: dict[tuple[object, ...], tuple[str, str, str, str | None]] = {}
        self.turn_of_injected = {
            i.message_id: i.turn_id for i in records.injections if i.message_id and i.turn_id
        }

    def decision_for(self, item: ClassifiedStep) -> DecisionRecord | None:
        own = self.of_session.get(item.step.session_id)
        if own is None:
            return None  # the daemon decided nothing in this session
        found = list(self.by_step.get(item.step.id, ()))
        aborted = daemon_abort_for(own, item.step)
        if aborted is not None:
            found.append(aborted)
        sends = {d.id for d in found if d.id in self.by_decision}
        return max(found, key=lambda d: (_rank(d, sends), d.id), default=None)

    def judge(self, item: ClassifiedStep) -> _Fate:
        step, decision = item.step, self.decision_for(item)
        parent = step.parent_id or ""
        turn_id = (decision.turn_id if decision else None) or self.turn_of_injected.get(parent)
        at = to_epoch_ms(step.time_created)
        facts = (at, step.id, step.session_id, _model(item), str(item.verdict.kind))
        turn = (step.session_id, turn_id or parent)
        if decision is None:
            verdict = item.verdict
            why = self._without_decision(verdict.kind, verdict.retryable, step.session_id)
            return (*facts, turn, *why)
        injections = self.by_decision.get(decision.id, ())
        if injections:
            fate = _fate_of_send([self.outcomes[i.id] for i in injections if i.id in self.outcomes])
            return (*facts, turn, fate, None)
        if decision.action == "notify" or decision.cause in _EXHAUSTED:
            return (*facts, turn, "gave_up", None)
        if decision.action == "skip":
            return (*facts, turn, "left_alone", _left_alone_reason(decision.cause))
        return (*facts, turn, "in_progress", None)  # a send whose intent is not recorded yet

    def tally_light(self, row: LightRow, tallies: _Tallies) -> None:
        """A digest's light row: its session has no decision (diagnose builds the others).
        What ``judge`` gives, from a few values (cached: ~10 000 rows a report)."""
        sid, parent = row[SESSION], row[PARENT]
        assert sid not in self.of_session, "a session with decisions must be built in full"
        key = (row[KIND], row[RETRYABLE], bool(self.parents.get(sid)), row[PROVIDER], row[MODEL])
        facts = self._light.get(key)
        if facts is None:
            kind = KINDS[row[KIND]]
            model = f"{row[PROVIDER] or '-'}/{row[MODEL] or '-'}"
            why = self._without_decision(kind, row[RETRYABLE], sid)
            facts = self._light[key] = (model, str(kind), *why)
        turn = (sid, self.turn_of_injected.get(parent) or parent)
        tallies.add(row[AT], row[ID], sid, facts[0], facts[1], turn, facts[2], facts[3])

    def tally_all_light(self, rows: Sequence[LightRow], tallies: _Tallies) -> None:
        """``tally_light`` then ``_Tallies.add`` for each row, in one loop (the usual case:
        nothing built in full; a call per row was most of the summary's time)."""
        light, parents, injected = self._light, self.parents, self.turn_of_injected
        newest, sessions, days_failed = tallies.newest, tallies.sessions, tallies.days_failed
        models, kinds, day_of = tallies.models, tallies.kinds, tallies.local.day
        for row in rows:
            sid, parent, at = row[SESSION], row[PARENT], row[AT]
            key = (row[KIND], row[RETRYABLE], bool(parents.get(sid)), row[PROVIDER], row[MODEL])
            assert sid not in self.of_session, "a session with decisions is built in full"
            facts = light.get(key)
            if facts is None:
                kind = KINDS[row[KIND]]
                model = f"{row[PROVIDER] or '-'}/{row[MODEL] or '-'}"
                facts = light[key] = (model, str(kind), *self._without_decision(
                    kind, row[RETRYABLE], sid))
            model, kind_name, fate, why = facts
            assert fate != "recovered"  # no decision: never recovered
            sessions.add(sid)
            newest[(sid, injected.get(parent) or parent)] = (fate, why)
            days_failed[day_of(at)] += 1
            counts = models.get(model)
            if counts is None:
                counts = models[model] = [(at, row[ID]), 0, 0]
            counts[1] += 1
            per_kind = kinds.get(kind_name)
            if per_kind is None:
                per_kind = kinds[kind_name] = [0, 0]
            per_kind[0] += 1
        tallies.steps += len(rows)

    def _without_decision(
        self, kind: Kind, retryable: bool, session_id: str
    ) -> tuple[str, str | None]:
        """What the daemon would never have acted on anyway, else unattended."""
        if kind is Kind.USER_ABORT:
            return "left_alone", "user_abort"
        if kind is Kind.ORPHAN:
            return "left_alone", "no_owner"
        if self.parents.get(session_id):
            return "left_alone", "child"
        if not retryable:
            return "left_alone", "not_retryable"
        return "unattended", None


def _days(first: date, last: date) -> list[date]:
    return [first + timedelta(days=n) for n in range((last - first).days + 1)]


def _per_day(
    tallies: _Tallies, since: datetime | None, now: datetime, zone: tzinfo | None
) -> tuple[DayCount, ...]:
    def day(value: datetime) -> date:
        return value.astimezone(zone).date()

    failed, recovered = tallies.days_failed, tallies.days_recovered
    start = day(since) if since else min(failed, default=day(now))
    span = _days(min(start, day(now)), day(now))
    return tuple(DayCount(d, failed[d], recovered[d]) for d in span)


class _Tallies:
    """What the summary counts of the failed steps, added one step at a time in creation
    order (the light rows of a digest without building a tuple each: ~10 000 a report)."""

    def __init__(self, zone: tzinfo | None) -> None:
        self.local = LocalDays(zone)
        self.steps = 0
        self.sessions: set[str] = set()
        self.newest: dict[tuple[str, str], tuple[str, str | None]] = {}  # turn -> its fate
        self.days_failed: Counter[date] = Counter()
        self.days_recovered: Counter[date] = Counter()
        self.models: dict[str, list[Any]] = {}  # model -> [first (at, id), failed, recovered]
        self.kinds: dict[str, list[int]] = {}  # kind -> [failed, recovered]

    def add(
        self, at: int, step_id: str, session_id: str, model: str, kind: str,
        turn: tuple[str, str], fate: str, why: str | None,
    ) -> None:
        ok = fate == "recovered"
        self.steps += 1
        self.sessions.add(session_id)
        self.newest[turn] = (fate, why)
        day = self.local.day(at)
        self.days_failed[day] += 1
        if ok:
            self.days_recovered[day] += 1
        counts = self.models.get(model)
        if counts is None:
            counts = self.models[model] = [(at, step_id), 0, 0]
        counts[1] += 1
        counts[2] += ok
        per_kind = self.kinds.get(kind)
        if per_kind is None:
            per_kind = self.kinds[kind] = [0, 0]
        per_kind[0] += 1
        per_kind[1] += ok


def _model(item: ClassifiedStep) -> str:
    step = item.step
    return f"{step.provider_id or '-'}/{step.model_id or '-'}"


def _kind_order(kinds: Iterable[str]) -> list[str]:
    known = [str(k) for k in ABNORMAL_KINDS]
    rest = sorted(set(kinds) - set(known))
    present = set(kinds)
    return [k for k in known if k in present] + rest


def _breakdowns(
    tallies: _Tallies,
    records: DaemonRecords,
) -> tuple[dict[str, Tally], dict[str, Tally]]:
    by_kind: dict[str, Counter[str]] = defaultdict(Counter)
    for kind, (failed, recovered) in tallies.kinds.items():
        by_kind[kind].update(failed=failed, recovered=recovered)
    kind_of = {d.id: d.kind or "-" for d in records.decisions}
    for decision in records.decisions:
        by_kind[decision.kind or "-"]["decisions"] += 1
    for injection in records.injections:
        by_kind[kind_of.get(injection.decision_id, "-")]["continuations"] += 1
    # most failures first; a tie in the order the models first failed
    first_seen = sorted(tallies.models.items(), key=lambda kv: kv[1][0])
    ranked = sorted(first_seen, key=lambda kv: -kv[1][1])
    models = {k: Tally(failed=v[1], recovered=v[2]) for k, v in ranked}
    kinds = {k: Tally(**by_kind[k]) for k in _kind_order(by_kind)}
    return models, kinds


class _LightMark:
    """A light row in the merged stream (a plain tuple would read as a fate)."""

    __slots__ = ("row",)

    def __init__(self, row: LightRow) -> None:
        self.row = row


def _merged(fates: list[_Fate], light: list[LightRow]) -> Iterable[_Fate | _LightMark]:
    """Both streams in creation order (at, id)."""
    if not fates:
        return (_LightMark(r) for r in light)
    keyed: list[tuple[tuple[int, str], _Fate | _LightMark]] = [
        ((r[AT], r[ID]), _LightMark(r)) for r in light
    ]
    keyed += [((f[F_AT], f[F_ID]), f) for f in fates]
    return (item for _, item in sorted(keyed, key=itemgetter(0)))


def build_summary(
    db: OpenCodeDB,
    findings: Mapping[Kind, Sequence[ClassifiedStep]],
    records: DaemonRecords,
    repetition: Sequence[RepetitionStop],
    *,
    since: datetime | None,
    now: datetime,
    zone: tzinfo | None = None,
) -> Summary:
    """``records`` must already be limited to the window (``load_records(since=...)``)."""
    entries = [e for found in findings.values() for e in entries_of(found)]
    light = [e for e in entries if type(e) is tuple]
    full = [e for e in entries if isinstance(e, ClassifiedStep)]
    outcomes = continuation_outcomes(db, records.injections)
    sessions = {e[SESSION] for e in light} | {i.step.session_id for i in full}
    judge = _Judge(records, outcomes, _parents(db, sessions))
    tallies = _Tallies(zone)
    fates = sorted((judge.judge(i) for i in full), key=itemgetter(F_AT, F_ID))
    light.sort(key=itemgetter(AT, ID))  # creation order (a turn is all light or all built)
    if fates:
        for fate in _merged(fates, light):
            if isinstance(fate, _LightMark):
                judge.tally_light(fate.row, tallies)
            else:
                tallies.add(*fate)
    else:
        judge.tally_all_light(light, tallies)
    turns = Counter(fate for fate, _ in tallies.newest.values())
    why = Counter(reason for fate, reason in tallies.newest.values() if fate == "left_alone")
    actions: dict[str, Counter[str]] = defaultdict(Counter)
    for decision in records.decisions:
        actions[decision.action][decision.kind or "-"] += 1
    would: dict[str, Counter[str]] = defaultdict(Counter)
    for decision in records.observed:
        would[decision.action][decision.kind or "-"] += 1
    models, kinds = _breakdowns(tallies, records)
    return Summary(
        failed_steps=tallies.steps,
        failed_turns=len(tallies.newest),
        failed_sessions=len(tallies.sessions),
        turns={fate: turns[fate] for fate in FATES},
        left_alone={reason: why[reason] for reason in LEFT_ALONE},
        loops=dict(Counter(s.taken for s in repetition)),
        continuations=dict(Counter(outcomes[i.id].status for i in records.injections)),
        decisions={a: dict(sorted(k.items())) for a, k in sorted(actions.items())},
        per_day=_per_day(tallies, since, now, zone),
        by_model=models,
        by_kind=kinds,
        ownerless_sessions=_ownerless(tallies),
        observed={a: dict(sorted(k.items())) for a, k in sorted(would.items())},
    )


def _ownerless(tallies: _Tallies) -> tuple[str, ...]:
    """Sessions with a failed turn left alone because nothing owned it, in first-failure order."""
    return tuple(dict.fromkeys(
        sid for (sid, _), (fate, why) in tallies.newest.items()
        if fate == "left_alone" and why == "no_owner"
    ))


def _parents(db: OpenCodeDB, session_ids: set[str]) -> dict[str, str | None]:
    return db.parent_ids(session_ids)
