"""``autoretry exec -- opencode run …`` on the real OpenCode 1.18.33 against the fake provider.

Every scenario runs the real ``autoretry exec`` (a subprocess, with its own store and fast
interruption backoffs) around the real ``opencode run`` in the isolated OpenCode home, whose
bridge is installed: the continuation's marker is put there by the bridge. Checked each time:
exec's exit status, what reached stdout, the provider's log (how many model requests), and the
store that ``autoretry trace`` reads (how many continuations, in which turn).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from daemon_process import FAST_CONFIG, wait_until
from fake_exec import install as install_exec_faults
from fake_faults import install as install_faults
from fake_provider import NORMAL_TEXT
from fake_unattended import install as install_unattended
from test_daemon_e2e import decisions as daemon_decisions
from test_daemon_e2e import injections as daemon_injections

from opencode_autoretry.causes import Cause
from opencode_autoretry.opencode.db import OpenCodeDB
from opencode_autoretry.store.database import StoreView

pytestmark = pytest.mark.e2e

EXIT_GAVE_UP = 75


@dataclass
class ExecResult:
    status: int
    stdout: str
    stderr: str
    store: Path
    seconds: float

    def view(self) -> StoreView:
        return StoreView.open(self.store)

    def injections(self) -> list[Any]:
        view = self.view()
        try:
            return view.injections()
        finally:
            view.close()

    def decisions(self) -> list[Any]:
        view = self.view()
        try:
            return view.decisions()
        finally:
            view.close()


@pytest.fixture
def faults(provider):
    install_exec_faults(install_faults(provider))
    return provider


@pytest.fixture
def exec_home(tmp_path: Path) -> Path:
    home = tmp_path / "autoretry"
    home.mkdir()
    (home / "config.toml").write_text(FAST_CONFIG)
    return home


def run_exec(opencode_bin: Path, opencode_home, home: Path, socket: Path, *args: str,
             timeout: float = 120.0) -> ExecResult:
    env = opencode_home.env(
        AUTORETRY_HOME=str(home), AUTORETRY_CONFIG=str(home / "config.toml"),
        AUTORETRY_SOCKET=str(socket), OPENCODE_DB=str(opencode_home.data_dir / "opencode.db"),
    )
    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "opencode_autoretry.cli", "exec", "--verbose", "--",
         str(opencode_bin), "run",
         *args],
        cwd=opencode_home.project, env=env, capture_output=True, text=True, timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
    return ExecResult(done.returncode, done.stdout, done.stderr, home / "autoretry.db",
                      time.monotonic() - began)


def model_requests(provider) -> list[Any]:
    return provider.requests()  # title requests excluded


def session_directory(opencode_home, session_id: str) -> str:
    """The directory OpenCode recorded for the session (read as the daemon reads it)."""
    db = OpenCodeDB.open(opencode_home.data_dir / "opencode.db")
    try:
        session = db.session(session_id)
    finally:
        db.close()
    assert session is not None, f"session {session_id} is not in OpenCode's DB"
    return session.directory


def one_session(result: ExecResult) -> str:
    sessions = {i.session_id for i in result.injections()} | {
        d.session_id for d in result.decisions()}
    assert len(sessions) == 1, sessions
    return sessions.pop()


# -- recovered: exit 0, the answer on stdout, one continuation ------------------------------


@pytest.mark.parametrize("fault, first_requests", [
    ("blank", 1),
    ("http400_disconnect", 1),  # a gateway cut reported as a 400 (OpenCode does not retry)
    # OpenCode (1.18) retries a rate limit 5 times itself, then gives up
    pytest.param("http429:0.1", 6, marks=pytest.mark.opencode("gives_up")),
])
@pytest.mark.long
def test_a_failed_run_is_continued_once_and_exits_0(
    opencode_bin, opencode_home, faults, exec_home, socket_path, fault, first_requests
):
    faults.script([fault] * first_requests)
    result = run_exec(opencode_bin, opencode_home, exec_home, socket_path, "say hello")
    assert result.status == 0, result.stderr
    assert NORMAL_TEXT.strip() in result.stdout
    requests = model_requests(faults)
    assert [r.behaviour.split(":")[0] for r in requests] == [
        fault.split(":")[0]] * first_requests + ["normal"]
    (injection,) = result.injections()
    assert injection.state == "confirmed" and injection.message_id
    assert requests[-1].last_user_text == injection.text
    assert "autoretry: " in result.stderr and "continuing" in result.stderr
    trace = trace_json(exec_home, opencode_home, one_session(result))
    (continuation,) = trace["continuations"]
    assert continuation["outcome"]["status"] == "recovered", continuation


def trace_json(home: Path, opencode_home, session_id: str) -> dict[str, Any]:
    env = opencode_home.env(AUTORETRY_HOME=str(home),
                            OPENCODE_DB=str(opencode_home.data_dir / "opencode.db"))
    done = subprocess.run(
        [sys.executable, "-m", "opencode_autoretry.cli", "trace", session_id, "--json"],
        env=env, capture_output=True, text=True, timeout=60, check=True,
    )
    return json.loads(done.stdout)


# -- given up, not ours, and the output format --------------------------------------------------


def test_three_blank_replies_exit_75_after_exactly_two_continuations(
    opencode_bin, opencode_home, faults, exec_home, socket_path
):
    faults.script(["blank", "blank", "blank"])
    result = run_exec(opencode_bin, opencode_home, exec_home, socket_path, "say hello")
    assert result.status == EXIT_GAVE_UP, result.stderr
    assert [r.behaviour for r in model_requests(faults)] == ["blank"] * 3
    injections = result.injections()
    assert len(injections) == 2 and {i.state for i in injections} == {"confirmed"}
    assert len({i.turn_id for i in injections}) == 1, "the continuations stay in the user's turn"
    assert [d.action for d in result.decisions()] == ["inject", "inject", "notify"]
    assert "still failing" in result.stderr


def test_a_401_keeps_opencodes_own_status_and_is_never_continued(
    opencode_bin, opencode_home, faults, exec_home, socket_path
):
    faults.script(["http401"])
    plain = subprocess.run(
        [str(opencode_bin), "run", "say hello"], cwd=opencode_home.project,
        env=opencode_home.env(AUTORETRY_SOCKET=str(socket_path)), capture_output=True,
        timeout=120, stdin=subprocess.DEVNULL,
    )
    faults.reset()
    faults.script(["http401"])
    result = run_exec(opencode_bin, opencode_home, exec_home, socket_path, "say hello")
    assert result.status == plain.returncode, result.stderr
    assert [r.behaviour for r in model_requests(faults)] == ["http401"]
    assert result.injections() == []
    assert [(d.action, d.kind) for d in result.decisions()] == [("skip", "terminal")]


def test_autoretry_off_sends_nothing(opencode_bin, opencode_home, faults, exec_home,
                                     socket_path):
    env = opencode_home.env(AUTORETRY_HOME=str(exec_home))
    subprocess.run([sys.executable, "-m", "opencode_autoretry.cli", "off"], env=env,
                   check=True, capture_output=True, timeout=60)
    faults.script(["blank"])
    result = run_exec(opencode_bin, opencode_home, exec_home, socket_path, "say hello")
    assert result.status == 0  # `opencode run`'s own status for a blank reply
    assert len(model_requests(faults)) == 1 and result.injections() == []
    assert [d.reason for d in result.decisions()] == ["skip: autoretry is off"]
    # The run worked in the test's project, not in the checkout the suite runs from.
    assert session_directory(opencode_home, one_session(result)) == str(opencode_home.project)


def test_a_subagents_failure_is_left_to_its_parent(opencode_bin, opencode_home, faults,
                                                   exec_home, socket_path):
    faults.script(["task:blank"])  # the child session's reply is blank; the root's is fine
    result = run_exec(opencode_bin, opencode_home, exec_home, socket_path, "delegate it")
    assert result.status == 0, result.stderr
    assert result.injections() == []
    assert all(d.action == "skip" for d in result.decisions())


def test_json_output_stays_valid_json_lines(opencode_bin, opencode_home, faults, exec_home,
                                            socket_path):
    faults.script(["blank"])
    result = run_exec(opencode_bin, opencode_home, exec_home, socket_path,
                      "--format", "json", "say hello")
    assert result.status == 0, result.stderr
    events = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
    assert events, "no events printed"
    sessions = {e.get("sessionID") for e in events if e.get("sessionID")}
    assert sessions == {one_session(result)}, "both runs print events of the same session"
    assert NORMAL_TEXT.strip() in result.stdout
    assert not any(line.startswith("autoretry:") for line in result.stdout.splitlines())


# -- with the daemon running: still one continuation per failure ------------------------------


@pytest.mark.long
def test_with_the_daemon_running_each_failure_is_continued_once(
    opencode_bin, opencode_home, faults, exec_home, socket_path, daemon
):
    running = daemon()
    faults.script(["blank", "http400_disconnect"])
    result = run_exec(opencode_bin, opencode_home, running.home, socket_path, "say hello")
    assert result.status == 0, result.stderr
    one_session(result)
    assert [r.behaviour for r in model_requests(faults)] == [
        "blank", "http400_disconnect", "normal"]
    # The daemon saw both failures through the runs' bridges and left them to exec: each run
    # exits right after its turn ends, and its bridge still delivers that end.
    def skipped() -> list[str]:
        return sorted({d.kind or "" for d in result.decisions() if d.cause is Cause.HEADLESS})

    wait_until(lambda: skipped() == ["blank", "disconnect"], 30,
               "the daemon's skip of both failed runs")
    injections = result.injections()
    assert len(injections) == 2 and {i.state for i in injections} == {"confirmed"}
    sends = [d for d in result.decisions() if d.action in ("inject", "inject_at")]
    assert len(sends) == 2, [d.reason for d in result.decisions()]


def test_a_plain_runs_failure_is_judged_and_nothing_runs_in_the_exiting_opencode(
    opencode_bin, opencode_home, faults, socket_path, daemon
):
    """A plain ``opencode run`` (no exec) exits as soon as its turn ends: its bridge still
    delivers that end, so the daemon judges it, and reads nothing more, so the continuation
    decided for it never runs in the OpenCode that is going away (it waits for the session's
    next owner, and fails after 90 s without one)."""
    running = daemon()
    faults.script(["blank"])
    plain = subprocess.run(
        [str(opencode_bin), "run", "say hello"], cwd=opencode_home.project,
        env=opencode_home.env(AUTORETRY_SOCKET=str(socket_path)), capture_output=True,
        timeout=120, stdin=subprocess.DEVNULL,
    )
    assert plain.returncode == 0, plain.stderr
    closed = running.wait_log("lost its owner (bridge", 30)
    session_id = closed.split("session ", 1)[1].split()[0]
    judged = [(d.action, d.kind) for d in daemon_decisions(running, session_id)]
    assert judged == [("inject", "blank")]
    # Waiting for an owner (its write broke), or written into the closing socket unread.
    assert [i.state for i in daemon_injections(running, session_id)] in (["intent"], ["sent"])
    db = OpenCodeDB.open(opencode_home.data_dir / "opencode.db")
    try:
        assert db.injected_messages(session_id) == []
    finally:
        db.close()
    assert [r.behaviour for r in model_requests(faults)] == ["blank"]


@pytest.mark.skipif(not os.environ.get("AUTORETRY_E2E_MEASURE"),
                    reason="a measurement (three more runs): AUTORETRY_E2E_MEASURE=1")
def test_exec_overhead_per_continuation(opencode_bin, opencode_home, faults, exec_home,
                                        socket_path, record_property):
    """From exec's decision (the first run has exited and its turn is judged) to the
    continuation's first provider request, and the in-process part of it (decision to the
    continuation's spawn); median of three."""
    totals, own = [], []
    for _ in range(3):
        faults.reset()
        install_exec_faults(install_faults(faults))
        faults.script(["blank"])
        before = {i.id for i in ExecResult(0, "", "", exec_home / "autoretry.db", 0).injections()}
        result = run_exec(opencode_bin, opencode_home, exec_home, socket_path, "say hello")
        assert result.status == 0, result.stderr
        (injection,) = [i for i in result.injections() if i.id not in before]
        decision = next(d for d in result.decisions() if d.id == injection.decision_id)
        request = model_requests(faults)[-1]
        totals.append(request.at - decision.at.timestamp())
        own.append((injection.sent_at - decision.at).total_seconds())
    totals.sort()
    own.sort()
    record_property("exec_overhead_s", totals)
    record_property("exec_own_s", own)
    print(f"\nexec overhead per continuation: median {totals[1]:.2f} s {totals} "
          f"(exec's own part: median {own[1] * 1000:.0f} ms {own})", file=sys.stderr)
    assert all(t > 0 for t in totals), "the continuation's request follows the decision"


# -- [fallback]: exec switches models as the daemon does (issue 18) --------------------------


@pytest.mark.opencode("quota_is_final")
def test_a_hard_quota_continues_on_the_fallback_model(
    opencode_bin, opencode_home, faults, exec_home, socket_path
):
    """exec builds its decision path from the same Config as the daemon, ``[fallback]``
    included: a hard quota on fake-model is continued once on fake-b, which answers."""
    install_unattended(faults)
    config = exec_home / "config.toml"
    config.write_text(config.read_text() + '\n[fallback]\n"fake/fake-model" = ["fake/fake-b"]\n')
    result = run_exec(opencode_bin, opencode_home, exec_home, socket_path,
                      "--model", "fake/fake-model", "say hello [[s:quota429]]")
    assert result.status == 0, result.stderr
    assert NORMAL_TEXT.strip() in result.stdout
    requests = model_requests(faults)
    failed = [r for r in requests if r.behaviour == "quota429"]
    assert failed and {r.model for r in failed} == {"fake-model"}, result.stderr
    assert (requests[-1].behaviour, requests[-1].model) == ("normal", "fake-b"), result.stderr
    assert requests[-1].last_user_text.startswith("Continue.")
    assert "switched fake/fake-model → fake/fake-b" in result.stderr
    (injection,) = result.injections()
    assert injection.state == "confirmed"
    [switch] = [d for d in result.decisions() if d.action == "inject"]
    assert "usage limit on fake/fake-model: switched fake/fake-model → fake/fake-b" in (
        switch.reason)
