"""The one place that reads a decision's reason text: rows written before decisions were typed.

Releases before migration 5 stored only the English reason. ``legacy_cause`` maps such a row,
once, to the ``Cause`` and ``Facts`` the daemon and the reports now read: by the migration that
adds the columns, and by the read-only view of a store an older daemon still holds (it cannot
be migrated from a report). The patterns are the ones the reports and the gap review used on
that text, in the order they used them, so an old row is read as it was then.

Nothing else may read a reason (tests/test_no_reason_parsing.py lists this module as the only
exception).
"""

from __future__ import annotations

import re

from opencode_autoretry.causes import Cause, Facts, ModelSwitch

_SENDS = ("inject", "inject_at", "abort_then_inject")
#: ``<action>: <kind> (<the verdict's words>); ...`` — the detector's words end with the quoted
#: sample for a repetition, ``(...'sample')``, which is what the reports showed of them.
_DETAIL = re.compile(r"^\w+: \w+ \((?P<detail>.*?['\"]\))\); ", re.DOTALL)
_SWITCH = re.compile(r"(?P<why>[^;]*) on \S+: switched (?P<from>\S+) → (?P<to>\S+)")
_HUNG = re.compile(r"\bhung (\d+) s\b")
_TRIED = re.compile(r"fallback chain used up \((?P<path>[^)]*)\)")
_BUDGET = re.compile(r"; (?P<label>\w+) \d+/\d+, in (?P<delay>[\d.e+-]+) s")

#: Skips, tested in this order (the summary's order, with the exhausted and duplicate checks
#: it made before it).
_SKIPS: tuple[tuple[re.Pattern[str], Cause], ...] = tuple(
    (re.compile(pattern, re.IGNORECASE), cause) for pattern, cause in (
        (r"exhausted", Cause.GROUP_EXHAUSTED),
        (r"already handled \(model switched\)", Cause.ALREADY_SWITCHED),
        (r"already handled", Cause.ALREADY_HANDLED),
        (r"already scheduled", Cause.ALREADY_SCHEDULED),
        (r"already pending", Cause.ALREADY_PENDING),
        (r"autoretry is off|switched off", Cause.OFF),
        (r"user aborted", Cause.USER_ABORT),
        (r"waiting on a permission", Cause.WAITING_PERMISSION),
        (r"waiting on a question", Cause.WAITING_QUESTION),
        (r"waiting on", Cause.WAITING_CHILD),
        (r"is retrying", Cause.OPENCODE_RETRYING),
        (r"is busy", Cause.BUSY),
        (r"parent unknown", Cause.PARENT_UNKNOWN),
        (r"not a child session", Cause.NOT_A_CHILD),
        (r"child session", Cause.CHILD_SESSION),
        (r"no live owner for this turn", Cause.ORPHAN),
        (r"\bno (?:live )?owner\b", Cause.NO_OWNER),
        (r"finished normally", Cause.HEALTHY),
        (r"still running", Cause.RUNNING),
        (r"error is not retryable", Cause.NOT_RETRYABLE),
        (r"not retr", Cause.NOT_RETRIED),
        (r"headless run", Cause.HEADLESS),
        (r"\[stall\] subagents", Cause.SUBAGENTS_OFF),
        (r"already aborted once", Cause.ALREADY_ABORTED),
        (r"no unfinished todos left", Cause.TODOS_DONE),
    )
)
_NOTIFIES: tuple[tuple[re.Pattern[str], Cause], ...] = tuple(
    (re.compile(pattern), cause) for pattern, cause in (
        (r"; retried \d+ of \d+ times", Cause.BUDGET_SPENT),
        (r"; deadline of [\d.e+-]+ s since the first failure", Cause.DEADLINE_PASSED),
        (r"; the next retry would fall past", Cause.DEADLINE_TOO_LATE),
        (r"^\w+: \w+ \(.*\); fallback chain used up", Cause.FALLBACK_USED_UP),
    )
)


def legacy_cause(action: str, reason: str) -> tuple[Cause, Facts]:
    """The cause and facts of a decision an older release recorded with ``reason`` only."""
    facts = _facts(reason)
    if action in _SENDS:
        return (Cause.MODEL_SWITCH if facts.switch else Cause.RETRY), facts
    if action == "abort" and facts.hung_seconds is not None:
        return Cause.SUBAGENT_HUNG, facts
    if action == "notify":
        found = next((cause for rx, cause in _NOTIFIES if rx.search(reason)), Cause.GAVE_UP)
        return found, facts
    if action == "skip":
        return next((cause for rx, cause in _SKIPS if rx.search(reason)), Cause.OTHER), facts
    return Cause.OTHER, facts


def _facts(reason: str) -> Facts:
    """What the reports read from the text: the detector's words, a model switch, a hang, the
    models a fallback chain tried; the text itself stays the row's reason."""
    detail = _DETAIL.match(reason)
    switch = _SWITCH.search(reason)
    hung = _HUNG.search(reason)
    tried = _TRIED.search(reason)
    budget = _BUDGET.search(reason)
    return Facts(
        detail=detail.group("detail") if detail else None,
        switch=ModelSwitch(switch["from"], switch["to"], switch["why"].strip())
        if switch else None,
        hung_seconds=float(hung.group(1)) if hung else None,
        tried=tuple(tried["path"].split(" → ")) if tried else (),
        budget_label=budget["label"] if budget else None,
    )
