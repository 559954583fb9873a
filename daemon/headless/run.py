"""``autoretry exec``: drive one headless ``opencode run`` and continue its session after it exits.

OpenCode leaves ``run`` a few ms after ``session.idle``, so nobody can continue a failed turn
from inside the process: exec waits for the run to exit, finds the session it worked on in
OpenCode's DB (read-only), and judges its last turn on the daemon's own decision path
(``Judge``: classifier, fail-closed parent check, the store's per-turn ledger, ``budget.decide``).
The decision is performed by the daemon's ``Actions`` and ``Recovery`` (decision and intent
records, the marker, the gate, due times), with OpenCode's CLI as the hand: the "prompt" is a
new ``opencode run --session ID`` with the turn's model, agent and variant. Its bridge puts the
marker on the continuation (``AUTORETRY_EXEC_MARKER``), so the continuation stays in the same
turn and budgets are not reset; ``AUTORETRY_EXEC=1`` tells the daemon to keep its hands off.

Output of the runs passes through untouched (the children inherit stdout and stderr); exec's
own lines go to stderr, prefixed ``autoretry:``.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from types import FrameType
from typing import IO, Any

from opencode_autoretry.causes import Cause, Facts
from opencode_autoretry.clock import Clock
from opencode_autoretry.config.load import Config
from opencode_autoretry.daemon.actions import Actions
from opencode_autoretry.daemon.goals.runner import run_check
from opencode_autoretry.daemon.judge import Owner, judge_for
from opencode_autoretry.daemon.recovery import Recovery
from opencode_autoretry.daemon.sessions import Sessions
from opencode_autoretry.goals.check import excerpt, goal_blocker, goal_verdict, signature
from opencode_autoretry.models import Action, Decision, Kind, LiveFacts, Turn, to_epoch_ms
from opencode_autoretry.opencode.daemon_reads import DaemonReads
from opencode_autoretry.opencode.dbtypes import DbError
from opencode_autoretry.opencode.run_args import RunArgs
from opencode_autoretry.plugin_bridge.protocol import Abort, Prompt, Toast
from opencode_autoretry.store.database import Store

log = logging.getLogger(__name__)

EXEC_OWNER = "exec"  # the owner "connection" of the session exec continues
EXIT_GAVE_UP = 75  # EX_TEMPFAIL: a recoverable failure, budget exhausted
ENV_EXEC = "AUTORETRY_EXEC"  # read by the bridge (hello `exec`)
ENV_SESSION, ENV_MARKER = "AUTORETRY_EXEC_SESSION", "AUTORETRY_EXEC_MARKER"
WAIT_SLICE_S = 0.25  # a backoff wait wakes this often to notice a signal

Spawn = Callable[..., "subprocess.Popen[bytes]"]


def say(stream: IO[str], message: str) -> None:
    line = message if message.startswith("autoretry:") else f"autoretry: {message}"
    print(line, file=stream, flush=True)


def exit_status(returncode: int) -> int:
    """A child killed by signal N exits like a shell reports it: 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


class CliHand:
    """The ``BridgeSender`` of exec: a prompt becomes ``opencode run --session``; toasts are
    printed to stderr; an abort is impossible (the run has already exited)."""

    def __init__(self, run: RunArgs, env: Mapping[str, str], cwd: str | None, spawn: Spawn,
                 err: IO[str]) -> None:
        self._run = run
        self._env = env
        self._cwd = cwd
        self._spawn = spawn
        self._err = err
        self.child: subprocess.Popen[bytes] | None = None

    def send(self, conn_id: str, request: Any) -> bool:
        if isinstance(request, Prompt):
            return self._continue(request)
        if isinstance(request, Toast):
            say(self._err, request.message)
            return True
        return not isinstance(request, Abort)  # logs: the toast already said it

    def _continue(self, prompt: Prompt) -> bool:
        model = f"{prompt.model.provider_id}/{prompt.model.model_id}" if prompt.model else None
        argv = self._run.continuation(prompt.session_id, prompt.text, model=model,
                                      agent=prompt.agent, variant=prompt.variant)
        env = {**self._env, ENV_EXEC: "1", ENV_SESSION: prompt.session_id,
               ENV_MARKER: json.dumps(dict(prompt.marker or {}))}
        try:  # stdin: the first run may have read it; a continuation needs none
            self.child = self._spawn(argv, env=env, cwd=self._cwd, stdin=subprocess.DEVNULL)
        except OSError as exc:
            say(self._err, f"cannot start {argv[0]}: {exc}")
            return False
        return True


class NoTimers:
    """exec waits for due times itself (``Runner._wait_until``); nothing to arm."""

    def arm(self, injection_id: int, due: datetime) -> None:
        return None

    def cancel(self, injection_id: int) -> None:
        return None


@dataclass(frozen=True)
class Found:
    session_id: str | None
    why: str


def run_directories(run: RunArgs, cwd: str, pwd: str | None) -> set[str]:
    """Where the run works: OpenCode 1.18 takes its directory from ``$PWD`` (measured: a
    child started with another cwd but the parent's ``PWD`` records the parent's directory),
    a shell keeps both equal; ``--dir`` is relative to it."""
    bases = {cwd, *([pwd] if pwd else [])}
    return {os.path.realpath(os.path.join(base, run.directory or ".")) for base in bases}


def find_session(db: DaemonReads, run: RunArgs, started: datetime, cwd: str,
                 pwd: str | None = None) -> Found:
    """The root session the run worked on: the ``--session`` it named, else the one root
    session of its directory that got a user message after exec started it (ties broken by
    the message text). Unsure means none: exec never continues a session it only guesses."""
    if run.session and not run.forks:
        found = db.session(run.session)
        return Found(found.id if found else None, f"session {run.session} is not in the DB")
    users = db.user_messages_since(to_epoch_ms(started))
    sessions = db.sessions({m.session_id for m in users})
    directories = run_directories(run, cwd, pwd)
    roots = {s.id for s in sessions.values()
             if s.parent_id is None and os.path.realpath(s.directory) in directories}
    if len(roots) == 1:
        return Found(roots.pop(), "")
    asked = {m.session_id for m in users if m.session_id in roots
             and any(p.text.strip() in (run.text.strip(), run.sent_text) for p in m.parts)}
    if len(asked) == 1:
        return Found(asked.pop(), "")
    if not roots:
        return Found(None, "")  # the run asked nothing (its own usage error, say): nothing to say
    where = " or ".join(sorted(directories))
    return Found(None, f"{len(roots)} sessions in {where} got a message during the run")


class Runner:
    """One exec: the first run, then judged continuations until the turn is healthy, the
    budget is exhausted, the failure is not recoverable or a signal stops it."""

    def __init__(
        self, run: RunArgs, argv: list[str], store: Store, open_db: Callable[[], DaemonReads],
        config: Config, clock: Clock, *,
        spawn: Spawn = subprocess.Popen, env: Mapping[str, str] | None = None,
        cwd: str | None = None, err: IO[str] = sys.stderr,
        rand: Callable[[], float] = lambda: 0.5, stop: threading.Event | None = None,
        pause: Callable[[float], object] | None = None, verbose: bool = False,
        until: str | None = None,
    ) -> None:
        self.until = until  # the goal's check (``--until``), issue 22
        self._goal: int | None = None  # its row in the store
        self._goal_config = config.goal
        self.run, self.argv, self.store, self.clock = run, argv, store, clock
        self._open_db = open_db
        self._db: DaemonReads | None = None
        self._spawn = spawn
        self._env = {k: v for k, v in (os.environ if env is None else env).items()
                     if k not in (ENV_SESSION, ENV_MARKER)}
        self._cwd = cwd
        self._err = err
        self.stop = stop or threading.Event()
        self._pause = pause or self.stop.wait  # a signal ends the wait early
        self._verbose = verbose
        self.sessions = Sessions()
        self.hand = CliHand(run, self._env, cwd, spawn, err)
        self.observe = config.settings.observing  # issue 23: judge and record, re-run nothing
        self.actions = Actions(store, self.hand, self.db, NoTimers(), self.sessions,
                               observe=self.observe)
        self.recovery = Recovery(store, self.actions, self.sessions, self.db, NoTimers())
        self.judge = judge_for(config, store, self.db, rand=rand)  # the daemon's, [fallback] too
        self.child: subprocess.Popen[bytes] | None = None
        self.continuations = 0

    def db(self) -> DaemonReads | None:
        if self._db is None:
            try:
                self._db = self._open_db()
            except DbError as exc:
                log.debug("OpenCode DB not available: %s", exc)
        return self._db

    # -- signals ----------------------------------------------------------------------------

    def on_signal(self, signum: int, _frame: FrameType | None = None) -> None:
        """SIGINT/SIGTERM: passed on to the running child; no further continuation."""
        self.stop.set()
        for child in {id(c): c for c in (self.child, self.hand.child) if c is not None}.values():
            if child.poll() is None:
                child.send_signal(signum)

    # -- the run ----------------------------------------------------------------------------

    def execute(self) -> int:
        started = self.clock.now()
        env = {**self._env, ENV_EXEC: "1"}
        try:
            self.child = self._spawn(self.argv, env=env, cwd=self._cwd)
        except OSError as exc:
            say(self._err, f"cannot start {self.argv[0]}: {exc}")
            return 127
        status = exit_status(self.child.wait())
        if self.stop.is_set() or self.child.returncode < 0:
            return status  # interrupted, or killed by a signal (a crash): not ours to resume
        db = self.db()
        cwd = self._cwd or os.getcwd()
        found = find_session(db, self.run, started, cwd, self._env.get("PWD")) if db else Found(
            None, "OpenCode's DB cannot be read")
        if self._verbose:
            say(self._err, f"run exited with {status}; session: {found.session_id or found.why}")
        if found.session_id is None:
            if found.why:
                say(self._err, f"not recovering: cannot tell which session the run used "
                               f"({found.why})")
            return status
        self.sessions.ensure(found.session_id).owner = EXEC_OWNER
        return self._recover(found.session_id, status)

    def _recover(self, session_id: str, status: int) -> int:
        while True:
            now = self.clock.now()
            judged = self.judge.judge(session_id, now, live=LiveFacts(), owner=Owner.EXEC,
                                      pending=self.actions.pending.get(session_id))
            if judged is None:
                return status
            verdict, decision = judged.verdict, judged.decision
            if self._verbose:
                say(self._err, f"{session_id}: {verdict.kind} ({verdict.reason}); "
                               f"{decision.reason if decision else 'nothing to do'}")
            if decision is None:
                if verdict.kind is not Kind.HEALTHY:
                    return status
                if self.until is not None:
                    decision = self._goal_step(session_id, judged.turn, now)
                    if decision is None:
                        return 0  # the check passes
                    if not decision.sends:
                        return EXIT_GAVE_UP
                else:
                    if self.continuations:
                        say(self._err, f"recovered after {self.continuations} continuation(s)")
                    return 0
            else:
                self.actions.perform(decision, now, verdict.message_id)
            if self.observe and decision.action is not Action.SKIP:
                # Its toast (stderr) said what exec would have done; nothing is re-run.
                return status  # the run's own status: exec did nothing
            if decision.action is Action.NOTIFY:
                return EXIT_GAVE_UP
            if not decision.sends:
                if verdict.kind is not Kind.HEALTHY:
                    say(self._err, f"not recovering: {verdict.kind} ({verdict.reason}); "
                                   f"{decision.reason}")
                return status
            self.sessions.ensure(session_id).abort_requested = None  # the run has exited
            if not self._wait_until(decision.due or now):
                self.actions.cancel_open(session_id, self.clock.now(),
                                         "cancelled: autoretry exec was interrupted")
                return status
            next_status = self._continue(session_id)
            if next_status is None:
                return status
            status = next_status
            if self.stop.is_set():
                return status

    def _goal_step(self, session_id: str, turn: Turn, now: datetime) -> Decision | None:
        """``--until``: run the check after a healthy end (blocking: exec has no loop to
        hold up); None when it passes, else the decision performed on the one path."""
        assert self.until is not None
        if self._goal is None:
            self._goal = self.store.set_goal(session_id, self.until, turn.id, now)
        db = self.db()
        session = db.session(session_id) if db is not None else None
        directory = (session.directory if session else None) or self._cwd
        result = run_check(self.until, directory, self._goal_config.timeout)
        now = self.clock.now()
        last = turn.last_step
        reply = last.id if last is not None else turn.id
        failing = [c.signature for c in self.store.goal_checks(goal_id=self._goal)
                   if c.exit_code != 0]
        self.store.record_goal_check(self._goal, session_id, reply, now, result.exit_code,
                                     int(result.duration_s * 1000), result.timed_out,
                                     signature(result.output), excerpt(result.output, 400))
        say(self._err, f"goal check `{self.until}`: {result.status_words}")
        if result.passed:
            met = Decision(Action.SKIP, Cause.GOAL_MET, session_id, turn.id, Kind.GOAL,
                           facts=Facts(detail=f"`{self.until}` exit status 0",
                                       continuations=self.continuations, exit_code=0))
            self.actions.perform(met, now, reply)
            self.store.end_goal(self._goal, "met", "the check passed", now)
            return None
        blocker = goal_blocker(turn)
        verdict = goal_verdict(turn, result, [*failing, signature(result.output)])
        if verdict is None:
            return None
        if blocker is not None:
            verdict = replace(verdict, retryable=False, reason=f"{verdict.reason}; {blocker}")
        decision = self.judge.decide(turn, verdict, LiveFacts(), Owner.EXEC,
                                     self.actions.pending.get(session_id), now)
        self.actions.perform(decision, now, reply)
        if not decision.sends:
            self.store.end_goal(self._goal, "given_up", decision.reason, now)
            say(self._err, f"giving up on the goal: {decision.reason}")
        return decision

    def _wait_until(self, due: datetime) -> bool:
        """Honour the backoff (real clock); False when a signal stopped exec meanwhile."""
        while not self.stop.is_set():
            left = (due - self.clock.now()).total_seconds()
            if left <= 0:
                return True
            self._pause(min(left, WAIT_SLICE_S))
        return False

    def _continue(self, session_id: str) -> int | None:
        """Send the due intent through the CLI hand and wait for that run; None if nothing
        was sent (the gate refused, or the intent was cancelled)."""
        self.hand.child = None
        self.recovery.send_due(self.clock.now(), session_id)
        child = self.hand.child
        if child is None:
            return None
        self.child = child
        self.continuations += 1
        status = exit_status(child.wait())
        self._confirm(session_id)
        return status

    def _confirm(self, session_id: str) -> None:
        """The marked message must be in OpenCode's DB; without it (no bridge loaded) the
        continuation would read as a new user turn, so the injection fails and exec stops."""
        now = self.clock.now()
        for injection in self.store.open_injections(session_id):
            if injection.state == "sent" and not self.recovery.confirm_from_db(injection, now):
                self.store.mark_failed(
                    injection.id, now, "sent, but OpenCode stored no autoretry marker "
                    "(is the bridge installed? `autoretry bridge install`)")
                say(self._err, "the continuation carries no marker: is the bridge installed? "
                               "(`autoretry bridge install`); not continuing further")
                self.stop.set()


def install_signals(runner: Runner) -> None:
    signal.signal(signal.SIGINT, runner.on_signal)
    signal.signal(signal.SIGTERM, runner.on_signal)

