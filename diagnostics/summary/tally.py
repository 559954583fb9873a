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
from opencode_autoretry.diagnostics.index.session_digest import LightRow, entries_of, light_row
from opencode_autoretry.diagnostics.local_days import LocalDays
from opencode_autoretry.diagnostics.records import NO_OWNER, DaemonRecords, daemon_abort_for
from opencode_autoretry.diagnostics.repetition_view import RepetitionStop
from opencode_autoretry.diagnostics.steps import ABNORMAL_KINDS, ClassifiedStep
from opencode_autoretry.diagnostics.summary.session_tally import (
    F_DAYS,
    F_KINDS,
    F_MODELS,
    F_OWNERLESS,
    F_SESSIONS,
    F_STEPS,
    F_TURNS,
    Fold,
    SessionTally,
    fate_without_decision,
    fold_tallies,
    session_tally,
)
from opencode_autoretry.diagnostics.trace.outcome import Outcome, outcome_of, undelivered
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
    """Failed and recovered steps of one local day."""

    day: date
    failed: int
    recovered: int


@dataclass(frozen=True)
class Summary:
    """The summary's counts (the shape of ``--json``'s ``summary``: summary/view.py)."""

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

    def _without_decision(
        self, kind: Kind, retryable: bool, session_id: str
    ) -> tuple[str, str | None]:
        return fate_without_decision(kind, retryable, bool(self.parents.get(session_id)))


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
    """What the summary counts of the failed steps: those judged one at a time, added in
    creation order, and the sessions counted from their digests' tallies."""

    def __init__(self, zone: tzinfo | None) -> None:
        self.local = LocalDays(zone)
        self.steps = 0
        self.sessions: set[str] = set()
        self.newest: dict[tuple[str, str], tuple[str, str | None]] = {}  # turn -> its fate
        self.turn_first: dict[tuple[str, str], tuple[int, str]] = {}  # turn -> its first step
        self.days_failed: Counter[date] = Counter()
        self.days_recovered: Counter[date] = Counter()
        self.models: dict[str, list[Any]] = {}  # model -> [first (at, id), failed, recovered]
        self.kinds: dict[str, list[int]] = {}  # kind -> [failed, recovered]
        self.tallied_sessions = 0
        self.tallied_turns: Counter[tuple[str, str | None]] = Counter()  # (fate, why) -> turns
        self.ownerless: list[tuple[tuple[int, str], str]] = []  # (first step, session)

    def add(
        self, at: int, step_id: str, session_id: str, model: str, kind: str,
        turn: tuple[str, str], fate: str, why: str | None,
    ) -> None:
        ok = fate == "recovered"
        self.steps += 1
        self.sessions.add(session_id)
        self.newest[turn] = (fate, why)
        self.turn_first.setdefault(turn, (at, step_id))
        day = self.local.day(at)
        self.days_failed[day] += 1
        if ok:
            self.days_recovered[day] += 1
        self._model(model, (at, step_id), 1, int(ok))
        self._kind(kind, 1, int(ok))

    def _model(self, model: str, first: tuple[int, str], failed: int, recovered: int) -> None:
        counts = self.models.get(model)
        if counts is None:
            self.models[model] = [first, failed, recovered]
            return
        counts[0] = min(counts[0], first)
        counts[1] += failed
        counts[2] += recovered

    def _kind(self, kind: str, failed: int, recovered: int) -> None:
        per_kind = self.kinds.get(kind)
        if per_kind is None:
            per_kind = self.kinds[kind] = [0, 0]
        per_kind[0] += failed
        per_kind[1] += recovered

    def add_fold(self, fold: Fold) -> None:
        """Sessions without records, each counted once when its digest was made, summed
        (``fold_tallies``) and folded in once."""
        self.steps += fold[F_STEPS]
        self.tallied_sessions += fold[F_SESSIONS]
        for fate, why, count in fold[F_TURNS]:
            self.tallied_turns[(fate, why)] += count
        self.ownerless += [((at, step_id), sid) for (at, step_id), sid in fold[F_OWNERLESS]]
        for day, failed in fold[F_DAYS]:
            self.days_failed[date.fromordinal(day)] += failed
        for model, at, first_id, failed in fold[F_MODELS]:
            self._model(model, (at, first_id), failed, 0)
        for kind, failed in fold[F_KINDS]:
            self._kind(kind, failed, 0)

    def turn_fates(self) -> Counter[tuple[str, str | None]]:
        """(fate, why) -> failed turns (a turn takes the fate of its newest failed step)."""
        return Counter(self.newest.values()) + self.tallied_turns

    def ownerless_sessions(self) -> tuple[str, ...]:
        """Sessions with a failed turn left alone for want of a live owner, in the order of
        their first such turn's first failure."""
        found = [
            (self.turn_first[turn], turn[0])
            for turn, fate in self.newest.items()
            if fate == ("left_alone", "no_owner")
        ]
        return tuple(dict.fromkeys(sid for _, sid in sorted(found + self.ownerless)))


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


def build_summary(
    db: OpenCodeDB,
    findings: Mapping[Kind, Sequence[ClassifiedStep]],
    records: DaemonRecords,
    repetition: Sequence[RepetitionStop],
    *,
    since: datetime | None,
    now: datetime,
    zone: tzinfo | None = None,
    tallied: Sequence[Fold] = (),
) -> Summary:
    """``records`` must already be limited to the window (``load_records(since=...)``);
    ``tallied``: sessions of the window counted from their digests (not in ``findings``)."""
    full = [e for found in findings.values() for e in entries_of(found)]
    outcomes = continuation_outcomes(db, records.injections)
    parents = _parents(db, {i.step.session_id for i in full})
    recorded = {d.session_id for d in records.decisions} | {
        i.session_id for i in records.injections
    }
    judge = _Judge(records, outcomes, parents)
    tallies = _Tallies(zone)
    judged = (judge.judge(i) for i in full if i.step.session_id in recorded)
    for step_fate in sorted(judged, key=itemgetter(F_AT, F_ID)):
        tallies.add(*step_fate)
    # Without records a step's fate needs no judging: its session is tallied as a digest is.
    plain = [i for i in full if i.step.session_id not in recorded]
    tallies.add_fold(fold_tallies(_session_tallies(plain, parents, tallies.local).items()))
    for fold in tallied:
        tallies.add_fold(fold)
    turns = tallies.turn_fates()
    by_fate: Counter[str] = Counter()
    for (fate, _), count in turns.items():
        by_fate[fate] += count
    actions: dict[str, Counter[str]] = defaultdict(Counter)
    for decision in records.decisions:
        actions[decision.action][decision.kind or "-"] += 1
    would: dict[str, Counter[str]] = defaultdict(Counter)
    for decision in records.observed:
        would[decision.action][decision.kind or "-"] += 1
    models, kinds = _breakdowns(tallies, records)
    return Summary(
        failed_steps=tallies.steps,
        failed_turns=sum(turns.values()),
        failed_sessions=len(tallies.sessions) + tallies.tallied_sessions,
        turns={fate: by_fate[fate] for fate in FATES},
        left_alone={reason: turns[("left_alone", reason)] for reason in LEFT_ALONE},
        loops=dict(Counter(s.taken for s in repetition)),
        continuations=dict(Counter(outcomes[i.id].status for i in records.injections)),
        decisions={a: dict(sorted(k.items())) for a, k in sorted(actions.items())},
        per_day=_per_day(tallies, since, now, zone),
        by_model=models,
        by_kind=kinds,
        ownerless_sessions=tallies.ownerless_sessions(),
        observed={a: dict(sorted(k.items())) for a, k in sorted(would.items())},
    )


def _session_tallies(
    items: Sequence[ClassifiedStep], parents: Mapping[str, str | None], days: LocalDays
) -> dict[str, SessionTally]:
    rows: dict[str, list[LightRow]] = defaultdict(list)
    for item in items:
        rows[item.step.session_id].append(light_row(item, False, 0))
    return {
        sid: session_tally(found, child=bool(parents.get(sid)), days=days)
        for sid, found in rows.items()
    }


def _parents(db: OpenCodeDB, session_ids: set[str]) -> dict[str, str | None]:
    return db.parent_ids(session_ids)
