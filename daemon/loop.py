"""The one thread that decides and acts: inbox items in, classified turns, decisions performed.

Producers (bridge readers, the DB tailer, timer jobs, signal handlers) only enqueue; this loop
is the single consumer and the only caller of ``Actions``. It reads the clock once per item and
passes ``now`` down to the pure classifier and decision core. Every ``tick_interval`` it checks
stalls, due retries, the on/off switch and writes a heartbeat.
"""

from __future__ import annotations

import logging
import os
import queue
import random
import sqlite3
import time
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any

from opencode_autoretry.clock import Clock
from opencode_autoretry.config.load import Config
from opencode_autoretry.daemon import control
from opencode_autoretry.daemon.actions import Actions
from opencode_autoretry.daemon.alerts import WaitingAlerts
from opencode_autoretry.daemon.bridge_links import BridgeLinks
from opencode_autoretry.daemon.db_rows import DbRowsIntake
from opencode_autoretry.daemon.gap import GapReview
from opencode_autoretry.daemon.goals.guard import GoalGuard
from opencode_autoretry.daemon.goals.runner import CheckRunner, GoalCheckDone
from opencode_autoretry.daemon.heartbeat import Heartbeat
from opencode_autoretry.daemon.inbox import (
    BridgeClosed,
    BridgeConnected,
    BridgeMessage,
    DbRows,
    Reload,
    Shutdown,
    TimerDue,
)
from opencode_autoretry.daemon.intake.db_guard import DbGuard
from opencode_autoretry.daemon.intake.sources import UnownedWatch
from opencode_autoretry.daemon.judge import Owner, judge_for
from opencode_autoretry.daemon.notifications.actions import Enqueuer, Notifications
from opencode_autoretry.daemon.notifications.notifier import DeliveryResult
from opencode_autoretry.daemon.outbox import BridgeSender
from opencode_autoretry.daemon.parts import STORE, PartHealth
from opencode_autoretry.daemon.reattach import running_tools_of
from opencode_autoretry.daemon.recovery import Recovery
from opencode_autoretry.daemon.repetition.guard import RepetitionGuard
from opencode_autoretry.daemon.repetition.watch import RepetitionWatch
from opencode_autoretry.daemon.scheduler import Timers
from opencode_autoretry.daemon.sessions import (
    BUSY,
    IDLE,
    RETRY,
    Sessions,
    SessionView,
    event_session_id,
    expire_abort,
    is_stalled,
    note_unknown_step,
    stall_verdict,
    track_event,
)
from opencode_autoretry.daemon.subagents.stalls import SubagentStalls
from opencode_autoretry.daemon.telemetry.recorder import TelemetryRecorder
from opencode_autoretry.daemon.todos.guard import TodoGuard
from opencode_autoretry.decisions.budget import PendingEvent, should_cancel_pending
from opencode_autoretry.decisions.caps import TurnSpend, turn_spend
from opencode_autoretry.models import Action, Decision, ErrorInfo, Kind, LiveFacts, Turn, Verdict
from opencode_autoretry.opencode.daemon_reads import DaemonReads
from opencode_autoretry.opencode.dbtypes import DbError
from opencode_autoretry.opencode.shapes import parse_error
from opencode_autoretry.plugin_bridge import protocol
from opencode_autoretry.store.database import Store

log = logging.getLogger(__name__)

#: A session view with no owner, not busy and quiet this long is forgotten (issue 20); looked
#: for every EVICT_EVERY. Its next event or row makes a fresh view.
EVICT_IDLE = timedelta(hours=6)
EVICT_EVERY = timedelta(minutes=10)
_PROGRESS = frozenset({
    "message.updated", "message.part.updated", "message.part.delta", "session.status",
    "permission.asked", "permission.replied", "question.asked", "question.replied",
    "question.rejected", "todo.updated",
})


class Loop:
    def __init__(
        self,
        config: Config,
        store: Store,
        bridge: BridgeSender,
        open_db: Callable[[], DaemonReads],
        timers: Timers,
        clock: Clock,
        *,
        rand: Callable[[], float] = random.random,
        pid: int | None = None,
        parts: PartHealth | None = None,
        notifier: Enqueuer | None = None,
        telemetry: TelemetryRecorder | None = None,
        post: Callable[[object], None] | None = None,
        doctor_line: Callable[[], Mapping[str, Any] | None] | None = None,
    ) -> None:
        self.config = config  # validated once, before the loop is built (issue 18)
        self.settings = settings = config.settings
        self.store = store
        self.clock = clock
        self.policy = config.policy  # with the [todos] budget
        self.sessions = Sessions()
        self.parts = parts or PartHealth()  # issue 11: what is broken, for the log and status
        self._dbs = DbGuard(settings.opencode_db, open_db, self.parts, clock.now,
                            lambda at: self.gap.lost(at, "OpenCode's DB was unreadable"))
        self._rand = rand
        #: Doctor's latest summary line and its inputs (``daemon/health.py``), or none yet.
        self.doctor_line = doctor_line or (lambda: None)
        self.heartbeat = Heartbeat(store, pid if pid is not None else os.getpid(),
                                   lambda stopping: control.heartbeat_info(self, stopping))
        self.actions = Actions(store, bridge, self.db, timers, self.sessions,
                               observe=settings.observing)  # issue 23: record, never act
        self.recovery = Recovery(store, self.actions, self.sessions, self.db, timers)
        self._bridge = bridge
        # issue 6: loops in streams; issue 9: healthy ends with todos left. Both decide through
        # the loop's one decision path (``_decide``) and act through its one performer.
        self.repetition = RepetitionGuard(
            RepetitionWatch(), store, self.actions, self.sessions, self.db, self._decide,
            bridge, penalties=config.penalties,
        )
        self.todos = TodoGuard(
            config.todos, store, self.actions, self.db, self._decide,
            lambda now, sid: self.recovery.send_due(now, sid),
        )
        # issue 22: goal checks run on workers that post their results here (the inbox)
        self.posted: list[object] = []  # without an inbox (unit tests): handled by the caller
        self.goals = GoalGuard(
            config.goal, store, self.actions, self.db, self._decide,
            lambda now, sid: self.recovery.send_due(now, sid),
            CheckRunner(post or self.posted.append, config.goal.timeout),
            live=lambda sid: self.sessions.live_facts(sid, settled=True),
            view=self.sessions.ensure, aborted=self.todos.aborted,
            enabled=lambda sid: settings.enabled and store.is_enabled(sid),
        )
        #: session -> (turn, what it spent when last judged): ``/autoretry status`` (issue 22)
        self.spend: dict[str, tuple[str, TurnSpend]] = {}
        self.subagents = SubagentStalls(self.db, store, settings.stall_timeout)  # issue 9
        self.judge = judge_for(config, store, self.db, rand=rand, scope=self.subagents.scope)
        self.notifications = Notifications(store, self.db, config.notify, notifier)
        self.actions.listeners.append(self.notifications.on_decision)  # issue 10
        self.telemetry = telemetry  # issue 24: counters and decisions to an OTLP collector
        if telemetry is not None:
            self.actions.listeners.append(telemetry.on_decision)
            self.actions.sent_listeners.append(telemetry.on_sent)
        self.alerts = WaitingAlerts(self.sessions, store, self.db, self.notifications)  # 23
        self._recorded: dict[str, tuple[Action, str]] = {}  # trigger message -> last record
        self._last_evict: datetime | None = None
        self.gap = GapReview(self.sessions, store, self.db,  # issue 11: after a gap
                             lambda view, now: self.evaluate(view, now, settled=True))
        self.links = BridgeLinks(self.sessions, self.recovery, self.gap, self.repetition,
                                 self.heartbeat, lambda sid: running_tools_of(self.db(), sid))
        self.db_rows = DbRowsIntake(
            self.actions, self.links.owned_now,
            lambda sid, now: self.evaluate(self.sessions.ensure(sid), now, settled=True),
        )
        self.started = clock.now()
        #: Set when the loop stopped for a SIGHUP reload: its caller restarts the daemon.
        self.reload_requested = False

    # -- OpenCode's DB (opened lazily: it may not exist yet) ----------------------------------

    def db(self) -> DaemonReads | None:
        return self._dbs.get()

    # -- the bridges (what control and the heartbeat read) ------------------------------------

    @property
    def bridges(self) -> dict[str, protocol.Hello | None]:
        return self.links.hellos

    @property
    def bridge_stats(self) -> dict[str, protocol.Stats]:
        return self.links.stats

    @property
    def unowned(self) -> UnownedWatch:
        return self.db_rows.unowned

    # -- the run loop -----------------------------------------------------------------------

    def start(self, now: datetime) -> None:
        """Rebuild from the store, send what the last daemon queued but never delivered, then
        look back on what ended while the daemon was down."""
        self.recovery.rebuild(now)
        self.notifications.resend_unsent(now)
        self.gap.after_restart(now)

    def run(self, inbox: queue.Queue[object]) -> None:
        self.start(self.clock.now())
        next_tick = time.monotonic()
        while True:
            try:
                item = inbox.get(timeout=max(0.0, next_tick - time.monotonic()))
            except queue.Empty:
                item = None
            if item is not None and not self.handle(item):
                break
            if time.monotonic() >= next_tick:
                if not self.catch_up(inbox):
                    break
                self.tick()
                next_tick = time.monotonic() + self.settings.tick_interval
        self.goals.runner.stop()  # no check outlives the daemon
        self.beat(self.clock.now(), stopping=True)

    def catch_up(self, inbox: queue.Queue[object]) -> bool:
        """Handle what is already queued before a tick judges it: a loop held up (a slow
        disk, a starved CPU) must not take a session for stalled while the events that say it
        moved wait in its inbox. Bounded by the queue's size when called, so a steady stream
        cannot put the tick off. False when one of them was the shutdown."""
        for _ in range(inbox.qsize()):
            try:
                item = inbox.get_nowait()
            except queue.Empty:
                return True
            if not self.handle(item):
                return False
        return True

    def handle(self, item: object) -> bool:
        """Act on one inbox item; False when the loop should stop."""
        if isinstance(item, Shutdown):
            log.info("shutting down (%s)", item.reason)
            return False
        if isinstance(item, Reload):
            return not self._reload(item)
        now = self.clock.now()
        try:
            self._dispatch(item, now)
        except (DbError, sqlite3.Error) as exc:  # a part failed: said once, judged after it
            self.part_failed(exc, now)
        except Exception:  # one bad item must not stop the daemon
            log.exception("failed to handle %r", type(item).__name__)
        return True

    def _reload(self, item: Reload) -> bool:
        """True when the loop stops to restart with the new configuration; a bad one is
        refused with its one line and the daemon keeps the configuration it runs with."""
        error = item.check()
        if error is not None:
            log.error("not reloading: bad configuration: %s (still running with the previous "
                      "one)", error)
            return False
        log.info("reloading the configuration (SIGHUP): restarting in place")
        self.reload_requested = True
        return True

    def part_failed(self, exc: BaseException, now: datetime) -> None:
        """OpenCode's DB (``DbError``) or the store (sqlite) failed under the loop: what the
        item would have judged is judged again by the gap review once the part is back."""
        if isinstance(exc, DbError):
            self._dbs.failed(exc, now)
        else:
            self.parts.fail(STORE, f"{type(exc).__name__}: {exc}", now)
            self.gap.lost(now, "the autoretry store was unusable")

    def _dispatch(self, item: object, now: datetime) -> None:
        if isinstance(item, BridgeMessage):
            self._on_bridge(item.conn_id, item.message, now)
        elif isinstance(item, BridgeConnected):
            self.links.connected(item, now)
        elif isinstance(item, BridgeClosed):
            self.links.closed(item, now)
        elif isinstance(item, TimerDue):
            self.recovery.send_due(now)
        elif isinstance(item, DbRows):
            self.db_rows.on_rows(item, now)
        elif isinstance(item, DeliveryResult):
            self.notifications.on_result(item, now)
        elif isinstance(item, GoalCheckDone):
            self.goals.on_result(item, now)

    def tick(self) -> None:
        now = self.clock.now()
        try:
            self._dbs.check(now)
            if self.parts.down(STORE) is not None:
                self.beat(now)  # the cheapest write: does the store work again?
                self.parts.ok(STORE, now)
            self._check_stalls(now)
            self.db_rows.recheck(self.db(), now)
            self.gap.tick(now)
            self.recovery.apply_switch(now)
            self.recovery.send_due(now)
            self.recovery.check_sent(now)
            self.notifications.tick(now)
            self.alerts.tick(now)
            self._evict_idle(now)
            self.heartbeat.tick(now)
        except (DbError, sqlite3.Error) as exc:
            self.part_failed(exc, now)
        except Exception:
            log.exception("tick failed")

    def _evict_idle(self, now: datetime) -> None:
        if self._last_evict is not None and now - self._last_evict < EVICT_EVERY:
            return
        self._last_evict = now
        evicted = self.sessions.evict_idle(now, EVICT_IDLE)
        for session_id in evicted:
            self.spend.pop(session_id, None)
            self.goals.forget(session_id)
        if evicted:
            log.debug("forgot %d idle ownerless session view(s)", len(evicted))

    # -- bridge messages --------------------------------------------------------------------

    def _on_bridge(self, conn_id: str, raw: object, now: datetime) -> None:
        message = raw  # bridges.py decodes every line into a protocol dataclass
        if isinstance(message, protocol.Event):
            self._on_event(conn_id, message, now)
        elif isinstance(message, protocol.ChatMessage):
            self._on_chat(conn_id, message, now)
        elif isinstance(message, protocol.Ack):
            self.actions.on_ack(message.id, message.ok, message.error, now)
        elif isinstance(message, protocol.Command):
            reply = control.answer(message, self, now)
            self._bridge.send(conn_id, reply)
        elif isinstance(message, protocol.Stats):
            self.links.on_stats(conn_id, message)

    def _on_chat(self, conn_id: str, chat: protocol.ChatMessage, now: datetime) -> None:
        view = self.links.owned(chat.session_id, conn_id)
        view.last_activity = now
        if chat.marker is not None:
            injection = str(chat.marker.get("injection", ""))
            if injection.isdigit():
                self.actions.confirm(int(injection), chat.message_id, now)
            return
        if chat.synthetic or chat.command:
            return
        # A real user message: a new turn (its ledger is opened lazily by its id) and no
        # pending retry of the old turn may still fire.
        view.agent = chat.agent or view.agent
        reason = should_cancel_pending(
            self.actions.pending.get(chat.session_id), PendingEvent.REAL_USER_MESSAGE
        ) or "cancelled: the user wrote a new message"
        self.actions.cancel_open(chat.session_id, now, reason)
        view.unknown_steps.clear()
        view.runaway_acted.clear()
        self.repetition.new_turn(chat.session_id)
        self.todos.new_turn(chat.session_id)
        self.goals.on_user_message(chat.session_id, chat.message_id, now)
        if chat.message_id:
            self.store.set_current_turn(chat.session_id, chat.message_id, now)

    def _on_event(self, conn_id: str, event: protocol.Event, now: datetime) -> None:
        props = event.properties
        session_id = event_session_id(props)
        if session_id is None:
            return
        view = self.links.owned(session_id, conn_id)
        kind = event.event_type
        log.debug("%s %s %s", conn_id, kind, session_id)
        if kind in _PROGRESS:
            view.last_activity = now
        self.repetition.on_event(view, kind, props, now)
        if kind == "message.part.delta":
            return  # most events by far; only progress and the loop watch read them (issue 21)
        self.todos.on_event(session_id, kind, props, now, ours=view.abort_requested is not None)
        if kind == "session.error" and self.todos.aborted(session_id):
            self.goals.on_abort(session_id, now)  # the user stopped the turn: its goal ends
        if kind == "session.status":
            status = props.get("status")
            self._on_status(view, status if isinstance(status, Mapping) else {}, now)
        elif kind == "session.idle":
            self._on_idle(view, now)
        elif kind == "session.error":
            self._on_error(view, props.get("error"), now)
        elif kind == "session.deleted":
            self.actions.cancel_open(session_id, now, "cancelled: the session was deleted")
        elif kind == "message.updated":
            self._on_message_info(view, props.get("info"), now)
        else:
            track_event(self.sessions, view, kind, props)
            self.alerts.on_event(session_id, kind, props, now)  # issue 23: "needs you"

    def _on_status(self, view: SessionView, status: Mapping[str, Any], now: datetime) -> None:
        kind = status.get("type")
        if kind == IDLE:
            self._on_idle(view, now)
            return
        pending = self.actions.pending.get(view.session_id)
        if kind == BUSY:
            view.quiet = False
            if view.status not in (BUSY, RETRY) and view.abort_requested is None:
                self._cancel(view, should_cancel_pending(pending, PendingEvent.SESSION_BUSY), now)
            view.status, view.retry_next = BUSY, None
            view.stopped_in_retry = False
        elif kind == RETRY:
            view.status, view.stopped_in_retry = RETRY, False
            nxt = status.get("next")
            view.retry_next = datetime.fromtimestamp(nxt / 1000, tz=now.tzinfo) if isinstance(
                nxt, int | float) else None
            self._cancel(view, should_cancel_pending(pending, PendingEvent.SESSION_RETRYING), now)

    def _cancel(self, view: SessionView, reason: str | None, now: datetime) -> None:
        if reason is not None:
            self.actions.cancel_open(view.session_id, now, reason)

    def _on_idle(self, view: SessionView, now: datetime) -> None:
        # OpenCode leaves a retry back-off only by trying again (busy), by a final error (judged
        # from it) or by an abort: one we did not ask for is the user's (no error row says so).
        view.stopped_in_retry = view.status == RETRY and view.abort_requested is None
        view.status = IDLE
        view.retry_next = None
        view.tools_running.clear()
        # OpenCode keeps a session busy while it waits on the user, so idle means nothing is
        # asked any more (the bridge's book reads it so too): an ask whose reply event never
        # arrived must not hold every later turn of the session as "waiting on the user".
        view.permissions.clear()
        view.questions.clear()
        if view.abort_requested is not None:
            # Our own abort finished: not a failure; stay quiet until the session works again.
            view.abort_requested = None
            view.quiet = True
        elif not view.quiet:
            self.evaluate(view, now, settled=True)
        self.recovery.send_due(now, view.session_id)
        parent = self.sessions.get(view.parent_id) if view.parent_id else None
        if parent is not None and parent.status == IDLE and not parent.quiet:
            self.evaluate(parent, now, settled=True)  # it was waiting on this child (R2)

    def _on_error(self, view: SessionView, raw: object, now: datetime) -> None:
        if view.abort_requested is not None or view.quiet:
            return  # the MessageAbortedError of an abort we asked for
        error = parse_error(raw)
        self.evaluate(view, now, error=error, settled=True)

    def _on_message_info(self, view: SessionView, info: object, now: datetime) -> None:
        if not isinstance(info, Mapping) or info.get("role") != "assistant":
            return
        count = note_unknown_step(view, info)
        parent = str(info.get("parentID"))
        if count >= self.settings.runaway_steps and parent not in view.runaway_acted:
            view.runaway_acted.add(parent)
            self.evaluate(view, now, settled=False)

    # -- deciding ---------------------------------------------------------------------------

    def evaluate(
        self, view: SessionView, now: datetime, *, error: ErrorInfo | None = None,
        settled: bool = False, verdict: Verdict | None = None,
    ) -> Decision | None:
        """Classify the session's last turn and perform what the decision core says."""
        live = self.sessions.live_facts(view.session_id, settled=settled)
        judged = self.judge.judge(
            view.session_id, now, live=live, owner=self._owner_kind(view),
            pending=self.actions.pending.get(view.session_id), error=error, verdict=verdict,
        )
        if judged is None:
            return None
        self.spend[view.session_id] = (judged.turn.id, turn_spend(judged.turn, now))
        if judged.verdict.kind is Kind.HEALTHY and settled:
            self.notifications.on_healthy(view.session_id, judged.turn, now)  # issue 10
            if self.telemetry is not None:
                self.telemetry.on_healthy(view.session_id, judged.turn.id, now)
            todo = self.todos.on_healthy(view, judged.turn, live, now)  # issue 9: todos left
            if todo is None or not todo.sends:  # issue 22: a goal goes on after the todos
                self.goals.on_healthy(view, judged.turn, live, now)
            return todo
        if judged.decision is None:  # nothing to decide: said at debug, for a trace to show why
            log.debug("%s judged %s: %s (turn %s)", view.session_id, judged.verdict.kind,
                      judged.verdict.reason, judged.turn.id)
            return None
        turn, verdict, decision = judged.turn, judged.verdict, judged.decision
        # One record per failure and outcome: the duplicated idles and replays of a failure
        # already acted on (or already skipped for the same reason) add nothing to the trace.
        key = verdict.message_id or f"turn:{turn.id}"
        before = self._recorded.get(key)
        repeat = before is not None and (
            before[0] is not Action.SKIP or before[1] == decision.reason
        )
        if decision.sends or not repeat:
            self._recorded[key] = (decision.action, decision.reason)
            self.actions.perform(decision, now, verdict.message_id)
            if decision.sends:
                self.beat(now)  # the owners a restart needs to send this retry
            if decision.action is Action.INJECT:
                self.recovery.send_due(now, view.session_id)  # at once, if the session is idle
        elif decision.ledger is not None:  # not recorded again, but what it spent still counts
            self.store.save_ledger(decision.ledger, now)
        enabled = self.store.is_enabled(view.session_id)
        if verdict.kind is Kind.RUNAWAY and not decision.sends and enabled:
            self.actions.abort(view.session_id, now)  # stop the loop even without a budget
        return decision

    def _owner_kind(self, view: SessionView) -> Owner:
        """A bridge inside an `autoretry exec` run is exec's to recover, never the daemon's."""
        if view.owner is None:
            return Owner.NONE
        return Owner.HEADLESS if view.headless else Owner.LIVE

    def _decide(
        self, view: SessionView, turn: Turn, verdict: Verdict, live: LiveFacts, now: datetime
    ) -> Decision:
        pending = self.actions.pending.get(view.session_id)
        return self.judge.decide(turn, verdict, live, self._owner_kind(view), pending, now)

    def _check_stalls(self, now: datetime) -> None:
        for view in self.sessions:
            expire_abort(view, now)
            if not is_stalled(view, now, self.settings.stall_timeout):
                self.subagents.note_waiting(view, now)
                continue
            db = self.db()
            turn = db.last_turn(view.session_id) if db is not None else None
            verdict = self.subagents.verdict(view, turn, now) or stall_verdict(view, turn, now)
            view.last_activity = now  # one check per stall period
            self.evaluate(view, now, verdict=verdict)

    # -- heartbeat --------------------------------------------------------------------------

    def beat(self, now: datetime, *, stopping: bool = False) -> None:
        self.heartbeat.beat(now, stopping=stopping)
