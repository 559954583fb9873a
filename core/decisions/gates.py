"""The one "the user has the session" gate: whatever would send, abort or switch asks it first.

A permission or a question waiting for the user, or a subagent still at work, means the
session is not stalled and not ours to talk into: the budget core, the hung-subagent abort and
the model fallback all refuse for exactly these reasons, in this order.
"""

from __future__ import annotations

from opencode_autoretry.causes import Cause
from opencode_autoretry.models import LiveFacts


def waiting_on_user(live: LiveFacts) -> Cause | None:
    """Why the session waits on the user (or on its own busy subagent), or None."""
    if live.permission_pending:
        return Cause.WAITING_PERMISSION
    if live.question_pending:
        return Cause.WAITING_QUESTION
    if live.child_busy:
        return Cause.WAITING_CHILD
    return None
