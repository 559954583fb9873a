"""After a gap, the turns that ended unseen are judged from OpenCode's DB, once, as if live.

A gap is a stretch of time in which the loop could not see a session's events: the daemon was
down (restart, upgrade, crash), a bridge was disconnected (its events are not queued while the
daemon is away), or OpenCode's DB could not be read (an event came, but the turn behind it could
not be judged). Nothing is replayed by anyone, so the loop looks back itself:

- daemon restarted: sessions the previous daemon saw owned wait for their bridge's hello (the
  owners are in the last heartbeat); every other session with a message since the last
  heartbeat is judged at once, as the DB-only watch would have;
- a bridge reconnected: the sessions it owned when it closed are idle and settled: their last
  turn is judged when it says hello again;
- a hello names the sessions its process saw (``daemon.reattach``): one whose last ended step
  was only skipped for a reason that has passed (no live owner: a session no heartbeat had
  named yet, judged ownerless after a restart) is judged again, through the same review;
- OpenCode's DB came back: every session with a message since it was lost is judged.

Exactly once: a turn whose failure the store already has a decision for (other than a skip for
a reason that has passed, such as "no live owner") was judged before the gap and is left alone;
the ledger's ``handled`` set makes a judged failure unable to spend (and send) again anyway.
The look-back is bounded: only turns whose last step ended after the gap began (less
``LOOKBACK`` for a step OpenCode kept open with its own retries) and at most ``MAX_AGE`` ago are
judged, never old history.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from opencode_autoretry.causes import Cause
from opencode_autoretry.daemon.sessions import (
    ABORT_GRACE_S,
    OWNER_GRACE,
    Sessions,
    SessionView,
)
from opencode_autoretry.decisions.error_kinds import classify_error
from opencode_autoretry.models import Action, Kind, Message, Turn
from opencode_autoretry.plugin_bridge.protocol import Hello
from opencode_autoretry.store.database import DecisionRecord, Heartbeat

log = logging.getLogger(__name__)

#: The previous daemon may not have judged what happened in its last two heartbeat periods.
MARGIN = timedelta(seconds=10)
#: A failing step stays open while OpenCode retries it itself (~70 s for a 5xx): a step created
#: this long before the gap can still have ended inside it.
LOOKBACK = timedelta(seconds=120)
#: However long the gap: a turn that ended longer ago than this is history the user has seen
#: (a machine that was off for a night does not wake up continuing yesterday's turns).
MAX_AGE = timedelta(minutes=15)
#: Skips whose reason can have passed by the end of a gap: the turn is judged again.
TRANSIENT_SKIPS = frozenset({
    Cause.NO_OWNER, Cause.ORPHAN, Cause.BUSY, Cause.OPENCODE_RETRYING,
    Cause.WAITING_PERMISSION, Cause.WAITING_QUESTION, Cause.WAITING_CHILD,
})


class GapReader(Protocol):
    """The part of ``OpenCodeDB`` the review reads."""

    def last_turn(self, session_id: str) -> Turn | None: ...
    def sessions_with_messages_since(self, cut: datetime) -> set[str]: ...


class DecisionReader(Protocol):
    def heartbeat(self) -> Heartbeat | None: ...
    def decisions(self, session_id: str | None = None,
                  since: datetime | None = None) -> list[DecisionRecord]: ...


@dataclass(frozen=True)
class Waiting:
    """A session whose events were lost, waiting for the bridge of process ``pid``."""

    since: datetime
    pid: int
    opened: datetime


class GapReview:
    def __init__(
        self,
        sessions: Sessions,
        store: DecisionReader,
        db: Callable[[], GapReader | None],
        judge: Callable[[SessionView, datetime], object],
    ) -> None:
        self._sessions = sessions
        self._store = store
        self._db = db
        self._judge = judge
        self._waiting: dict[str, Waiting] = {}
        self._ready: dict[str, datetime] = {}  # owner back: judge once the DB is readable
        self._named: set[str] = set()  # named by a hello: re-judged if only skipped (see doc)
        self._scans: list[tuple[datetime, str]] = []  # (since, why) of DB-wide look-backs
        self._lost: dict[str, datetime] = {}  # why -> when a part was first lost
        self.judged = 0  # turns judged after a gap (status, tests)

    # -- what opens a gap ---------------------------------------------------------------------

    def after_restart(self, now: datetime) -> None:
        """Start-up: the gap began at the previous daemon's last heartbeat (none: first run,
        nothing to look back on)."""
        beat = self._store.heartbeat()
        if beat is None:
            return
        since = beat.at - MARGIN
        owners = beat.info.get("owners", {})
        # A daemon killed before its own gap closed (no hello yet) passed its waiting sessions
        # on with the gap's start: the look-back for those reaches back to that earlier gap.
        earlier = beat.info.get("gap_since", {})
        earlier = earlier if isinstance(earlier, dict) else {}
        for session_id, pid in owners.items() if isinstance(owners, dict) else ():
            if str(pid).isdigit():
                began = min(since, _parse_time(earlier.get(session_id)) or since)
                self._waiting[str(session_id)] = Waiting(began, int(pid), now)
        self._scans.append((since, "the daemon was down"))
        log.info("gap: the daemon was down since %s; %d owned sessions wait for their bridge",
                 beat.at.isoformat(), len(self._waiting))

    def bridge_closed(self, hello: Hello | None, session_ids: Iterable[str], at: datetime) -> None:
        """Its sessions' events stop here; they are judged when the process says hello again."""
        if hello is None:
            return
        for session_id in session_ids:
            self._waiting.setdefault(session_id, Waiting(at - MARGIN, hello.pid, at))

    def lost(self, at: datetime, why: str) -> None:
        """A part failed (OpenCode's DB, the store): what ends from now on may go unjudged."""
        self._lost.setdefault(why, at)

    # -- what closes it -----------------------------------------------------------------------

    def bridge_hello(self, conn_id: str, pid: int, now: datetime,
                     named: Iterable[str] = ()) -> int:
        """The process is back: it owns its sessions again and their last turns are judged;
        ``named``: the sessions its hello named that this connection now owns."""
        named = set(named)
        mine = sorted(s for s, w in self._waiting.items() if w.pid == pid or s in named)
        for session_id in mine:
            view = self._sessions.ensure(session_id)
            if view.owner is None:
                view.owner = conn_id
            self._ready[session_id] = self._waiting.pop(session_id).since
        if mine:
            log.info("gap: bridge %s (pid %d) is back with %d sessions", conn_id, pid, len(mine))
        self._named |= named - set(mine)
        return self._judge_ready(now)

    def tick(self, now: datetime) -> int:
        """Runs the look-backs the DB allows now; judges sessions whose bridge never came."""
        for session_id, waiting in list(self._waiting.items()):
            if now - waiting.opened >= OWNER_GRACE:
                self._ready[session_id] = self._waiting.pop(session_id).since
        db = self._db()
        if db is None:
            return 0
        for why, at in self._lost.items():
            self._scans.append((at - MARGIN, why))
        self._lost.clear()
        judged = 0
        seen = set(self._waiting) | set(self._ready)  # these have their own review
        while self._scans:  # a scan that fails (a part again) stays for the next tick
            since, why = self._scans[0]
            found = sorted(db.sessions_with_messages_since(since - LOOKBACK) - seen)
            count = sum(self._review(s, since, now) for s in found)
            seen.update(found)
            self._scans.pop(0)
            log.info("gap: %s since %s: %d of %d sessions judged", why, since.isoformat(),
                     count, len(found))
            judged += count
        return judged + self._judge_ready(now)

    def _judge_ready(self, now: datetime) -> int:
        if (not self._ready and not self._named) or self._db() is None:
            return 0  # judged once OpenCode's DB is readable again (see ``tick``)
        for session_id in sorted(self._named - set(self._ready)):
            ended_step = self._only_skipped(session_id, now)
            if ended_step is not None:
                self._ready[session_id] = ended_step
        self._named.clear()
        judged = 0
        for session_id, since in sorted(self._ready.items()):
            judged += self._review(session_id, since, now)
            del self._ready[session_id]  # only once judged: a failing part leaves it here
        return judged

    def waiting(self) -> list[str]:
        return sorted(self._waiting)

    def carried(self) -> dict[str, Waiting]:
        """The sessions still waiting for their bridge: the heartbeat keeps them, so a daemon
        killed again before the bridge came back does not forget them."""
        return dict(self._waiting)

    # -- judging one session ------------------------------------------------------------------

    def _review(self, session_id: str, since: datetime, now: datetime) -> int:
        db = self._db()
        turn = db.last_turn(session_id) if db is not None else None
        step = turn.last_step if turn is not None else None
        if step is None or not ended(step):
            return 0
        if ended_at(step) < max(since - LOOKBACK, now - MAX_AGE):
            return 0
        view = self._sessions.ensure(session_id)
        if view.busy or self._judged_before(session_id, step.id, since - LOOKBACK):
            return 0  # live events decide a busy session; a judged failure stays judged
        if turn is not None and self._ended_by_our_abort(session_id, turn.id, step):
            log.info("gap: %s ended in our own abort (step %s): its continuation follows",
                     session_id, step.id)
            view.abort_requested, view.quiet = None, True  # as the abort's idle would have
            return 0
        log.info("gap: judging %s (step %s ended %s)", session_id, step.id,
                 ended_at(step).isoformat())
        self._judge(view, now)
        self.judged += 1
        return 1

    def _only_skipped(self, session_id: str, now: datetime) -> datetime | None:
        """When the session's last step ended (its gap review's start), if every decision
        about it is a skip whose reason can have passed; None: nothing to judge again (no
        ended step, too old, never judged: live events and the scans decide those)."""
        db = self._db()
        turn = db.last_turn(session_id) if db is not None else None
        step = turn.last_step if turn is not None else None
        if step is None or not ended(step) or ended_at(step) < now - MAX_AGE:
            return None
        mine = [d for d in self._store.decisions(session_id, since=ended_at(step) - LOOKBACK)
                if d.message_id == step.id]
        if not mine or not all(_transient(d) for d in mine):
            return None
        log.info("gap: %s named by its bridge, only skipped so far (%s): judged again",
                 session_id, mine[-1].reason)
        return ended_at(step)

    def _ended_by_our_abort(self, session_id: str, turn_id: str, step: Message) -> bool:
        """The step ended in an abort that one of our abort-then-continue decisions (a stall,
        a runaway loop) asked for: it was running when we decided, or started within the
        abort's grace after. Found by the long soak: a socket cut between the abort and its
        idle, and the review of the gap took the abort for the user's, which cancelled the
        continuation. Judged again (a later scan of the same gap), it is still ours."""
        if step.error is None or classify_error(step.error)[0] is not Kind.USER_ABORT:
            return False
        return any(
            d.action == str(Action.ABORT_THEN_INJECT) and d.turn_id == turn_id
            and step.time_created <= d.at + timedelta(seconds=ABORT_GRACE_S)
            for d in self._store.decisions(session_id, since=ended_at(step) - MAX_AGE)
        )

    def _judged_before(self, session_id: str, message_id: str, since: datetime) -> bool:
        return any(decision.message_id == message_id and not _transient(decision)
                   for decision in self._store.decisions(session_id, since=since))


def _transient(decision: DecisionRecord) -> bool:
    """A skip for a reason that can have passed since (the turn may be judged again)."""
    return decision.action == str(Action.SKIP) and decision.cause in TRANSIENT_SKIPS


def _parse_time(raw: object) -> datetime | None:
    if not isinstance(raw, str):
        return None
    try:
        found = datetime.fromisoformat(raw)
    except ValueError:
        return None  # a heartbeat from another version: the gap starts at its beat
    return found if found.tzinfo is not None else None


def ended(step: Message) -> bool:
    """OpenCode is done with the step: a finish, an error or a completion time."""
    return step.finish is not None or step.error is not None or step.time_completed is not None


def ended_at(step: Message) -> datetime:
    return step.time_completed or step.time_created
