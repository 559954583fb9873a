"""What the daemon does when a root turn ends healthy with todos left (issue 9).

The loop hands every healthy, settled turn to ``TodoGuard.on_healthy``. It reads the session's
todo list from OpenCode's DB (read-only), asks the pure ``todos.todo_verdict`` for a verdict,
lets the decision core decide as for any other kind (gates, the ``todos`` budget, the
countdown as the group's delay), and has ``Actions`` perform it: an intent due after the
countdown with the toast "autoretry: 2 todos left — continuing in 5 s; write anything to stop".
A pending continuation is cancelled like any pending retry: a user message, ``/autoretry off``,
the session turning busy.

What this module keeps in memory, per session: the todo lists seen at each healthy end of the
current turn (stagnation is measured on them), whether the user refused a permission or
dismissed a question in it, whether the user aborted it, and when the session was last
compacted (``session.compacted``). A user abort whose event arrives after the healthy end (late)
cancels a continuation still counting down; the countdown is that grace window. After a daemon
restart all this starts afresh; the budget, which is in
the store, still caps the turn at ``max_continuations``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any, Protocol

from opencode_autoretry.causes import Cause, Facts
from opencode_autoretry.daemon.actions import Actions
from opencode_autoretry.daemon.sessions import SessionView
from opencode_autoretry.decisions.error_kinds import ABORT_NAMES
from opencode_autoretry.decisions.policy import fill
from opencode_autoretry.models import Action, BudgetGroup, Decision, Kind, LiveFacts, Turn, Verdict
from opencode_autoretry.store.database import Store
from opencode_autoretry.todos.config import TodoConfig
from opencode_autoretry.todos.continuation import (
    Signature,
    Todo,
    countdown_toast,
    signature,
    todo_verdict,
)

log = logging.getLogger(__name__)

Decide = Callable[[SessionView, Turn, Verdict, LiveFacts, datetime], Decision]
_REFUSALS = {"permission.replied": "a permission was rejected", "question.rejected":
             "a question was dismissed"}


class TodoReader(Protocol):
    def todos(self, session_id: str) -> list[Todo]: ...


class TodoGuard:
    def __init__(
        self,
        config: TodoConfig,
        store: Store,
        actions: Actions,
        db: Callable[[], TodoReader | None],
        decide: Decide,
        send_due: Callable[[datetime, str], None],
    ) -> None:
        self.config = config
        self._store = store
        self._actions = actions
        self._db = db
        self._decide = decide
        self._send_due = send_due
        self._history: dict[str, tuple[str, list[Signature]]] = {}  # session -> (turn, lists)
        self._judged: dict[str, str] = {}  # session -> the last reply judged (idles repeat)
        self._refused: dict[str, str] = {}  # session -> what the user refused in this turn
        self._aborted: set[str] = set()  # sessions whose current turn the user aborted
        self._compacted: dict[str, datetime] = {}  # session -> its last compaction event

    def on_event(
        self, session_id: str, kind: str, props: Mapping[str, Any], now: datetime | None = None,
        *, ours: bool = False,
    ) -> None:
        """``ours``: an abort of ours is in flight (its error event is not the user's)."""
        if kind == "session.compacted" and now is not None:
            self._compacted[session_id] = now
            return
        if kind == "session.error" and not ours and _is_abort(props.get("error")):
            self._aborted.add(session_id)
            if now is not None:  # nothing of this turn may go out any more
                self._actions.cancel_open(session_id, now, "cancelled: the user aborted this turn")
            return
        if kind not in _REFUSALS:
            return
        reply = str(props.get("reply") or props.get("response") or "")
        if kind == "question.rejected" or "reject" in reply or "deny" in reply:
            self._refused[session_id] = _REFUSALS[kind]

    def aborted(self, session_id: str) -> bool:
        """The user aborted the session's current turn (its abort event was seen)."""
        return session_id in self._aborted

    def new_turn(self, session_id: str) -> None:
        self._refused.pop(session_id, None)
        self._aborted.discard(session_id)
        self._history.pop(session_id, None)

    def on_healthy(
        self, view: SessionView, turn: Turn, live: LiveFacts, now: datetime
    ) -> Decision | None:
        """Judge a healthy end once per reply; None when there is nothing to record."""
        last = turn.last_step
        if not self.config.enabled or view.owner is None or last is None:
            return None
        if self._judged.get(view.session_id) == last.id:
            return None
        db = self._db()
        todos = db.todos(view.session_id) if db is not None else []
        if not todos:
            return None  # a session without todos is none of our business
        self._judged[view.session_id] = last.id
        history = self._history_of(view.session_id, turn.id)
        history.append(signature(todos))
        agent = last.agent or turn.user.agent or view.agent
        aborted = "the user aborted this turn" if view.session_id in self._aborted else None
        verdict = todo_verdict(turn, todos, self.config, history, agent=agent,
                               refused=self._refused.get(view.session_id), now=now,
                               compacted_at=self._compacted.get(view.session_id),
                               aborted=aborted)
        if verdict is None:
            return self._all_done(view.session_id, turn, last.id, now)
        decision = self._dress(self._decide(view, turn, verdict, live, now), verdict, todos)
        self._actions.perform(decision, now, verdict.message_id)
        if decision.action is Action.INJECT:
            self._send_due(now, view.session_id)  # no countdown configured: at once
        return decision

    def _history_of(self, session_id: str, turn_id: str) -> list[Signature]:
        turn, lists = self._history.get(session_id, ("", []))
        if turn != turn_id:
            lists = []
            self._history[session_id] = (turn_id, lists)
        return lists

    def _dress(self, decision: Decision, verdict: Verdict, todos: list[Todo]) -> Decision:
        """The todo wording: the countdown toast, and the notices instead of 'still failing'."""
        unfinished = [t for t in todos if t.unfinished]
        left = len(unfinished)
        if decision.sends:
            return replace(decision, toast=countdown_toast(self.config, unfinished))
        if decision.action is Action.NOTIFY:
            template = (self.config.stagnation_notice if verdict.give_up
                        else self.config.exhausted_notice)
            text = fill(template, count=left, stagnation=self.config.stagnation,
                        used=decision.used_before)
            return replace(decision, text=text)
        return decision

    def _all_done(self, session_id: str, turn: Turn, message_id: str, now: datetime
                  ) -> Decision | None:
        """Recorded only after a todo continuation in this turn: its outcome, for the trace."""
        ledger = self._store.load_ledger(session_id, turn.id)
        used = ledger.used_in(BudgetGroup.TODOS) if ledger is not None else 0
        if not used:
            return None
        decision = Decision(
            Action.SKIP, Cause.TODOS_DONE, session_id, turn.id, Kind.UNFINISHED_TODOS,
            BudgetGroup.TODOS, facts=Facts(continuations=used),
        )
        self._actions.perform(decision, now, message_id)
        return decision


def _is_abort(raw: object) -> bool:
    return isinstance(raw, Mapping) and str(raw.get("name", "")) in ABORT_NAMES
