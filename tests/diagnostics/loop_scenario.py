"""A session that loops, as the daemon records it (issue 6): real detectors, real decisions.

Turn 1 loops three times in a stream: remind (abort + trim), replan (abort + trim, in the
reasoning), then the budget is spent: stopped (abort + trim). Turn 2 is a cross-step loop:
reminded without an abort or a trim, and the next step is clean. Turn 3 loops in a stream and
its reminder is sent but not delivered yet: pending. Built with the real ``TailPeriodDetector``,
``LoopFound`` and ``budget.decide``, so the reports parse the reason text the daemon writes.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

from opencode_rows import OpenCodeRows, aborted_error, tokens

from opencode_autoretry.daemon.repetition.watch import LoopFound, live_loop, step_loop
from opencode_autoretry.decisions.budget import DecisionContext, decide
from opencode_autoretry.decisions.policy import load_policy
from opencode_autoretry.models import Action, TurnLedger
from opencode_autoretry.repetition.guard import Detection, StepLoop, TailPeriodDetector
from opencode_autoretry.store.database import Store

INTRO = "Here is the plan for the report. First I will read the notes. "
BLOCK = "I will now check the file again. "
LOOPING_TEXT = INTRO + BLOCK * 40


@dataclass
class LoopSeed:
    db: Path
    store: Path
    session: str = ""
    steps: dict[str, str] = field(default_factory=dict)  # name -> assistant message id
    parts: dict[str, str] = field(default_factory=dict)  # name -> looping part id
    decisions: dict[str, int] = field(default_factory=dict)
    keep: dict[str, int] = field(default_factory=dict)  # name -> keep_chars
    users: dict[str, str] = field(default_factory=dict)


def _stream(text: str, delta: int = 16) -> tuple[str, Detection]:
    """Feeds ``text`` in deltas as a stream would; returns what had streamed when the real
    detector fired (what the abort leaves in OpenCode's DB) and the detection."""
    detector = TailPeriodDetector()
    for start in range(0, len(text), delta):
        found = detector.feed(text[start : start + delta])
        if found is not None:
            return text[: start + delta], found
    raise AssertionError("the fixture text must be a loop for the real detector")


def _part_id(rows: OpenCodeRows, message_id: str, kind: str) -> str:
    row = rows.conn.execute(
        "SELECT id FROM part WHERE message_id = ? AND json_extract(data, '$.type') = ?",
        (message_id, kind),
    ).fetchone()
    return str(row[0])


class _Daemon:
    """Records what ``RepetitionGuard.act`` records, with the real decision core."""

    def __init__(self, rows: OpenCodeRows, store: Store, seed: LoopSeed) -> None:
        self.rows, self.store, self.seed = rows, store, seed
        self.policy = load_policy({})

    def at(self) -> datetime:
        return datetime.fromtimestamp(self.rows.clock / 1000, tz=UTC)

    def act(self, name: str, ledger: TurnLedger, found: LoopFound) -> TurnLedger:
        now = self.at()
        context = DecisionContext(session_id=ledger.session_id, is_child=False)
        decision, ledger = decide(ledger, found.verdict(), context, self.policy, now)
        if not found.live and decision.action is Action.ABORT_THEN_INJECT:
            decision = replace(decision, action=Action.INJECT)  # as the guard does
        decision_id = self.store.record_decision(decision, now, message_id=found.message_id)
        self.seed.decisions[name] = decision_id
        stopped = decision.action in (Action.ABORT_THEN_INJECT, Action.NOTIFY)
        trim = found.trim() if found.live and stopped else None
        if trim is not None:
            self.store.record_trim(
                trim.session_id,
                trim.message_id,
                trim.part_id,
                trim.keep_chars,
                now,
                excerpt=trim.excerpt,
                decision_id=decision_id,
            )
            self.seed.keep[name] = trim.keep_chars
        if decision.action in (Action.ABORT_THEN_INJECT, Action.INJECT):
            assert decision.text is not None
            injection = self.store.record_intent(
                decision_id, ledger.session_id, ledger.turn_id, decision.text, None, at=now
            )
            self.store.mark_sent(injection, now)
            if name != "pending":  # the pending one is sent but not delivered yet
                mid = self.rows.injected(
                    ledger.session_id,
                    decision=decision_id,
                    kind="repetition",
                    injection=injection,
                    text=decision.text,
                )
                self.store.mark_confirmed(injection, self.at(), mid)
                self.seed.users[name] = mid
        return ledger

    def looping_step(self, name: str, parent: str, channel: str) -> LoopFound:
        sid = self.seed.session
        streamed, detection = _stream(LOOPING_TEXT)
        kw = {"text": streamed} if channel == "text" else {"reasoning": streamed, "text": None}
        mid = self.rows.assistant(
            sid, parent, finish=None, error=aborted_error(), toks=tokens(100, 900), **kw
        )
        self.seed.steps[name] = mid
        self.seed.parts[name] = pid = _part_id(self.rows, mid, channel)
        return live_loop(sid, mid, pid, channel, detection)


def seed_loops(tmp: Path) -> LoopSeed:
    rows = OpenCodeRows(tmp / "loops.db")
    store = Store.open(tmp / "loops-store.db")
    seed = LoopSeed(tmp / "loops.db", tmp / "loops-store.db")
    daemon = _Daemon(rows, store, seed)
    seed.session = sid = rows.session("loopy-fox")

    turn = rows.user(sid, "Write the report")
    ledger = TurnLedger(sid, turn)
    ledger = daemon.act("remind", ledger, daemon.looping_step("remind", turn, "text"))
    parent = seed.users["remind"]
    ledger = daemon.act("replan", ledger, daemon.looping_step("replan", parent, "reasoning"))
    parent = seed.users["replan"]
    daemon.act("stop", ledger, daemon.looping_step("stop", parent, "text"))

    turn = rows.user(sid, "Run the tests")
    same = rows.assistant(sid, turn, finish="tool-calls", tools=[("bash", "completed")])
    seed.steps["cross"] = same
    found = step_loop(sid, same, StepLoop("tool_repeat", 3, 1, '{"tool":"bash"}'))
    daemon.act("cross", TurnLedger(sid, turn), found)
    seed.steps["clean"] = rows.assistant(sid, seed.users["cross"], toks=tokens(100, 30))

    turn = rows.user(sid, "Summarise")
    daemon.act("pending", TurnLedger(sid, turn), daemon.looping_step("pending", turn, "text"))
    rows.commit()
    rows.close()
    store.close()
    return seed
