"""``autoretry exec``: the command line it accepts, and the Runner on a row-written OpenCode DB
with fake child processes and a fake clock (the e2e suite runs the real OpenCode)."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
from daemon_fakes import FakeClock, Harness, disconnect
from opencode_rows import OpenCodeRows, api_error, tokens

from opencode_autoretry.causes import Cause, Facts
from opencode_autoretry.config.load import parse_config
from opencode_autoretry.config.settings import Settings
from opencode_autoretry.daemon.headless.run import (
    ENV_MARKER,
    ENV_SESSION,
    EXIT_GAVE_UP,
    Runner,
    exit_status,
)
from opencode_autoretry.daemon.judge import HEADLESS
from opencode_autoretry.decisions.policy import load_policy
from opencode_autoretry.models import from_epoch_ms
from opencode_autoretry.opencode.db import OpenCodeDB
from opencode_autoretry.opencode.run_args import RunArgsError, parse_run
from opencode_autoretry.plugin_bridge import protocol
from opencode_autoretry.store.database import Store

# -- the command line ---------------------------------------------------------------------------


@pytest.mark.parametrize("argv, needle", [
    ([], "no command given"),
    (["ls", "-l"], "not an OpenCode run"),
    (["opencode"], "not an OpenCode run"),
    (["opencode", "serve"], "not an OpenCode run"),
    (["opencode", "run", "--attach", "http://127.0.0.1:4096", "x"], "--attach"),
    (["opencode", "run", "-i", "x"], "--interactive"),
    (["opencode", "run", "--format", "yaml", "x"], "--format"),
    (["opencode", "run", "--model"], "needs a value"),
])
def test_usage_errors(argv, needle):
    with pytest.raises(RunArgsError, match=needle):
        parse_run(argv)


def test_options_are_read_and_the_continuation_keeps_output_options():
    run = parse_run(["/opt/bin/opencode", "run", "--format=json", "-m", "a/b", "--agent", "plan",
                     "--print-logs", "-s", "ses_1", "--title", "t", "fix", "it"])
    assert run.session == "ses_1" and run.text == "fix it" and not run.forks
    argv = run.continuation("ses_1", "Continue.", model="fake/m", agent="build", variant=None)
    assert argv == ["/opt/bin/opencode", "run", "--session", "ses_1", "--model=fake/m",
                    "--agent=build", "--format=json", "--print-logs", "Continue."]
    dash = run.continuation("ses_1", "-x y", model=None, agent=None, variant="high")
    assert dash[-3:] == ["--", "-x", "y"] and dash[4] == "--variant=high"
    words = run.continuation("ses_1", "Continue; it was cut (lost).", model=None, agent=None,
                             variant=None)
    assert words[-5:] == ["Continue;", "it", "was", "cut", "(lost)."], "one word per argument"
    assert parse_run(["opencode", "run", "fix it", "now"]).sent_text == '"fix it" now'


def test_exit_status_of_a_signalled_child():
    assert exit_status(-15) == 143 and exit_status(3) == 3


# -- the runner ---------------------------------------------------------------------------------


@dataclass
class FakeChild:
    returncode: int
    signals: list[int] = field(default_factory=list)

    def wait(self) -> int:
        return self.returncode

    def poll(self) -> int | None:
        return self.returncode

    def send_signal(self, signum: int) -> None:
        self.signals.append(signum)


@dataclass
class Spawned:
    argv: list[str]
    env: dict[str, str]
    at: Any


class World:
    """A row-written OpenCode DB, a store and a fake ``opencode``: each run plays one script
    step (a function writing the rows that run would write) and exits with its status."""

    def __init__(self, tmp: Path, policy: dict | None = None, **tables: Any) -> None:
        self.rows = OpenCodeRows(tmp / "opencode.db")
        self.rows.commit()
        self.db_path = tmp / "opencode.db"
        self.store = Store.open(tmp / "store.db")
        self.clock = FakeClock(from_epoch_ms(self.rows.clock))
        self.policy = load_policy(policy or {})
        self.config = parse_config(replace(Settings(), policy=policy or {}, **tables))
        self.spawned: list[Spawned] = []
        self.steps: list[Callable[[Spawned], int]] = []
        self.session_id: str | None = None
        self.turn: str | None = None
        self.err = io.StringIO()

    def spawn(self, argv: list[str], env: dict[str, str], **_: Any) -> FakeChild:
        call = Spawned(list(argv), dict(env), self.clock.now())
        self.spawned.append(call)
        self.rows.clock = int(self.clock.now().timestamp() * 1000)
        status = self.steps.pop(0)(call)
        self.rows.commit()
        return FakeChild(status)

    def runner(self, argv: list[str] | None = None) -> Runner:
        argv = argv or ["opencode", "run", "say", "hello"]
        return Runner(parse_run(argv), argv, self.store, lambda: OpenCodeDB.open(self.db_path),
                      self.config, self.clock, spawn=self.spawn, env={}, cwd="/work/project",
                      err=self.err, pause=self.clock.advance)

    # -- what a run writes --------------------------------------------------------------------

    def first(self, reply: str) -> Callable[[Spawned], int]:
        def run(call: Spawned) -> int:
            self.session_id = self.rows.session("brave-run")
            self.turn = self.rows.user(self.session_id, "say hello")
            return self._reply(reply)
        return run

    def continued(self, reply: str, *, marked: bool = True) -> Callable[[Spawned], int]:
        def run(call: Spawned) -> int:
            assert self.session_id is not None
            marker = json.loads(call.env[ENV_MARKER])
            if marked:
                self.rows.injected(self.session_id, decision=int(marker["decision"]),
                                   kind=marker["kind"], injection=int(marker["injection"]))
            else:
                self.rows.user(self.session_id, "Continue.")
            return self._reply(reply)
        return run

    def _reply(self, reply: str) -> int:
        assert self.session_id is not None and self.turn is not None
        last_user = self.rows.conn.execute(
            "SELECT id FROM message WHERE session_id = ? ORDER BY time_created DESC, id DESC",
            (self.session_id,)).fetchone()[0]
        if reply == "blank":
            self.rows.assistant(self.session_id, last_user, finish="stop", toks=tokens(100, 0),
                                text=None)
            return 0
        if reply == "disconnect":
            self.rows.assistant(self.session_id, last_user, finish=None, text="",
                                error=disconnect())
            return 1
        if reply == "quota":
            quota = api_error("You exceeded your current quota (insufficient_quota)", status=429)
            self.rows.assistant(self.session_id, last_user, finish=None, text="", error=quota)
            return 1
        if reply == "401":
            self.rows.assistant(self.session_id, last_user, finish=None, text="",
                                error=api_error("Invalid API key", status=401, retryable=False))
            return 1
        self.rows.assistant(self.session_id, last_user)
        return 0

    def decisions(self) -> list[str]:
        return [d.action for d in self.store.decisions(self.session_id)]


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World(tmp_path)


def test_a_blank_reply_is_continued_once_in_the_same_turn(world: World):
    world.steps = [world.first("blank"), world.continued("normal")]
    assert world.runner(["opencode", "run", "--format", "json", "say", "hello"]).execute() == 0
    first, second = world.spawned
    assert first.env["AUTORETRY_EXEC"] == "1" and ENV_MARKER not in first.env
    assert second.argv == ["opencode", "run", "--session", world.session_id,
                           "--model=fake/fake-model", "--agent=build", "--format=json",
                           "Continue."]
    assert second.env[ENV_SESSION] == world.session_id and second.env["AUTORETRY_EXEC"] == "1"
    assert world.decisions() == ["inject"]
    (injection,) = world.store.injections(world.session_id)
    assert injection.state == "confirmed" and injection.turn_id == world.turn
    assert "autoretry: blank reply — continuing now (1/2)" in world.err.getvalue()


def test_a_hard_quota_switches_to_the_fallback_model(tmp_path: Path):
    """exec judges with the daemon's decision path, [fallback] included (issue 18: it built
    its judge without it, so a headless run never switched models)."""
    world = World(tmp_path, fallback={"fake/fake-model": ["fake/fake-b"]})
    world.steps = [world.first("quota"), world.continued("normal")]
    assert world.runner().execute() == 0
    first, second = world.spawned
    assert second.argv[:5] == ["opencode", "run", "--session", world.session_id,
                               "--model=fake/fake-b"]
    [decision] = world.store.decisions(world.session_id)
    assert decision.action == "inject" and "switched fake/fake-model → fake/fake-b" in (
        decision.reason)
    assert "switched fake/fake-model → fake/fake-b" in world.err.getvalue()


def test_a_hard_quota_without_fallback_is_not_continued(world: World):
    world.steps = [world.first("quota")]
    assert world.runner().execute() == 1
    assert len(world.spawned) == 1


def test_three_blank_replies_give_up_with_75_after_two_continuations(world: World):
    world.steps = [world.first("blank"), world.continued("blank"), world.continued("blank")]
    assert world.runner().execute() == EXIT_GAVE_UP
    assert len(world.spawned) == 3
    assert world.decisions() == ["inject", "inject", "notify"]
    (ledger,) = world.store.ledgers(world.session_id)
    assert ledger.turn_id == world.turn and ledger.used_in("blank") == 2  # type: ignore[arg-type]
    assert "still failing" in world.err.getvalue()


def test_a_disconnect_waits_for_its_backoff(world: World):
    world.steps = [world.first("disconnect"), world.continued("normal")]
    assert world.runner().execute() == 0
    waited = (world.spawned[1].at - world.spawned[0].at).total_seconds()
    assert 5 <= waited < 6  # the seed's first interruption backoff (jitter 0.5 of 0)


def test_a_401_is_not_continued_and_keeps_the_commands_status(world: World):
    world.steps = [world.first("401")]
    assert world.runner().execute() == 1
    assert len(world.spawned) == 1 and world.decisions() == ["skip"]
    assert "not recovering: terminal" in world.err.getvalue()


def test_a_healthy_run_exits_0_without_any_record(world: World):
    world.steps = [world.first("normal")]
    assert world.runner().execute() == 0
    assert world.decisions() == [] and world.err.getvalue() == ""


def test_a_continuation_without_marker_fails_and_stops(world: World):
    world.steps = [world.first("blank"), world.continued("blank", marked=False)]
    assert world.runner().execute() == 0  # the last run's own status
    assert len(world.spawned) == 2
    (injection,) = world.store.injections(world.session_id)
    assert injection.state == "failed" and "no autoretry marker" in (injection.error or "")


def test_a_signal_during_the_backoff_cancels_the_continuation(world: World):
    world.steps = [world.first("disconnect")]
    runner = world.runner()

    def interrupted(seconds: float) -> None:
        runner.on_signal(2)
    runner._pause = interrupted
    assert runner.execute() == 1
    assert len(world.spawned) == 1
    (injection,) = world.store.injections(world.session_id)
    assert injection.state == "cancelled" and "interrupted" in (injection.error or "")


def test_two_candidate_sessions_are_never_guessed(world: World):
    def two_runs(call: Spawned) -> int:
        world.first("blank")(call)
        other = world.rows.session("other-run")
        world.rows.user(other, "something else")
        return 0
    world.steps = [two_runs]
    assert world.runner(["opencode", "run", "not", "the", "text"]).execute() == 0
    assert world.decisions() == [] and "cannot tell which session" in world.err.getvalue()


def test_a_named_session_is_the_one_judged(world: World):
    sid = world.rows.session("named")
    world.rows.commit()
    world.session_id = sid

    def run(call: Spawned) -> int:
        world.turn = world.rows.user(sid, "go on")
        return world._reply("blank")
    world.steps = [run, world.continued("normal")]
    assert world.runner(["opencode", "run", "--session", sid, "go", "on"]).execute() == 0
    assert world.spawned[1].argv[3] == sid


# -- the daemon leaves exec's runs alone --------------------------------------------------------


def test_the_daemon_skips_a_session_of_an_exec_bridge_without_spending(tmp_path: Path):
    h = Harness(tmp_path)
    hello = protocol.Hello(pid=7, directory="/work/project", exec=True)
    from opencode_autoretry.daemon.intake.bridges import BridgeConnected
    h.loop.handle(BridgeConnected("b1", hello, h.clock.now()))
    sid = h.session()
    turn = h.user(sid)
    h.chat(sid, turn)
    h.blank_step(sid, turn)
    h.idle(sid)
    assert h.prompts() == []
    (decision,) = h.store.decisions(sid)
    assert decision.reason == HEADLESS
    assert h.store.load_ledger(sid, turn) is None, "no budget spent"


def test_the_daemon_never_sends_an_intent_of_exec_even_after_its_bridge_closed(tmp_path: Path):
    from opencode_autoretry.daemon.intake.bridges import BridgeConnected
    from opencode_autoretry.models import Action, Decision, Kind
    h = Harness(tmp_path)
    h.loop.handle(BridgeConnected("b1", protocol.Hello(pid=7, directory="/p", exec=True),
                                  h.clock.now()))
    sid = h.session()
    turn = h.user(sid)
    h.chat(sid, turn)
    h.closed()
    # exec, in its own process, records an intent due at once and waits a moment to send it
    decision = Decision(Action.INJECT, Cause.RETRY, sid, turn, Kind.BLANK, text="Continue.",
                        facts=Facts(note="inject: blank"))
    decision_id = h.store.record_decision(decision, h.clock.now())
    h.store.record_intent(decision_id, sid, turn, "Continue.", h.clock.now(), h.clock.now())
    h.advance(200)  # past the owner grace of a restart
    assert h.prompts() == []
    (injection,) = h.store.injections(sid)
    assert injection.state == "intent", "left to exec"


def test_a_signal_is_passed_on_to_the_running_child_and_stops_the_recovery(world: World):
    runner = world.runner()
    running = FakeChild(0)
    running.poll = lambda: None  # type: ignore[method-assign]

    def first(call: Spawned) -> int:
        world.first("blank")(call)
        runner.child = running
        runner.on_signal(15)
        return 0
    world.steps = [first]
    assert runner.execute() == 0
    assert running.signals == [15]
    assert len(world.spawned) == 1 and world.decisions() == [], "no continuation after SIGTERM"


def test_the_runs_directory_is_its_cwd_or_pwd_with_dir_on_top():
    from opencode_autoretry.daemon.headless.run import run_directories
    run = parse_run(["opencode", "run", "x"])
    assert run_directories(run, "/a", "/b") == {"/a", "/b"}
    assert run_directories(run, "/a", None) == {"/a"}
    sub = parse_run(["opencode", "run", "--dir", "sub", "x"])
    assert run_directories(sub, "/a", "/a") == {"/a/sub"}


def test_a_value_starting_with_a_dash_stays_the_options_value():
    # Issue 20: "--agent", "-x" let yargs read "-x" as an option of its own.
    run = parse_run(["opencode", "run", "--dir", "/p", "fix"])
    argv = run.continuation("ses_1", "Go.", model="--help", agent="-x", variant="--fork")
    assert argv[2:8] == ["--session", "ses_1", "--model=--help", "--agent=-x", "--variant=--fork",
                         "--dir=/p"]
    assert not any(word.startswith("-") and "=" not in word for word in argv[4:-1])
