"""PURE: the soak's invariants over plain rows (issue 11); used by bench/soak.py and the e2e test.

Inputs are rows read elsewhere (``soak_observe``): OpenCode's sessions and messages, the
daemon's decisions and injections, the fake provider's request log, and the plan (which fault
each tagged turn drew). A turn is the tagged user message and everything up to the next real
user message of its session. The verdict of every turn follows from its fault (``soak_plan``):

- recover: exactly one continuation, a decision of an allowed kind, a clean final answer;
- leave / healthy / cancel: nothing sent in the turn (cancel: at most the one retry the user's
  message did not beat, and never one after it);
- enough happened (``Floor``): a slow machine that fits only a few turns, or chaos that never
  came, fails as "too little happened" rather than passing on next to nothing;
- everywhere: nothing sent to a child, no injection delivered twice, no budget overrun, a
  decision for every ended turn that needed one, nothing left open at the end, no daemon crash,
  and the provider saw no continuation that OpenCode's DB does not show.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from soak_plan import BY_NAME, Expect, Fault, tag_of

SEND_ACTIONS = frozenset({"inject", "inject_at", "abort_then_inject"})


@dataclass(frozen=True)
class SessionRow:
    id: str
    parent_id: str | None


@dataclass(frozen=True)
class MessageRow:
    id: str
    session_id: str
    role: str  # "user" | "assistant"
    text: str = ""  # the user's text parts, joined
    injection: int | None = None  # the autoretry marker's injection id (user messages)
    finish: str | None = None  # assistant
    error: str | None = None  # assistant: the error's name


@dataclass(frozen=True)
class DecisionRow:
    id: int
    session_id: str
    turn_id: str | None
    kind: str | None
    action: str
    reason: str
    group: str | None = None
    used_after: int = 0
    limit: int = 0


@dataclass(frozen=True)
class InjectionRow:
    id: int
    decision_id: int
    session_id: str
    turn_id: str | None
    state: str


@dataclass(frozen=True)
class PlannedTurn:
    tag: str
    session_id: str
    fault: str  # a soak_plan.MENU name
    stream_lost: bool = False  # the daemon lost its live view of it (``Fault.if_stream_lost``)


@dataclass(frozen=True)
class Observed:
    """Everything the checker reads; ``messages`` in OpenCode's order (id order per session)."""

    plan: Sequence[PlannedTurn]
    sessions: Sequence[SessionRow]
    messages: Sequence[MessageRow]
    decisions: Sequence[DecisionRow]
    injections: Sequence[InjectionRow]
    provider_continuations: Mapping[str, int] = field(default_factory=dict)  # tag -> seen
    daemon_exits: Sequence[int] = ()  # every exit but the SIGKILLs the soak sent
    daemon_tracebacks: int = 0
    group_limits: Mapping[str, int] = field(default_factory=dict)
    interruption_groups: frozenset[str] = frozenset()
    interruption_cap: int = 2


@dataclass(frozen=True)
class Floor:
    """The least a run must do to count: turns in all, turns per fault family (``Expect``:
    healthy, recover, leave, cancel) and chaos events by their ``chaos`` name."""

    turns: int
    families: Mapping[str, int] = field(default_factory=dict)
    chaos: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Violation:
    rule: str
    where: str
    detail: str


@dataclass(frozen=True)
class Segment:
    """One turn as OpenCode stored it: the opening user message and what followed it."""

    opener: MessageRow
    after: tuple[MessageRow, ...]

    @property
    def injected(self) -> list[MessageRow]:
        return [m for m in self.after if m.role == "user" and m.injection is not None]

    @property
    def ends_clean(self) -> bool:
        answers = [m for m in self.after if m.role == "assistant"]
        return bool(answers) and answers[-1].finish == "stop" and answers[-1].error is None


def segments(messages: Iterable[MessageRow]) -> dict[str, list[Segment]]:
    """Each session's turns: a real (not injected) user message opens one."""
    by_session: dict[str, list[list[MessageRow]]] = {}
    for message in messages:
        turns = by_session.setdefault(message.session_id, [])
        if message.role == "user" and message.injection is None:
            turns.append([message])
        elif turns:
            turns[-1].append(message)
    return {
        sid: [Segment(t[0], tuple(t[1:])) for t in turns] for sid, turns in by_session.items()
    }


def _turn_rules(
    fault: Fault, segment: Segment, decided: Sequence[DecisionRow], stream_lost: bool = False
) -> list[str]:
    """What is wrong with one tagged turn, given its fault (empty: it went as it must)."""
    sent = len(segment.injected)
    kinds = fault.kinds | fault.if_stream_lost if stream_lost else fault.kinds
    problems: list[str] = []
    if fault.expect is Expect.RECOVER:
        if sent == 0:
            problems.append("not recovered: no continuation")
        elif sent > 1:
            problems.append(f"{sent} continuations for one fault")
        elif not segment.ends_clean:
            problems.append("continued but no clean answer followed")
        if not any(d.kind in kinds and d.action in SEND_ACTIONS for d in decided):
            problems.append(f"no send decision of kind {sorted(kinds)}: "
                            f"{[(d.kind, d.action) for d in decided]}")
    elif fault.expect is Expect.CANCEL:
        if sent > 1:
            problems.append(f"{sent} continuations while the user was writing")
    elif sent:
        problems.append(f"sent {sent} continuation(s) where nothing belongs ({fault.expect})")
    if fault.expect is Expect.CANCEL and not any(d.kind in fault.kinds for d in decided):
        problems.append("lost decision: the retry the user's message beat was never decided")
    if fault.expect is Expect.LEAVE and not _left_alone(fault, decided):
        problems.append(f"no decision to leave it alone: {[(d.kind, d.reason) for d in decided]}")
    if fault.expect is Expect.HEALTHY and not segment.ends_clean:
        problems.append("a healthy turn did not end with a clean answer")
    return problems


def _left_alone(fault: Fault, decided: Sequence[DecisionRow]) -> bool:
    return any(d.kind in fault.kinds and d.action not in SEND_ACTIONS for d in decided)


def check_turns(observed: Observed) -> list[Violation]:
    """Every planned turn against its fault; every untagged turn must have nothing sent."""
    by_session = segments(observed.messages)
    by_tag = {tag_of(s.opener.text): s for turns in by_session.values() for s in turns}
    by_turn: dict[str | None, list[DecisionRow]] = {}
    for decision in observed.decisions:
        by_turn.setdefault(decision.turn_id, []).append(decision)
    found: list[Violation] = []
    for planned in observed.plan:
        segment = by_tag.get(planned.tag)
        where = f"{planned.tag} ({planned.fault}) in {planned.session_id}"
        if segment is None:
            found.append(Violation("turn missing", where, "no user message carries the tag"))
            continue
        decided = by_turn.get(segment.opener.id, [])
        fault = BY_NAME[planned.fault]
        found += [Violation("turn outcome", where, p)
                  for p in _turn_rules(fault, segment, decided, planned.stream_lost)]
    for tag, segment in by_tag.items():
        if tag is None and segment.injected:
            found.append(Violation("sent to an untagged turn", segment.opener.session_id,
                                   f"{len(segment.injected)} after {segment.opener.id}"))
    return found


def check_children(observed: Observed) -> list[Violation]:
    children = {s.id for s in observed.sessions if s.parent_id}
    found = [Violation("sent to a child", m.session_id, f"message {m.id}")
             for m in observed.messages if m.session_id in children and m.injection is not None]
    found += [Violation("injection for a child", i.session_id, f"injection {i.id} ({i.state})")
              for i in observed.injections if i.session_id in children]
    return found


def check_injections(observed: Observed) -> list[Violation]:
    """No injection delivered twice, one per decision, none left open, none unrecorded."""
    found: list[Violation] = []
    delivered = Counter(m.injection for m in observed.messages if m.injection is not None)
    found += [Violation("doubled continuation", f"injection {i}", f"delivered {n} times")
              for i, n in delivered.items() if n > 1]
    per_decision = Counter(i.decision_id for i in observed.injections)
    found += [Violation("doubled injection", f"decision {d}", f"{n} injections")
              for d, n in per_decision.items() if n > 1]
    known = {i.id for i in observed.injections}
    found += [Violation("unrecorded continuation", f"injection {i}", "not in the store")
              for i in delivered if i not in known]
    found += [Violation("left open", i.session_id, f"injection {i.id} still {i.state}")
              for i in observed.injections if i.state in ("intent", "sent")]
    return found


def check_budgets(observed: Observed) -> list[Violation]:
    """Per user turn: no group sent more than its limit, interruptions within the shared cap."""
    sends = [d for d in observed.decisions if d.action in SEND_ACTIONS]
    found = [Violation("budget overrun", f"decision {d.id}", f"{d.group} {d.used_after}/{d.limit}")
             for d in sends if d.limit and d.used_after > d.limit]
    per_turn: dict[tuple[str | None, str | None], int] = Counter(
        (d.turn_id, d.group) for d in sends)
    for (turn, group), n in per_turn.items():
        limit = observed.group_limits.get(group or "")
        if limit is not None and n > limit:
            found.append(Violation("budget overrun", f"turn {turn}", f"{group}: {n} > {limit}"))
    shared = Counter(d.turn_id for d in sends if d.group in observed.interruption_groups)
    found += [Violation("interruption cap", f"turn {t}", f"{n} > {observed.interruption_cap}")
              for t, n in shared.items() if n > observed.interruption_cap]
    return found


def check_provider(observed: Observed) -> list[Violation]:
    """The provider saw no more continuations of a turn than OpenCode's DB shows."""
    by_tag = {tag_of(s.opener.text): s for turns in segments(observed.messages).values()
              for s in turns}
    found: list[Violation] = []
    for tag, seen in observed.provider_continuations.items():
        segment = by_tag.get(tag)
        stored = len(segment.injected) if segment else 0
        if seen > stored:
            detail = f"{seen} continuations, {stored} stored"
            found.append(Violation("provider saw more", str(tag), detail))
    return found


def check_daemon(observed: Observed) -> list[Violation]:
    found = [Violation("daemon crash", "exit", f"exit code {code}")
             for code in observed.daemon_exits if code != 0]
    if observed.daemon_tracebacks:
        found.append(Violation("daemon crash", "log", f"{observed.daemon_tracebacks} tracebacks"))
    return found


def check_floor(
    plan: Sequence[PlannedTurn], chaos: Mapping[str, int], floor: Floor
) -> list[Violation]:
    """A run that did too little proves nothing: below any minimum is a violation."""
    found: list[Violation] = []
    if len(plan) < floor.turns:
        found.append(Violation("too little happened", "turns",
                               f"{len(plan)} turns, at least {floor.turns} expected"))
    families = Counter(BY_NAME[p.fault].expect.value for p in plan)
    found += [Violation("too little happened", f"{family} turns",
                        f"{families[family]}, at least {least} expected")
              for family, least in sorted(floor.families.items()) if families[family] < least]
    found += [Violation("too little happened", name,
                        f"{chaos.get(name, 0)}, at least {least} expected")
              for name, least in sorted(floor.chaos.items()) if chaos.get(name, 0) < least]
    return found


def check(observed: Observed) -> list[Violation]:
    return [
        *check_turns(observed), *check_children(observed), *check_injections(observed),
        *check_budgets(observed), *check_provider(observed), *check_daemon(observed),
    ]


def _outcomes(observed: Observed, violations: Sequence[Violation]) -> Counter[str]:
    turn_rules = ("turn outcome", "turn missing")
    bad = {v.where.split(" ", 1)[0] for v in violations if v.rule in turn_rules}
    counts: Counter[str] = Counter()
    for planned in observed.plan:
        expect = BY_NAME[planned.fault].expect
        ok = planned.tag not in bad
        counts[f"{expect}:{'ok' if ok else 'bad'}"] += 1
    return counts


def figures(
    observed: Observed, violations: Sequence[Violation], chaos: Mapping[str, int]
) -> list[tuple[str, str]]:
    """The soak's table, as (figure, value) rows."""
    children = sum(1 for s in observed.sessions if s.parent_id)
    roots = {p.session_id for p in observed.plan}
    outcomes = _outcomes(observed, violations)
    faults = Counter(p.fault for p in observed.plan)
    left = outcomes["leave:ok"] + outcomes["cancel:ok"]
    rows = [
        ("sessions (root / subagent children)", f"{len(roots)} / {children}"),
        ("turns", str(len(observed.plan))),
        ("turns recovered (of those that needed it)",
         f"{outcomes['recover:ok']} / {outcomes['recover:ok'] + outcomes['recover:bad']}"),
        ("turns left alone correctly",
         f"{left} / {left + outcomes['leave:bad'] + outcomes['cancel:bad']}"),
        ("healthy turns untouched",
         f"{outcomes['healthy:ok']} / {outcomes['healthy:ok'] + outcomes['healthy:bad']}"),
        ("continuations delivered", str(sum(1 for m in observed.messages if m.injection))),
        ("decisions recorded", str(len(observed.decisions))),
        *((f"chaos: {name}", str(n)) for name, n in sorted(chaos.items())),
        ("violations", str(len(violations))),
    ]
    rows += [(f"fault: {name}", str(n)) for name, n in sorted(faults.items())]
    return rows


def table(rows: Sequence[tuple[str, str]]) -> str:
    """A Markdown table (the bench README takes it as is)."""
    width = max(len(name) for name, _ in rows)
    lines = [f"| {'figure'.ljust(width)} | value |", f"| {'-' * width} | --- |"]
    lines += [f"| {name.ljust(width)} | {value} |" for name, value in rows]
    return "\n".join(lines)
