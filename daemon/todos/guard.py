"""What the daemon does when a root turn ends healthy with todos left (issue 9).

The loop hands every healthy, settled turn to ``TodoGuard.on_healthy``. It reads the session's
todo list from OpenCode's DB (read-only), asks the pure ``todos.todo_verdict`` for a verdict,
lets the decision core decide as for any other kind (gates, the ``todos`` budget, the
countdown as the group's delay), and has ``Actions`` perform it: an intent due after the
countdown with the toast "autoretry: 2 todos left — continuing in 5 s; write anything to stop".
A pending continuation is cancelled like any pending retry: a user message, ``/autoretry off``,
the session turning busy.

What this module keeps in memory, per session: the todo lists seen at each healthy end of the
current turn (stagnation is measured on them) and whether the user refused a permission or
dismissed a question in it. After a daemon restart both start afresh; the budget, which is in
the store, still caps the turn at ``max_continuations``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any, Protocol

from opencode_autoretry.daemon.actions import Actions
from opencode_autoretry.daemon.sessions import SessionView
from opencode_autoretry.decisions.policy import fill
from opencode_autoretry.models import Action, BudgetGroup, Decision, Kind, LiveFacts, Turn, Verdict
from opencode_autoretry.store.database import Store
from opencode_autoretry.todos.continuation import (
    Signature,
    Todo,
    TodoConfig,
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

    @classmethod
    def for_loop(cls, loop: Any) -> TodoGuard:
        """Built from the loop's parts, with the ``[todos]`` of its (validated) ``Config``."""
        return cls(
            loop.config.todos, loop.store, loop.actions, loop.db,
            loop._decide, lambda now, sid: loop.recovery.send_due(now, sid),
        )

    def on_event(self, session_id: str, kind: str, props: Mapping[str, Any]) -> None:
        if kind not in _REFUSALS:
            return
        reply = str(props.get("reply") or props.get("response") or "")
        if kind == "question.rejected" or "reject" in reply or "deny" in reply:
            self._refused[session_id] = _REFUSALS[kind]

    def new_turn(self, session_id: str) -> None:
        self._refused.pop(session_id, None)
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
        verdict = todo_verdict(turn, todos, self.config, history, agent=agent,
                               refused=self._refused.get(view.session_id))
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
        left = sum(1 for t in todos if t.unfinished)
        if decision.sends:
            return replace(decision, toast=countdown_toast(self.config, left))
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
            Action.SKIP, f"skip: no unfinished todos left after {used} continuation(s)",
            session_id, turn.id, Kind.UNFINISHED_TODOS, BudgetGroup.TODOS,
        )
        self._actions.perform(decision, now, message_id)
        return decision
