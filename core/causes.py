"""Why a decision was taken, typed: its ``Cause`` and the ``Facts`` it was taken on.

Every decision says what was found and why autoretry acted or did not (a ``Cause``), with the
facts its performers and the reports need (the model switched from and to, how long a subagent
hung, the detector's own words ...). The English reason people read in logs, toasts and
reports is rendered from these (``render_reason``) and never read back by code: rewording a
sentence here changes what people read, nothing else.

This module imports nothing of the package: ``models.Decision`` renders its reason with it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields, replace
from datetime import datetime
from enum import StrEnum
from typing import Any


class Cause(StrEnum):
    """What was found, and why autoretry acted or did not (stored in ``decisions.cause``)."""

    # -- acted
    RETRY = "retry"  # a budget unit spent: continue now, later, or after an abort
    MODEL_SWITCH = "model_switch"  # model fallback: continue on the chain's next model
    SUBAGENT_HUNG = "subagent_hung"  # a hung child session aborted (never prompted)
    QUOTA_WAIT = "quota_wait"  # a usage window: one continuation once it resets (issue 23)
    # -- told the user (notify), waiting for a real user message
    BUDGET_SPENT = "budget_spent"  # retried used of limit times
    GAVE_UP = "gave_up"  # a detector's own reason to stop (e.g. todos that did not move)
    DEADLINE_PASSED = "deadline_passed"  # the group's deadline since the first failure passed
    DEADLINE_TOO_LATE = "deadline_too_late"  # the next retry would fall past the deadline
    FALLBACK_USED_UP = "fallback_used_up"  # every model of the fallback chain was tried
    SPEND_CAP = "spend_cap"  # the user turn used more than a ``[caps]`` cap (issue 22)
    # -- left alone (skip)
    OFF = "off"  # autoretry is switched off (globally or for the session)
    PARENT_UNKNOWN = "parent_unknown"  # the session's parent could not be read: fail closed
    CHILD_SESSION = "child_session"  # a subagent: its parent decides
    USER_ABORT = "user_abort"  # the user stopped this turn
    HEALTHY = "healthy"  # the turn finished normally
    RUNNING = "running"  # the turn is still running
    NOT_RETRYABLE = "not_retryable"  # a terminal error
    ORPHAN = "orphan"  # the classifier found no live owner for the turn
    NOT_RETRIED = "not_retried"  # a kind that is never retried (its verdict says why)
    WAITING_PERMISSION = "waiting_permission"  # the user has a permission to answer
    WAITING_QUESTION = "waiting_question"  # the user has a question to answer
    WAITING_CHILD = "waiting_child"  # a busy subagent (of its own) runs
    OPENCODE_RETRYING = "opencode_retrying"  # OpenCode retries by itself
    BUSY = "busy"  # the session is busy
    ALREADY_HANDLED = "already_handled"  # this failure was acted on before
    ALREADY_SWITCHED = "already_switched"  # this failure was answered with a model switch
    ALREADY_SCHEDULED = "already_scheduled"  # a retry for this failure waits
    ALREADY_PENDING = "already_pending"  # a retry for another failure of the turn waits
    GROUP_EXHAUSTED = "group_exhausted"  # the group's budget was spent earlier in the turn
    NO_OWNER = "no_owner"  # no live process owns the session: recorded, never injected
    HEADLESS = "headless"  # an `opencode run` that `autoretry exec` recovers itself
    SUBAGENTS_OFF = "subagents_off"  # ``[stall] subagents = false``
    NOT_A_CHILD = "not_a_child"  # a stalled root is continued (as a stall) instead
    ALREADY_ABORTED = "already_aborted"  # the subagent was aborted once in its parent's turn
    TODOS_DONE = "todos_done"  # no unfinished todos left after the todo continuations
    GOAL_MET = "goal_met"  # the goal's check passed (issue 22)
    GOAL_ENDED = "goal_ended"  # the goal ended without a notice: a user message, goal off ...
    # -- none of the above: free text (``Facts.note``), e.g. a row of an unknown release
    OTHER = "other"

    @classmethod
    def parse(cls, raw: object) -> Cause:
        try:
            return cls(str(raw))
        except ValueError:  # written by a newer release: shown by its stored text
            return cls.OTHER


#: Causes whose decision is told to the user and waits for a real user message.
NOTIFY_CAUSES = frozenset({
    Cause.BUDGET_SPENT, Cause.GAVE_UP, Cause.DEADLINE_PASSED, Cause.DEADLINE_TOO_LATE,
    Cause.FALLBACK_USED_UP, Cause.SPEND_CAP,
})


@dataclass(frozen=True)
class ModelSwitch:
    """A continuation moved to the fallback chain's next model."""

    from_model: str
    to_model: str
    why: str = ""  # what binds the failure to the model: "auth failure", "usage limit" ...


@dataclass(frozen=True)
class Facts:
    """What a decision was taken on, beyond its action, kind, group and budget counts.

    Stored as JSON (``decisions.facts``); every field is optional, so a row of an older
    release reads with the facts its migration could recover.
    """

    detail: str | None = None  # the verdict's own words (classifier, detector)
    budget_label: str | None = None  # the counter that bound: a group or "interruptions"
    delay_s: float | None = None  # how long until the continuation is due
    deadline_s: float | None = None  # the group's deadline that ended the retries
    give_up: str | None = None  # a detector's reason to stop for good
    failure_id: str | None = None  # the failed assistant message already handled
    pending_due: datetime | None = None  # when the retry already waiting is due
    switch: ModelSwitch | None = None  # model fallback: from -> to
    tried: tuple[str, ...] = ()  # model fallback: the models the turn tried, in order
    hung_seconds: float | None = None  # how long a subagent hung before its abort
    continuations: int | None = None  # todo (or goal) continuations sent in the turn
    cost_usd: float | None = None  # the user turn's spend so far, by OpenCode's own figures
    tokens: int | None = None
    minutes: float | None = None
    cap: str | None = None  # the spend cap that bound: "max_turn_tokens = 1000"
    exit_code: int | None = None  # a goal check's exit status (None: killed at its timeout)
    check_s: float | None = None  # how long the goal check ran
    note: str | None = None  # the reason as it was given, rendered as is (``Cause.OTHER``)
    resets_at: datetime | None = None  # when the provider said its usage window reopens

    def to_json(self) -> str:
        out: dict[str, Any] = {}
        for spec in fields(self):
            value = getattr(self, spec.name)
            if value is None or value == ():
                continue
            if isinstance(value, datetime):
                value = value.isoformat()
            elif isinstance(value, ModelSwitch):
                value = {"from": value.from_model, "to": value.to_model, "why": value.why}
            elif isinstance(value, tuple):
                value = list(value)
            out[spec.name] = value
        return json.dumps(out, sort_keys=True, ensure_ascii=False)

    @classmethod
    def from_json(cls, raw: str | None) -> Facts:
        """The stored facts; anything unreadable (a newer release, a broken row) is left out."""
        try:
            data = json.loads(raw or "{}")
        except ValueError:
            return cls()
        if not isinstance(data, dict):
            return cls()
        facts = cls()
        for name, reader in _READERS.items():
            if name in data:
                try:
                    facts = replace(facts, **{name: reader(data[name])})
                except (TypeError, ValueError, KeyError):
                    continue
        return facts


def _text(raw: object) -> str:
    if not isinstance(raw, str):
        raise TypeError(raw)
    return raw


def _number(raw: object) -> float:
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        raise TypeError(raw)
    return float(raw)


def _count(raw: object) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int):
        raise TypeError(raw)
    return raw


def _time(raw: object) -> datetime:
    return datetime.fromisoformat(_text(raw))


def _switch(raw: object) -> ModelSwitch:
    if not isinstance(raw, dict):
        raise TypeError(raw)
    return ModelSwitch(_text(raw["from"]), _text(raw["to"]), _text(raw.get("why", "")))


def _models(raw: object) -> tuple[str, ...]:
    if not isinstance(raw, list):
        raise TypeError(raw)
    return tuple(_text(m) for m in raw)


_READERS: dict[str, Any] = {
    "detail": _text, "budget_label": _text, "delay_s": _number, "deadline_s": _number,
    "give_up": _text, "failure_id": _text, "pending_due": _time, "switch": _switch,
    "tried": _models, "hung_seconds": _number, "continuations": _count, "note": _text,
    "cost_usd": _number, "tokens": _count, "minutes": _number, "cap": _text,
    "exit_code": _count, "check_s": _number,
    "resets_at": _time,
}


# --- the words people read ---------------------------------------------------------------------

_SKIP_WORDS: dict[Cause, str] = {
    Cause.OFF: "autoretry is off",
    Cause.PARENT_UNKNOWN: "session parent unknown (fail-closed)",
    Cause.CHILD_SESSION: "child session (its parent decides)",
    Cause.USER_ABORT: "user aborted this turn",
    Cause.HEALTHY: "turn finished normally",
    Cause.RUNNING: "turn is still running",
    Cause.NOT_RETRYABLE: "error is not retryable",
    Cause.ORPHAN: "no live owner for this turn",
    Cause.WAITING_PERMISSION: "waiting on a permission answer",
    Cause.WAITING_QUESTION: "waiting on a question answer",
    Cause.OPENCODE_RETRYING: "OpenCode is retrying itself; waiting for its final error",
    Cause.BUSY: "session is busy",
    Cause.NO_OWNER: "no live owner (recorded, never injected)",
    Cause.HEADLESS: "headless run, recovered by autoretry exec",
    Cause.SUBAGENTS_OFF: "hung subagents are left alone ([stall] subagents = false)",
    Cause.NOT_A_CHILD: "not a child session (a root stall is continued instead)",
    Cause.ALREADY_ABORTED: "this subagent was already aborted once in its parent's turn",
}

#: ``Kind.SUBAGENT_STALL``'s value (models imports this module, not the other way round).
_SUBAGENT_STALL = "subagent_stall"


def _iso(value: datetime | None) -> str:
    return value.isoformat() if value is not None else "?"


def skip_words(
    cause: Cause, kind: str | None = None, group: str | None = None, facts: Facts = Facts()
) -> str:
    """Why nothing was done, as the reason says it after ``skip: ``."""
    if cause is Cause.WAITING_CHILD:
        own = " of its own" if kind == _SUBAGENT_STALL else ""
        return f"waiting on a busy subagent{own}"
    if cause is Cause.NOT_RETRIED:
        return f"{kind} is not retried ({facts.detail})"
    if cause is Cause.ALREADY_HANDLED:
        return f"failure {facts.failure_id} already handled"
    if cause is Cause.ALREADY_SWITCHED:
        return f"failure {facts.failure_id} already handled (model switched)"
    if cause is Cause.ALREADY_SCHEDULED:
        return f"retry already scheduled for this failure (due {_iso(facts.pending_due)})"
    if cause is Cause.ALREADY_PENDING:
        return f"a retry is already pending for this turn (due {_iso(facts.pending_due)})"
    if cause is Cause.GROUP_EXHAUSTED:
        return f"{group} budget exhausted; waiting for a real user message"
    if cause is Cause.TODOS_DONE:
        return f"no unfinished todos left after {facts.continuations} continuation(s)"
    if cause is Cause.GOAL_MET:
        return (f"goal met: the check passed ({facts.detail}) after {facts.continuations or 0} "
                "continuation(s)")
    if cause is Cause.GOAL_ENDED:
        return f"goal ended: {facts.detail}"
    return _SKIP_WORDS.get(cause, str(cause))


def spend_words(facts: Facts) -> str:
    """'this turn used $0.42, 12345 tokens, 3.1 min'."""
    used = [f"${facts.cost_usd:.4g}" if facts.cost_usd is not None else "",
            f"{facts.tokens} tokens" if facts.tokens is not None else "",
            f"{facts.minutes:.1f} min" if facts.minutes is not None else ""]
    return "this turn used " + ", ".join(u for u in used if u)


def _why_notified(cause: Cause, used_before: int, limit: int, facts: Facts) -> str:
    if cause is Cause.SPEND_CAP:
        return f"{spend_words(facts)}: over {facts.cap}"
    if cause is Cause.BUDGET_SPENT:
        return f"retried {used_before} of {limit} times ({facts.budget_label})"
    if cause is Cause.GAVE_UP:
        return facts.give_up or ""
    if cause is Cause.DEADLINE_PASSED:
        return f"deadline of {facts.deadline_s or 0:g} s since the first failure has passed"
    return f"the next retry would fall past the {facts.deadline_s or 0:g} s deadline"


def render_reason(
    action: str, cause: Cause, kind: str | None, group: str | None, used_before: int,
    used_after: int, limit: int, facts: Facts,
) -> str:
    """The one-line reason people read (log, trace, notification payload, store column)."""
    if facts.note is not None:  # given as text (``Cause.OTHER``, a test's literal decision)
        return facts.note
    head = f"{action}: {kind} ({facts.detail})"
    if cause is Cause.OTHER:
        return str(action)
    if cause is Cause.RETRY:
        return f"{head}; {facts.budget_label} {used_after}/{limit}, in {facts.delay_s or 0:g} s"
    if cause is Cause.MODEL_SWITCH:
        switch = facts.switch or ModelSwitch("?", "?")
        return (f"{head}; {switch.why} on {switch.from_model}: switched {switch.from_model} → "
                f"{switch.to_model} (fallback {used_after}/{limit})")
    if cause is Cause.QUOTA_WAIT:
        return (f"{head}; the quota resets at {_iso(facts.resets_at)}: continuing once then, "
                f"in {facts.delay_s or 0:.0f} s ({facts.budget_label} {used_after}/{limit})")
    if cause is Cause.SUBAGENT_HUNG:
        return (f"{action}: subagent {facts.detail}; stopped (never prompted) so its parent's "
                "task tool returns; 1/1 per parent turn")
    path = " → ".join(facts.tried)
    if cause is Cause.FALLBACK_USED_UP:
        return f"{head}; fallback chain used up ({path}); waiting for a real user message"
    if cause in NOTIFY_CAUSES:
        why = _why_notified(cause, used_before, limit, facts)
        used_up = f"; fallback chain used up ({path})" if facts.tried else ""
        return f"{head}; {why}; waiting for a real user message{used_up}"
    return f"{action}: {skip_words(cause, kind, group, facts)}"
