"""A bridge's hello names the sessions its process saw: the daemon owns them again, with the
live state the bridge knows (issue 11).

After a restart the daemon knows nothing live, and after a cut socket it dropped what the
connection had told it (``Sessions.drop_owner``); a bridge queues nothing while the daemon is
away. Without the hello's list, a session no heartbeat named yet (created just before a
SIGKILL) stayed ownerless for good, its failure recorded and never continued; and a session
waiting on a permission or a question looked idle until its next event.

So each named session becomes this connection's, unless another live bridge owns it, with
the status (busy / retry / idle) and the open asks the bridge reports. What was running is
not restored: a session restored busy after a restart keeps no progress clock
(``last_activity``), so a tool running quietly through it is never taken for a stall; its next
event starts one. After a socket cut, a session the daemon saw busy gets a clock from the hello.
Whether a named session is judged again is the gap review's business (``GapReview``).
"""

from __future__ import annotations

import logging
from collections.abc import Container
from datetime import datetime

from opencode_autoretry.daemon.sessions import Sessions, SessionView
from opencode_autoretry.plugin_bridge.protocol import Hello, SessionState, session_states

log = logging.getLogger(__name__)


def adopt_named(sessions: Sessions, conn_id: str, hello: Hello, live: Container[str],
                now: datetime) -> list[str]:
    """Own the sessions the hello names (``live``: the connections still open); returns
    the ids adopted, in the order named (least recently active first)."""
    states, dropped = session_states(hello)
    if dropped:
        log.warning("bridge %s: %d malformed session entries in its hello dropped", conn_id,
                    dropped)
    adopted: list[str] = []
    for state in states:
        view = sessions.ensure(state.session_id)
        if view.owner not in (None, conn_id) and view.owner in live:
            continue  # another open bridge reports it: its events are the newer truth
        view.owner = conn_id
        view.headless = bool(hello.exec)
        restore(view, state, now)
        adopted.append(state.session_id)
    if adopted:
        waits = sum(1 for s in adopted if (v := sessions.get(s)) and (v.permissions or v.questions))
        log.info("bridge %s names %d sessions (%d waiting on the user)", conn_id, len(adopted),
                 waits)
    return adopted


def restore(view: SessionView, state: SessionState, now: datetime) -> None:
    """The live state as the bridge last saw it (a status it never saw stays unknown)."""
    view.status = state.status
    # The clock the cut connection ran is void (soak, issue 11: a session still busy when a
    # socket cut healed kept the time of its last event from before the cut, and its next
    # stall check took the reconnect's seconds for a stall). A session this daemon saw busy
    # gets a new clock from the hello, so a stall through the cut is still found; one it
    # never saw (a restarted daemon) keeps none until its next event, so a tool running
    # quietly through a restart is never taken for a stall.
    saw_it_busy = view.last_activity is not None
    view.last_activity = now if state.status == "busy" and saw_it_busy else None
    view.retry_next = _retry_at(state, now) if state.status == "retry" else None
    view.permissions = set(state.permissions)
    view.questions = set(state.questions)
    view.stopped_in_retry = False


def _retry_at(state: SessionState, now: datetime) -> datetime | None:
    if state.retry_next is None:
        return None
    try:
        return datetime.fromtimestamp(state.retry_next / 1000, tz=now.tzinfo)
    except (OverflowError, OSError, ValueError):
        return None  # a time no clock has: the back-off is unknown, the status stands
