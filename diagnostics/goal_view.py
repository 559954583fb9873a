"""Goals (issue 22) as the reports show them: each goal's command, how it ended, and every
run of its check (exit status, duration, the stored excerpt of its output).

The facts are the store's ``goals`` and ``goal_checks`` rows (``DaemonRecords``); the check's
output is untrusted text and reaches the terminal through ``terminal_text`` only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from opencode_autoretry.diagnostics.records import DaemonRecords
from opencode_autoretry.diagnostics.render import Style, excerpt, iso, session_ref
from opencode_autoretry.store.database import GoalCheckRecord, GoalRecord
from opencode_autoretry.terminal_text import visible


def goals_of(records: DaemonRecords, session_id: str | None
             ) -> tuple[tuple[GoalRecord, tuple[GoalCheckRecord, ...]], ...]:
    """Each goal of the session (or all) with its check runs, oldest first."""
    return tuple(
        (goal, tuple(c for c in records.goal_checks if c.goal_id == goal.id))
        for goal in records.goals if session_id in (None, goal.session_id)
    )


def check_words(check: GoalCheckRecord) -> str:
    if check.timed_out:
        return f"timed out after {check.duration_ms / 1000:.1f} s (killed)"
    status = "passed" if check.exit_code == 0 else f"failed, exit status {check.exit_code}"
    return f"{status} in {check.duration_ms / 1000:.1f} s"


def goal_json(goal: GoalRecord, checks: Sequence[GoalCheckRecord]) -> dict[str, Any]:
    return {
        "id": goal.id, "session_id": goal.session_id, "command": goal.command,
        "turn_id": goal.turn_id, "state": goal.state, "outcome": goal.outcome,
        "set_at": iso(goal.set_at), "ended_at": iso(goal.ended_at),
        "checks": [{"time": iso(c.at), "reply_id": c.reply_id, "exit_code": c.exit_code,
                    "duration_ms": c.duration_ms, "timed_out": c.timed_out,
                    "excerpt": c.excerpt, "decision_id": c.decision_id} for c in checks],
    }


def goal_lines(goals: Sequence[tuple[GoalRecord, Sequence[GoalCheckRecord]]], style: Style
               ) -> list[str]:
    lines = [f"Goals: {len(goals)}"]
    colour = {"met": "green", "given_up": "red", "ended": "yellow"}
    for goal, checks in goals:
        state = style.paint(goal.state, colour.get(goal.state, "bright_black"))
        outcome = f": {goal.outcome}" if goal.outcome else ""
        lines.append(f"[{style.local(goal.set_at)}] ses={session_ref(goal.session_id)} goal "
                     f"`{visible(excerpt(goal.command, 60))}` — {state}{visible(outcome)}")
        for check in checks:
            said = f" — {visible(excerpt(check.excerpt or '', 60))}" if check.excerpt else ""
            lines.append(f"    [{style.local(check.at)}] goal check {check_words(check)}{said}")
    return lines
