"""PURE: a root turn that ended healthy with todos left -> a verdict for the decision core.

OpenCode's ``todowrite`` tool keeps the session's todo list (the ``todo`` table). When a turn
ends with ``finish: stop`` and text while items are still ``pending`` or ``in_progress``, the
agent often just stopped in the middle ("I'll start with the first one."). The verdict built
here is kind ``unfinished_todos`` (budget group ``todos``) and carries its own text naming the
open items; it is retryable only when no guard holds:

- the reply asks the user, waits for a decision, says it is done or blocked
  (``reply_intent``: in doubt it is a question);
- the user refused something in this turn (a rejected permission, a dismissed question);
- the last reply has a ``question`` tool call still unanswered (pending or running);
- the turn was aborted by the user, ended on a context overflow, or was compacted less than
  ``COMPACTION_QUIET_S`` (60 s) ago (the daemon also reports compactions and aborts it saw as
  events, which can arrive before or after the rows);
- the agent is one of ``[todos] skip_agents`` (default ``plan``).

The decision core then applies the common gates (off, child session, user abort, a permission
or question pending, busy) and the ``todos`` budget (3 per user turn, a 5 s countdown). Two
continuations in a row that changed no todo's status (**stagnation**) make the verdict carry
``give_up``: the core sends one notice and closes the group for the rest of the turn.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from opencode_autoretry.decisions.error_kinds import classify_error, context_overflowed
from opencode_autoretry.decisions.policy import fill
from opencode_autoretry.models import (
    Kind,
    Message,
    PartType,
    ToolStatus,
    Turn,
    Verdict,
)
from opencode_autoretry.todos.config import TodoConfig

UNFINISHED = frozenset({"pending", "in_progress"})
#: No todo continuation this soon after a compaction: the model has just lost its context.
COMPACTION_QUIET_S = 60.0
MAX_LISTED = 10  # todos named in one message; the rest are counted
# Says what will be sent, so that the user can tell whether to step in.
DEFAULT_TOAST = (
    "autoretry: {count} — continuing in {seconds} s; write anything to stop. "
    "Will send: the open todos (next: {next}), asking to go on unless the last reply asked you "
    "something"
)
MAX_TOAST_TODO_CHARS = 60


@dataclass(frozen=True)
class Todo:
    content: str
    status: str  # pending | in_progress | completed | cancelled
    priority: str = "medium"

    @property
    def unfinished(self) -> bool:
        return self.status in UNFINISHED


Signature = tuple[tuple[str, str], ...]


# --- progress ------------------------------------------------------------------------------


def signature(todos: Sequence[Todo]) -> Signature:
    return tuple((t.content, t.status) for t in todos)


def stagnant_run(history: Sequence[Signature]) -> int:
    """How many of the latest continuations changed no todo: ``history`` holds the todo list
    seen at each healthy end of the turn, the first one before any continuation."""
    run = 0
    for before, after in zip(reversed(history[:-1]), reversed(history[1:]), strict=True):
        if before != after:
            break
        run += 1
    return run


def changed(before: Signature, after: Signature) -> int:
    """How many todos were added, removed or changed status between two lists."""
    old, new = dict(before), dict(after)
    return sum(1 for key in old.keys() | new.keys() if old.get(key) != new.get(key))


def progress_note(history: Sequence[Signature]) -> str | None:
    """'the last continuation changed 2 todos' / '... changed no todo (2 in a row)'."""
    if len(history) < 2:
        return None
    moved = changed(history[-2], history[-1])
    if moved:
        return f"the last continuation changed {moved} todo(s)"
    return f"the last continuation changed no todo ({stagnant_run(history)} in a row)"


# --- guards --------------------------------------------------------------------------------

_REFUSED = re.compile(r"reject|dismiss|denied|declined", re.IGNORECASE)


def refusal(turn: Turn) -> str | None:
    """A tool call in this turn that the user refused (permission rejected, question dismissed)."""
    for step in turn.steps:
        for part in step.parts:
            if part.type is not PartType.TOOL or part.tool_status is not ToolStatus.ERROR:
                continue
            state = part.data.get("state")
            error = str(state.get("error", "")) if isinstance(state, Mapping) else ""
            if _REFUSED.search(error):
                return f"the user refused the {part.tool} call ({error[:80]})"
    return None


def unanswered_question(step: Message) -> str | None:
    """A ``question`` tool call in the last reply that the user has not answered yet."""
    for part in step.parts:
        if part.type is PartType.TOOL and part.tool == "question" and part.tool_status in (
            ToolStatus.PENDING, ToolStatus.RUNNING, None
        ):
            return "the reply has a question tool call the user has not answered"
    return None


def aborted_or_overflowed(turn: Turn) -> str | None:
    """A step of this turn ended in a user abort or a context overflow: never continued."""
    for step in turn.steps:
        if step.error is None:
            continue
        kind, _ = classify_error(step.error)
        if kind is Kind.USER_ABORT:
            return "the user aborted this turn"
        if context_overflowed(step.error):
            return "the turn ended on a context overflow"
    return None


def last_compaction(turn: Turn) -> datetime | None:
    """When this turn was last compacted (a summary step or a compaction part), if it was."""
    times = [
        m.time_completed or m.time_created
        for m in (*turn.steps, *turn.followups)
        if m.summary or m.mode == "compaction"
        or any(p.type is PartType.COMPACTION for p in m.parts)
    ]
    return max(times) if times else None


def recently_compacted(turn: Turn, compacted_at: datetime | None, now: datetime) -> str | None:
    """A compaction (seen in the rows or as an event) less than ``COMPACTION_QUIET_S`` ago."""
    seen = [t for t in (last_compaction(turn), compacted_at) if t is not None]
    if not seen:
        return None
    ago = (now - max(seen)).total_seconds()
    if ago < COMPACTION_QUIET_S:
        quiet = f"{COMPACTION_QUIET_S:g}"
        return f"the session was compacted {max(ago, 0):.0f} s ago (quiet for {quiet} s)"
    return None


def _guard_holds(
    turn: Turn, last: Message, now: datetime | None, compacted_at: datetime | None,
    aborted: str | None,
) -> str | None:
    """The guards that do not read the reply: an abort, an overflow, a pending question, a
    fresh compaction."""
    found = aborted or aborted_or_overflowed(turn) or unanswered_question(last)
    if found is None and now is not None:
        found = recently_compacted(turn, compacted_at, now)
    return found


def final_text(step: Message) -> str:
    return "\n".join(
        p.text for p in step.parts if p.type is PartType.TEXT and not p.synthetic and p.text.strip()
    )


def continuation_text(config: TodoConfig, unfinished: Sequence[Todo]) -> str:
    lines = [f"- [{t.status}] {t.content}" for t in unfinished[:MAX_LISTED]]
    if len(unfinished) > MAX_LISTED:
        lines.append(f"- … and {len(unfinished) - MAX_LISTED} more")
    return fill(config.message, count=len(unfinished), todos="\n".join(lines))


def countdown_toast(config: TodoConfig, unfinished: Sequence[Todo]) -> str:
    left = len(unfinished)
    count = f"{left} todo left" if left == 1 else f"{left} todos left"
    first = " ".join(unfinished[0].content.split()) if unfinished else ""
    if len(first) > MAX_TOAST_TODO_CHARS:
        first = first[: MAX_TOAST_TODO_CHARS - 1] + "…"
    return fill(DEFAULT_TOAST, count=count, seconds=f"{config.countdown:g}", next=f"“{first}”")


def todo_verdict(
    turn: Turn,
    todos: Sequence[Todo],
    config: TodoConfig,
    history: Sequence[Signature],
    *,
    agent: str | None,
    refused: str | None = None,
    now: datetime | None = None,
    compacted_at: datetime | None = None,
    aborted: str | None = None,
) -> Verdict | None:
    """The verdict for a healthy end with ``todos``; None when no todo is unfinished."""
    unfinished = [t for t in todos if t.unfinished]
    last = turn.last_step
    if not unfinished or last is None:
        return None
    left = f"{len(unfinished)} of {len(todos)} todos unfinished"
    refused = refused or refusal(turn)
    # Its ~60 patterns compile on first use: loading [todos] config (every command) skips them.
    from opencode_autoretry.todos.reply_intent import read_intent

    intent = read_intent(final_text(last))
    blocker = None
    if agent is not None and agent in config.skip_agents:
        blocker = f"agent {agent!r} is in todos.skip_agents"
    elif refused:
        blocker = refused
    elif found := _guard_holds(turn, last, now, compacted_at, aborted):
        blocker = found
    elif not intent.may_continue:
        blocker = f"the reply {intent.intent.value}: {intent.reason}"
    if blocker is not None:
        return Verdict(Kind.UNFINISHED_TODOS, False, f"{left}; {blocker}", last.id)
    run = stagnant_run(history)
    give_up = None
    if run >= config.stagnation:
        give_up = f"the last {run} continuations changed no todo (stagnation)"
    note = progress_note(history)
    reason = f"{left}; {note}" if note else left
    text = continuation_text(config, unfinished)
    return Verdict(Kind.UNFINISHED_TODOS, True, reason, last.id, text=text, give_up=give_up)
