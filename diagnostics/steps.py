"""Classify historical assistant steps the way the daemon would have seen them.

A report finds candidate steps with cheap SQL; this module classifies each candidate as the
newest step of its turn, in batches (parts for all candidates at once, one indexed lookup per
session), so the cost grows with the number of candidates, not with the database.

The turn handed to the classifier holds the steps of the same parent message up to the
candidate. Only a run of empty ``unknown`` finishes (runaway) looks further back than the last
step, so the earlier steps are loaded only for groups long enough to be one.

What the owning process knew at the time is gone, so the live facts are inferred from what
followed: a later step of the same turn means OpenCode went on by itself (no live facts, as
the classifier treats a looping ``unknown`` finish); a later message, a finished step or an
old one means nobody is working on it (idle); otherwise the step may still be in progress
(busy), so it is not reported yet.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Protocol, cast

from opencode_autoretry.diagnostics.records import DaemonRecords, daemon_abort_for
from opencode_autoretry.models import Kind, LiveFacts, Message, Role, Turn, Verdict, to_epoch_ms
from opencode_autoretry.opencode.db import MessageRow, OpenCodeDB
from opencode_autoretry.opencode.shapes import stand_in_opener

#: A step with nothing after it is taken as settled once it is this old.
SETTLE = timedelta(minutes=5)
SETTLE_MS = int(SETTLE.total_seconds() * 1000)
IDLE = LiveFacts()
BUSY = LiveFacts(busy=True)


@dataclass(frozen=True)
class ClassifiedStep:
    """An abnormal step, the turn it belongs to and its verdict."""

    step: Message
    turn: Turn
    verdict: Verdict


def _key(message: Message) -> tuple[datetime, str]:
    """Creation order (aware datetimes compare like their epoch milliseconds)."""
    return message.time_created, message.id


def _live(db: OpenCodeDB, step: Message, is_last: bool, now: datetime) -> LiveFacts | None:
    """What the owner knew, inferred from what followed (one indexed probe, only when the
    answer matters: a recent step, or an ``unknown`` finish that OpenCode may have followed)."""
    if not is_last:
        return None  # a later step of the same turn: OpenCode went on by itself
    recent = now - step.time_created < SETTLE
    if not recent and step.finish != "unknown":
        return IDLE
    following = db.next_row(step)
    if step.finish == "unknown" and _same_turn(following, step):
        return None  # OpenCode started another step of the same turn right after it
    if not recent or following is not None:
        return IDLE
    done = step.time_completed is not None and (step.error or step.finish not in (None, "unknown"))
    return IDLE if done else BUSY


def _same_turn(following: MessageRow | None, step: Message) -> bool:
    if following is None or following.data.get("role") != "assistant":
        return False
    parent = following.data.get("parentID")
    return (parent if isinstance(parent, str) and parent else None) == step.parent_id


def _group_steps(db: OpenCodeDB, group: Sequence[Message], from_parent: bool) -> list[Message]:
    """Every step of the group's parent up to its last candidate, in order: from the first
    candidate on (enough to see a run of empty steps), or from the parent message itself."""
    first, last = group[0], group[-1]
    start, end = to_epoch_ms(first.time_created), to_epoch_ms(last.time_created)
    if not from_parent and set(db.ids_between(first.session_id, start, end)) == {
        m.id for m in group
    }:
        return list(group)  # nothing else happened in between: the group is the context
    parent = db.row(first.parent_id) if from_parent and first.parent_id else None
    if parent is not None and parent.session_id == first.session_id:
        start = parent.time_created
    window = db.window(first.session_id, start, end)
    return [m for m in window if m.role is Role.ASSISTANT and m.parent_id == first.parent_id]


def _classify_group(
    db: OpenCodeDB,
    group: Sequence[Message],
    now: datetime,
    runaway_steps: int,
    whole_turn: bool,
) -> list[ClassifiedStep]:
    # Classified only here (a report on a warm index reads the digests): issue 21.
    from opencode_autoretry.decisions.classifier import classify

    loaded = whole_turn or len(group) >= runaway_steps
    context = _group_steps(db, group, whole_turn) if loaded else list(group)
    position = {m.id: i for i, m in enumerate(context)}
    opener = stand_in_opener(group[0])  # the group shares its session and parent
    found: list[ClassifiedStep] = []
    for index, step in enumerate(group):
        upto = position.get(step.id)
        steps = tuple(context[: upto + 1]) if loaded and upto is not None else (step,)
        turn = Turn(step.session_id, opener, steps)
        live = _live(db, step, index == len(group) - 1, now)
        verdict = classify(turn, live, now=now, runaway_steps=runaway_steps)
        found.append(ClassifiedStep(step, turn, verdict))
    return found


class StepMemo(Protocol):
    """Remembers classifications (diagnostics/index/indexed_db.py): ``classify`` must return
    exactly what ``classify_rows`` would (it calls it for what it does not remember)."""

    def classify(
        self,
        db: OpenCodeDB,
        rows: Sequence[MessageRow],
        *,
        now: datetime,
        runaway_steps: int,
        whole_turn: bool,
        lean: bool,
    ) -> list[ClassifiedStep]: ...


def classify_rows(
    db: OpenCodeDB,
    rows: Iterable[MessageRow],
    *,
    now: datetime,
    runaway_steps: int = 6,
    whole_turn: bool = False,
    lean: bool = False,
    memo: StepMemo | None = None,
) -> list[ClassifiedStep]:
    """Classify each assistant row in ``rows`` (others are ignored), oldest first.

    ``whole_turn`` loads every earlier step of each turn (for a few rows: timeline, trace);
    otherwise only groups long enough to be a runaway loop are loaded (diagnose). ``lean``
    leaves unread the parts of errored steps (the classifier decides those on the error
    alone: its contract is that the last step's error wins over finish and parts) and the
    step-start/step-finish parts (it reads only text, reasoning and tool parts).
    ``memo`` answers instead, from what it remembers (the report index)."""
    if memo is not None:
        return memo.classify(
            db, list(rows), now=now, runaway_steps=runaway_steps, whole_turn=whole_turn, lean=lean
        )
    assistants = [r for r in rows if r.data.get("role") == "assistant"]
    steps = db.with_parts(assistants, errored=not lean, step_parts=not lean)
    groups: dict[tuple[str, str], list[Message]] = defaultdict(list)
    for step in steps:
        groups[(step.session_id, step.parent_id or "")].append(step)
    found: list[ClassifiedStep] = []
    for group in groups.values():
        group.sort(key=_key)
        found.extend(_classify_group(db, group, now, max(1, runaway_steps), whole_turn))
    found.sort(key=lambda c: _key(c.step))
    return found


def classify_streamed(
    db: OpenCodeDB,
    batches: Iterable[Sequence[MessageRow]],
    *,
    now: datetime,
    runaway_steps: int = 6,
    lean: bool = False,
    memo: StepMemo | None = None,
) -> list[ClassifiedStep]:
    """Classify rows arriving in consecutive batches (e.g. rowid ranges scanned by another
    thread) while later batches are still being read. A turn's steps are adjacent, so a
    (session, parent) group is classified once a batch arrives without it; groups seen in
    the latest batch wait, so a batch boundary never splits a group (or a runaway loop)."""
    pending: dict[tuple[str, str], list[MessageRow]] = defaultdict(list)
    found: list[ClassifiedStep] = []
    for batch in batches:
        seen = {(r.session_id, str(r.data.get("parentID") or "")) for r in batch}
        ready = [row for key in list(pending) if key not in seen for row in pending.pop(key)]
        for row in batch:
            pending[(row.session_id, str(row.data.get("parentID") or ""))].append(row)
        found += classify_rows(
            db, ready, now=now, runaway_steps=runaway_steps, lean=lean, memo=memo
        )
    rest = [row for rows in pending.values() for row in rows]
    found += classify_rows(db, rest, now=now, runaway_steps=runaway_steps, lean=lean, memo=memo)
    found.sort(key=lambda c: _key(c.step))
    return found


def classify_message(
    db: OpenCodeDB, message: Message, *, now: datetime, runaway_steps: int = 6
) -> ClassifiedStep | None:
    """One assistant message, classified in the context of its turn."""
    row = db.row(message.id) if message.role is Role.ASSISTANT else None
    if row is None:
        return None
    found = classify_rows(db, [row], now=now, runaway_steps=runaway_steps, whole_turn=True)
    return found[0] if found else None


#: The kinds the reports list as abnormal, in the order diagnose prints them.
ABNORMAL_KINDS: tuple[Kind, ...] = (
    Kind.BLANK,
    Kind.THINK_ONLY,
    Kind.FORGED_LENGTH,
    Kind.TRUNCATED,
    Kind.TOOL_AS_TEXT,
    Kind.DISCONNECT,
    Kind.STREAM_TRUNCATED,
    Kind.TIMEOUT,
    Kind.RATE_LIMIT,
    Kind.SERVER_ERROR,
    Kind.TERMINAL,
    Kind.SILENT,
    Kind.ORPHAN,
    Kind.RUNAWAY,
    Kind.STALL,
    Kind.USER_ABORT,
)


def relabel_daemon_aborts(
    found: Iterable[ClassifiedStep], records: DaemonRecords
) -> list[ClassifiedStep]:
    """Steps the daemon itself aborted (to stop a loop, a stall or a runaway) carry a
    MessageAbortedError; report them as what the daemon stopped, not as a user abort."""
    result = []
    for item in found:
        decision = (
            daemon_abort_for(records, item.step) if item.verdict.kind is Kind.USER_ABORT else None
        )
        if decision is not None and decision.kind in Kind.__members__.values():
            verdict = replace(
                item.verdict,
                kind=Kind(cast(str, decision.kind)),
                reason=f"aborted by autoretry (decision #{decision.id}): {decision.reason}",
            )
            item = replace(item, verdict=verdict)
        result.append(item)
    return result


def lean_step(item: ClassifiedStep, keep_parts: bool = False) -> ClassifiedStep:
    """What the reports read of a classified step, without what only the classifier read:
    the earlier steps of its turn, and (for diagnose) its parts. A memo hit then rebuilds a
    few objects per step instead of a whole turn (decoding them is most of a warm run)."""
    step = item.step if keep_parts else replace(item.step, parts=())
    turn = Turn(item.turn.session_id, item.turn.user, (step,))
    return replace(item, step=step, turn=turn)
