"""What OpenCode itself does differently by version, where an e2e expectation depends on it.

The e2e suite runs on the pinned latest (``opencode.OPENCODE_VERSION``) and on any version
``$AUTORETRY_E2E_OPENCODE_VERSION`` names (issue 11). autoretry's own behaviour is the same on
every supported version; what differs is what OpenCode does before autoretry sees anything,
e.g. how often it retries a 429 by itself. A test whose premise is one of these facts says so
with ``@pytest.mark.opencode("fact")``: on a version where the fact does not hold the test is
skipped with the reason below, so the 1.18 expectation is never loosened to fit another
version, and what the other version does instead is asserted by a test of its own
(``test_older_opencode_e2e.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

#: The oldest OpenCode the suite passes on (``core/opencode/versions.py`` ``TESTED_OPENCODE``).
OLDEST_SUPPORTED = "1.17.11"


@dataclass(frozen=True)
class Behaviour:
    """One release series' own behaviour, measured on the real binary (docs/versions.md)."""

    series: str
    #: Requests of one turn on a lasting retryable error (429, 5xx, a reset stream) until
    #: OpenCode gives up and the turn ends in an error; None: it retries without end (1.17.11:
    #: 322 requests in 45 s at Retry-After 0.1 s, only ``session.status`` ``retry`` events).
    own_attempts: int | None
    #: A 429 ``insufficient_quota`` ends the turn at once (1.17: retried like any 429).
    quota_is_final: bool
    #: A session created with permission rules asks before a tool, also late in the suite's
    #: shared home (1.17.11: it did in a fresh home, not in the suite's run: see docs/versions.md).
    session_permission_rules: bool
    #: A stream without ``finish_reason`` makes OpenCode start another step at once, forever
    #: (1.17: the step ends ``finish: "unknown"`` and the session goes idle).
    loops_without_finish_reason: bool
    #: How the parent's ``task`` part reports a child whose turn failed: ``"error"``
    #: ("Subagent failed ...") or ``"completed"`` (an empty ``<task_result>``).
    failed_child_task_status: str


BEHAVIOURS: dict[str, Behaviour] = {
    "1.18": Behaviour(
        series="1.18",
        own_attempts=6,
        quota_is_final=True,
        session_permission_rules=True,
        loops_without_finish_reason=True,
        failed_child_task_status="error",
    ),
    "1.17": Behaviour(
        series="1.17",
        own_attempts=None,
        quota_is_final=False,
        session_permission_rules=False,
        loops_without_finish_reason=False,
        failed_child_task_status="completed",
    ),
}

#: ``@pytest.mark.opencode(fact)`` names: why a test needs the fact.
FACTS: dict[str, str] = {
    "gives_up": "OpenCode gives up on a lasting retryable error after its own attempts "
    "(the turn ends in an error autoretry continues)",
    "quota_is_final": "a 429 insufficient_quota ends the turn at once",
    "session_permission_rules": "a session created with permission rules asks before a tool",
    "loops_without_finish_reason": "a stream without finish_reason makes OpenCode loop",
}


def series(version: str) -> str:
    """``"1.17.11"`` -> ``"1.17"``."""
    return ".".join(version.split(".")[:2])


def behaviour(version: str) -> Behaviour:
    known = BEHAVIOURS.get(series(version))
    if known is None:
        raise KeyError(
            f"OpenCode {version}: no entry in tests/e2e/versions.py BEHAVIOURS; "
            f"measure it (docs/versions.md) before running the suite on it"
        )
    return known


def holds(fact: str, version: str) -> bool:
    """Whether ``fact`` (a ``FACTS`` key) is true of OpenCode ``version``."""
    found = behaviour(version)
    if fact == "gives_up":
        return found.own_attempts is not None
    if fact in ("quota_is_final", "session_permission_rules", "loops_without_finish_reason"):
        return bool(getattr(found, fact))
    raise KeyError(f"unknown OpenCode fact {fact!r}; known: {sorted(FACTS)}")


def skip_reason(facts: tuple[str, ...], version: str) -> str | None:
    """Why a test needing ``facts`` cannot run on ``version`` (None: it can)."""
    missing = [fact for fact in facts if not holds(fact, version)]
    if not missing:
        return None
    return f"OpenCode {version}: not true that " + "; ".join(FACTS[f] for f in missing)
