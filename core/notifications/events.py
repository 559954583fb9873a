"""PURE: which decisions tell the user outside OpenCode, what the message says, and how often.

The events come from the one decision path: a NOTIFY decision of the budget core is a budget
run out (``gave_up``; a stopped loop is ``loop_stopped``, an unrecovered stall
``stall_unrecovered``), a root turn's non-retryable error is ``terminal``, and a turn that ends
healthy after autoretry continued it is ``recovered``. ``Throttle`` keeps at most one message
per session, turn and event and a global cap per hour; what the cap holds back is announced
once, as "N more suppressed". The clock is an argument everywhere.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, fields
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from opencode_autoretry.causes import Cause, skip_words
from opencode_autoretry.models import Action, Decision, Kind, Session

#: What a root turn's non-retryable error reads as (a unit test pins the wording; code reads
#: ``Cause.NOT_RETRYABLE``).
TERMINAL_SKIP_REASON = f"{Action.SKIP}: {skip_words(Cause.NOT_RETRYABLE)}"
PAYLOAD_VERSION = 1


class NotifyEvent(StrEnum):
    GAVE_UP = "gave_up"
    TERMINAL = "terminal"
    LOOP_STOPPED = "loop_stopped"
    STALL_UNRECOVERED = "stall_unrecovered"
    RECOVERED = "recovered"
    GOAL_MET = "goal_met"  # a goal's check passed (issue 22)
    GOAL_GIVEN_UP = "goal_given_up"  # a goal ended with its check still failing
    WAITING_QUOTA = "waiting_quota"  # a usage window: one continuation once it resets (issue 23)
    WAITING = "waiting"  # a root session waits on a permission or a question (issue 23)
    SUPPRESSED = "suppressed"  # the cap's one summary line
    TEST = "test"  # ``autoretry notify test``


def event_for(decision: Decision, *, is_child: bool | None) -> NotifyEvent | None:
    """The event a recorded decision raises, or None. Children never raise one: their root's
    own turn decides (fail-closed: an unknown parent is treated as a child)."""
    if is_child is not False:
        return None
    goal = _goal_event(decision)
    if goal is not None:
        return goal
    if decision.cause is Cause.QUOTA_WAIT:
        return NotifyEvent.WAITING_QUOTA
    if decision.action is Action.NOTIFY:
        if decision.kind is Kind.REPETITION:
            return NotifyEvent.LOOP_STOPPED
        if decision.kind is Kind.STALL:
            return NotifyEvent.STALL_UNRECOVERED
        return NotifyEvent.GAVE_UP
    if (
        decision.action is Action.SKIP
        and decision.kind is Kind.TERMINAL
        and decision.cause is Cause.NOT_RETRYABLE
    ):
        return NotifyEvent.TERMINAL
    return None


def _goal_event(decision: Decision) -> NotifyEvent | None:
    """A goal's end: met, or given up (its budget, stagnation, a timeout, a spend cap over
    its turn, a user message ...); a spend cap over any other turn is ``gave_up``."""
    if decision.cause is Cause.GOAL_MET:
        return NotifyEvent.GOAL_MET
    if decision.cause is Cause.GOAL_ENDED:
        return NotifyEvent.GOAL_GIVEN_UP
    if decision.kind is Kind.GOAL and decision.action is Action.NOTIFY:
        return NotifyEvent.GOAL_GIVEN_UP
    return None


_HEADLINES: Mapping[NotifyEvent, str] = {
    NotifyEvent.GAVE_UP: "gave up",
    NotifyEvent.TERMINAL: "stopped on an error it does not retry",
    NotifyEvent.LOOP_STOPPED: "stopped a loop",
    NotifyEvent.STALL_UNRECOVERED: "could not recover a stall",
    NotifyEvent.RECOVERED: "recovered a turn",
    NotifyEvent.GOAL_MET: "met a goal",
    NotifyEvent.GOAL_GIVEN_UP: "gave up on a goal",
    NotifyEvent.WAITING_QUOTA: "is waiting for a usage limit to reset",
    NotifyEvent.WAITING: "needs you",
    NotifyEvent.SUPPRESSED: "held back notifications",
    NotifyEvent.TEST: "test notification",
}


#: The headline of an event raised by a decision taken in observe mode (issue 23).
_WOULD_HEADLINES: Mapping[NotifyEvent, str] = {
    NotifyEvent.GAVE_UP: "(observe mode) would give up",
    NotifyEvent.LOOP_STOPPED: "(observe mode) would stop a loop",
    NotifyEvent.STALL_UNRECOVERED: "(observe mode) would give up on a stall",
}


def resume_hint(event: NotifyEvent, session_id: str, directory: str | None) -> str:
    """One line saying how to pick the session up again."""
    where = f"cd {directory} && " if directory else ""
    open_it = f"{where}opencode --session {session_id}"
    if event is NotifyEvent.TERMINAL:
        return f"Fix the cause (credentials, quota or context), then {open_it} and send a message."
    if event in (NotifyEvent.RECOVERED, NotifyEvent.GOAL_MET):
        return f"Nothing to do; to look: {open_it}"
    if event is NotifyEvent.WAITING_QUOTA:
        return f"Nothing to do; any message you send in {open_it} cancels the wait."
    if event is NotifyEvent.WAITING:
        return f"Answer it: {open_it}"
    if event in (NotifyEvent.SUPPRESSED, NotifyEvent.TEST):
        return "Run `autoretry trace` to see every decision."
    return f"{open_it} and send a message (a new message starts fresh budgets)."


@dataclass(frozen=True)
class Notification:
    """One event, as every channel renders it (``as_json`` is the documented payload)."""

    event: NotifyEvent
    session_id: str
    time: datetime
    reason: str
    title: str | None = None
    directory: str | None = None
    turn_id: str | None = None
    kind: str | None = None
    attempts: int = 0
    budget: int = 0
    decision_id: int | None = None
    detail: str | None = None  # the toast's text, e.g. "retried 2 times, still failing (…)"
    suppressed: int = 0
    observed: bool = False  # raised by a decision of observe mode: nothing was done
    ask_id: str | None = None  # ``waiting``: the permission or question asked (issue 23)
    asked: str | None = None  # ``waiting``: what it asks, one sanitised line

    @property
    def key(self) -> str | None:
        """What makes it once-only beside session and event: the ask, else the turn."""
        return self.ask_id or self.turn_id

    @property
    def headline(self) -> str:
        if self.observed and self.event in _WOULD_HEADLINES:
            return f"autoretry {_WOULD_HEADLINES[self.event]}"
        return f"autoretry {_HEADLINES[self.event]}"

    @property
    def resume(self) -> str:
        return resume_hint(self.event, self.session_id, self.directory)

    @property
    def summary(self) -> str:
        """The one-line message: what happened, where, and why."""
        if self.event is NotifyEvent.SUPPRESSED:
            return f"{self.suppressed} more suppressed (more than the hourly cap)"
        name = f"'{self.title}'" if self.title else self.session_id
        counted = self.budget and self.event not in (NotifyEvent.WAITING_QUOTA, NotifyEvent.WAITING)
        tried = f" after {self.attempts}/{self.budget}" if counted else ""
        return f"{self.headline}{tried} in {name}: {self.detail or self.reason}"

    def as_json(self) -> dict[str, Any]:
        return {
            "source": "autoretry", "version": PAYLOAD_VERSION, "event": str(self.event),
            "session_id": self.session_id, "title": self.title, "directory": self.directory,
            "turn_id": self.turn_id, "kind": self.kind, "reason": self.reason,
            "attempts": self.attempts, "budget": self.budget, "time": self.time.isoformat(),
            "message": self.summary, "resume": self.resume, "decision_id": self.decision_id,
            "suppressed": self.suppressed, "observed": self.observed,
            "ask": self.asked,
        }


#: The fields a notification is kept by in the store (to send it after a restart), and
#: those of them that are text a secret could be in.
_KEPT_TEXT = ("reason", "title", "directory", "detail", "asked")


def kept_form(note: Notification, clean: Callable[[str], str]) -> str:
    """The notification as the store keeps it while it waits for delivery: every field, its
    texts cleaned of secrets (``scrub``), as one JSON object."""
    texts = {name: clean(value) for name in _KEPT_TEXT
             if isinstance(value := getattr(note, name), str)}
    kept = {**asdict(note), **texts, "event": str(note.event), "time": note.time.isoformat()}
    return json.dumps(kept, ensure_ascii=False, sort_keys=True)


def from_kept(text: str | None) -> Notification | None:
    """``kept_form`` read back; None for a row without one (written before migration 8) or
    one this release cannot read."""
    if not text:
        return None
    try:
        kept = json.loads(text)
        names = {f.name for f in fields(Notification)}
        values = {name: value for name, value in kept.items() if name in names}
        values["event"] = NotifyEvent(values["event"])
        values["time"] = datetime.fromisoformat(values["time"])
        return Notification(**values)
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def from_decision(
    event: NotifyEvent, decision: Decision, decision_id: int | None, session: Session | None,
    now: datetime,
) -> Notification:
    return Notification(
        event=event, session_id=decision.session_id, time=now, reason=decision.reason,
        title=session.title if session else None, directory=session.directory if session else None,
        turn_id=decision.turn_id, kind=str(decision.kind) if decision.kind else None,
        attempts=decision.used_after, budget=decision.limit, decision_id=decision_id,
        detail=_detail(event, decision),
        observed=decision.observed and decision.action is not Action.SKIP,
    )


def _detail(event: NotifyEvent, decision: Decision) -> str | None:
    if event is NotifyEvent.WAITING_QUOTA and decision.facts.resets_at is not None:
        reset = decision.facts.resets_at
        return f"the usage limit resets at {reset:%Y-%m-%d %H:%M} UTC; continuing then, once"
    return decision.text if decision.action is Action.NOTIFY else None


# --- webhook bodies --------------------------------------------------------------------------


def slack_body(note: Notification) -> dict[str, Any]:
    """Slack incoming webhooks (and Mattermost, Discord's /slack URLs) take ``{"text"}``."""
    return {"text": f"*{note.headline}*\n{note.summary}\n{note.resume}"}


def ntfy_request(note: Notification, url: str) -> tuple[str, dict[str, Any]]:
    """ntfy's JSON publishing: POST to the server root with the topic in the body
    (``https://ntfy.sh/mytopic`` -> ``https://ntfy.sh/`` + ``{"topic": "mytopic"}``)."""
    parts = urlsplit(url)
    base, _, topic = parts.path.rstrip("/").rpartition("/")
    root = urlunsplit((parts.scheme, parts.netloc, base + "/", parts.query, ""))
    priority = 3 if note.event in (NotifyEvent.RECOVERED, NotifyEvent.TEST) else 4
    return root, {
        "topic": topic, "title": note.headline, "message": f"{note.summary}\n{note.resume}",
        "tags": ["autoretry", str(note.event)], "priority": priority,
    }


# --- how often -------------------------------------------------------------------------------


class Admission(StrEnum):
    SEND = "send"
    DUPLICATE = "duplicate"  # this session, turn and event already had its message
    CAPPED = "capped"  # over the hourly cap: counted, announced later in one line


HOUR = timedelta(hours=1)


class Throttle:
    """At most one message per (session, turn, event); at most ``max_per_hour`` in any hour."""

    def __init__(self, max_per_hour: int) -> None:
        self.max_per_hour = max_per_hour
        self._sent: deque[datetime] = deque()
        self._seen: dict[tuple[str, str | None, str], datetime] = {}
        self.suppressed = 0

    def _prune(self, now: datetime) -> None:
        while self._sent and now - self._sent[0] >= HOUR:
            self._sent.popleft()
        if len(self._seen) > 10_000:  # a day is plenty to de-duplicate replays
            self._seen = {k: t for k, t in self._seen.items() if now - t < timedelta(days=1)}

    def admit(self, session_id: str, turn_id: str | None, event: str, now: datetime) -> Admission:
        self._prune(now)
        key = (session_id, turn_id, event)
        if key in self._seen:
            return Admission.DUPLICATE
        self._seen[key] = now
        if len(self._sent) >= self.max_per_hour:
            self.suppressed += 1
            return Admission.CAPPED
        self._sent.append(now)
        return Admission.SEND

    def take_suppressed(self, now: datetime) -> int:
        """Once the hour has room again: how many were held back (then zero), else 0."""
        self._prune(now)
        if not self.suppressed or len(self._sent) >= self.max_per_hour:
            return 0
        count, self.suppressed = self.suppressed, 0
        self._sent.append(now)
        return count
