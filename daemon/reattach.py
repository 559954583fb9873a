"""A bridge's hello names the sessions its process saw: the daemon owns them again, with the
live state the bridge knows (issue 11).

After a restart the daemon knows nothing live, and after a cut socket it dropped what the
connection had told it (``Sessions.drop_owner``); a bridge queues nothing while the daemon is
away. Without the hello's list, a session no heartbeat named yet (created just before a
SIGKILL) stayed ownerless for good, its failure recorded and never continued; and a session
waiting on a permission or a question looked idle until its next event.

So each named session becomes this connection's, unless another live bridge owns it, with
the status (busy / retry / idle) and the open asks the bridge reports. A session restored busy
gets a progress clock (``last_activity``) from the hello, and its running tools from OpenCode's
DB (the last step's tool parts still pending or running), so a tool running quietly through a
restart is never taken for a stall while a stream that went silent before it still is (the
1.17 soak: a stall that began just before a daemon kill was never found, and the turn ended
"silent" 30 s later; with a provider that never closes the stream it would have hung for good).
Whether a named session is judged again is the gap review's business (``GapReview``).
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable, Container
from datetime import datetime

from opencode_autoretry.daemon.sessions import Sessions, SessionView
from opencode_autoretry.models import PartType, ToolStatus
from opencode_autoretry.opencode.daemon_reads import DaemonReads
from opencode_autoretry.plugin_bridge.protocol import Hello, SessionState, session_states

log = logging.getLogger(__name__)


#: The tool calls still pending or running in a session's last step, as OpenCode's DB has them;
#: None when the DB cannot say.
RunningTools = Callable[[str], set[str] | None]
#: A tool part in these states is a tool still at work: progress, never a stall.
_AT_WORK = (ToolStatus.PENDING, ToolStatus.RUNNING)


def running_tools_of(db: DaemonReads | None, session_id: str) -> set[str] | None:
    """The keys ``apply_tool_part`` tracks, of the last step's tools still at work."""
    if db is None:
        return None
    try:
        turn = db.last_turn(session_id)
    except sqlite3.Error:
        return None
    step = turn.last_step if turn is not None else None
    if step is None:
        return set()
    return {str(p.data.get("callID") or p.id) for p in step.parts
            if p.type is PartType.TOOL and p.tool_status in _AT_WORK}


def adopt_named(sessions: Sessions, conn_id: str, hello: Hello, live: Container[str],
                now: datetime, running_tools: RunningTools) -> list[str]:
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
        if view.status == "busy" and not view.tools_running:
            at_work = running_tools(state.session_id)
            if at_work is None:  # the DB cannot say: no clock, never a stall taken for one
                view.last_activity = None
            else:
                view.tools_running = at_work
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
    # stall check took the reconnect's seconds for a stall): a busy session's clock starts
    # again at the hello, after a cut as after a restart, so a stall through either is found.
    view.last_activity = now if state.status == "busy" else None
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
