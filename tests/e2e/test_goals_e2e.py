"""Goals and spend caps (issue 22) against the real OpenCode 1.18.33 and the real daemon.

The goals run side by side in one OpenCode with one daemon. Each check is a small shell
script under the test's tmp dir: it counts its runs in a file, or waits for a flag file the
test creates, so every outcome is decided by the test, never by a clock. The checks print
``[[s:done]]``: the continuation carries their output, and the fake model answers it "done".
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from daemon_process import FAST_CONFIG, DaemonProcess, wait_until
from fake_goals import install as install_goals
from fake_todos import install as install_todos
from test_daemon_e2e import connect, decisions, injected, injections, toast

pytestmark = [pytest.mark.e2e, pytest.mark.shared_opencode]

TURN = 30.0
EXIT_GAVE_UP = 75


def goal_config(timeout: float, sink: Path | None = None) -> str:
    notify = "" if sink is None else notify_into(sink)
    return f"[goal]\ntimeout = {timeout}\n" + notify + FAST_CONFIG


def notify_into(sink: Path) -> str:
    """A [notify] command channel appending each event's JSON as one line to ``sink``."""
    return f'[notify]\ncommand = ["sh", "-c", "cat >> {sink}; echo >> {sink}"]\n'


def notified(sink: Path) -> list[dict[str, Any]]:
    text = sink.read_text() if sink.exists() else ""
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def script(path: Path, body: str) -> str:
    """A check: ``sh PATH`` running ``body`` (the command the user would type)."""
    path.write_text(body)
    return f"sh {path}"


def failing_then_passing(tmp: Path, name: str, failures: list[str]) -> str:
    """Fails once per entry of ``failures`` (printing it), then passes."""
    count = tmp / f"{name}.count"
    cases = "".join(f"  {n}) echo '{text} [[s:done]]'; exit 1;;\n"
                    for n, text in enumerate(failures))
    return script(tmp / f"{name}.sh", (
        f"n=$(cat {count} 2>/dev/null || echo 0)\necho $((n+1)) > {count}\n"
        f"case $n in\n{cases}esac\necho 'all good'\n"))


def goals(d: DaemonProcess, session: str) -> list[Any]:
    view = d.store()
    try:
        return view.goals(session)
    finally:
        view.close()


def checks(d: DaemonProcess, session: str) -> list[Any]:
    view = d.store()
    try:
        return view.goal_checks(session)
    finally:
        view.close()


def set_goal(server, session: str, command: str, expect: str = "autoretry goal set") -> None:
    status, _ = server.command(session, "autoretry", f"goal {command}")
    assert status == 500  # the bridge stops the model call (reference §6.5)
    toast(server, expect)


def ended(d: DaemonProcess, session: str, state: str) -> Any:
    return wait_until(lambda: [g for g in goals(d, session) if g.state == state], TURN,
                      f"the goal of {session} {state}")[0]


def alive(pid: int) -> bool:
    """Alive and not a zombie (a killed orphan waits for its reaper a moment)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")


def test_a_goals_met_stagnant_hung_asking_and_in_a_child(
    provider, daemon, start_opencode, tmp_path
):
    sink = tmp_path / "notified.jsonl"
    d = daemon(config=goal_config(timeout=3, sink=sink))
    server = connect(start_opencode, d)
    install_goals(provider)
    met, stagnant, hung, asking = (server.create_session()["id"] for _ in range(4))
    child = server.create_session(parent_id=asking)["id"]
    set_goal(server, met, failing_then_passing(tmp_path, "met", [
        "FAIL: the parser is missing", "FAIL: 2 parser tests fail"]))
    set_goal(server, stagnant, script(tmp_path / "stagnant.sh",
             "echo \"FAIL: $(date +%N) tests failed in 0.$$ s [[s:done]]\"; exit 1\n"))
    pid_file = tmp_path / "hung.pid"
    set_goal(server, hung, script(tmp_path / "hung.sh",
             f"sleep 300 &\necho $! > {pid_file}\nwait\n"))
    set_goal(server, asking, "true")
    set_goal(server, child, "true", expect="child session")
    for session in (met, stagnant, hung):
        server.prompt_async(session, "Build the parser [[s:done]]")
    server.prompt_async(asking, "Plan the store [[s:ask]]")

    # fails twice, then passes: exactly two continuations, each with its check's output
    goal = ended(d, met, "met")
    assert [c.exit_code for c in checks(d, met)] == [1, 1, 0]
    texts = [i.text for i in injections(d, met)]
    assert len(texts) == 2 and [i.state for i in injections(d, met)] == ["confirmed"] * 2
    assert "FAIL: the parser is missing" in texts[0] and "exit status 1" in texts[0]
    assert "FAIL: 2 parser tests fail" in texts[1]
    assert len(injected(server, met)) == 2
    assert [x.cause for x in decisions(d, met)][-1] == "goal_met"
    assert goal.outcome == "the check passed after 2 continuation(s)"

    # the same failure twice (its numbers differ): one continuation, then stagnation
    goal = ended(d, stagnant, "given_up")
    assert "stagnation" in (goal.outcome or "")
    assert len(checks(d, stagnant)) == 2 and len(injections(d, stagnant)) == 1
    assert decisions(d, stagnant)[-1].action == "notify"

    # a check that hangs: killed at its timeout with its whole group, recorded, no continuation
    goal = ended(d, hung, "given_up")
    [check] = checks(d, hung)
    assert check.timed_out and check.exit_code is None and check.duration_ms >= 3000
    assert injections(d, hung) == [] and "timed out" in (goal.outcome or "")
    pid = int(pid_file.read_text())  # the check's background job went with its group
    wait_until(lambda: not alive(pid), TURN, "the hung check's background job ends")

    # a reply that asks the user: never checked, never continued; a child gets no goal
    wait_until(lambda: [x for x in decisions(d, asking) if "the reply asks" in x.reason], TURN,
               "the asking reply is judged")
    assert checks(d, asking) == [] and injections(d, asking) == []
    assert goals(d, child) == [] and [g.state for g in goals(d, asking)] == ["active"]
    trace = run_cli(d, "trace", met)
    assert trace.count("goal check") >= 3 and "goal met" in trace, trace
    events = wait_until(lambda: len(notified(sink)) >= 3 and notified(sink), TURN,
                        "the goals' notifications")
    assert sorted((e["session_id"], e["event"]) for e in events) == sorted([
        (met, "goal_met"), (stagnant, "goal_given_up"), (hung, "goal_given_up")])


def test_b_a_user_message_ends_the_goal_and_a_restart_goes_on_exactly_once(
    provider, daemon, start_opencode, tmp_path
):
    d = daemon(config=goal_config(timeout=60))
    server = connect(start_opencode, d)
    install_goals(provider)
    waiting, killed = server.create_session()["id"], server.create_session()["id"]
    flag = tmp_path / "go"
    set_goal(server, waiting, script(tmp_path / "waiting.sh", (
        f"while [ ! -f {flag} ]; do sleep 0.05; done\necho 'FAIL [[s:done]]'; exit 1\n")))
    server.prompt_async(waiting, "Build the parser [[s:done]]")
    toast(server, "running the goal check")
    server.prompt_async(waiting, "Stop there, I'll do the rest myself")
    goal = ended(d, waiting, "ended")
    assert goal.outcome == "the user wrote a new message"
    flag.write_text("")
    wait_until(lambda: checks(d, waiting), TURN, "the check's result is recorded")
    assert injections(d, waiting) == [] and injected(server, waiting) == []

    # the daemon SIGKILLed between two checks: the goal goes on exactly once
    set_goal(server, killed, failing_then_passing(tmp_path, "killed", ["FAIL: no parser"]))
    server.prompt_async(killed, "Build the parser [[s:done]]")
    wait_until(lambda: [i for i in injections(d, killed) if i.state == "confirmed"], TURN,
               "the first continuation is confirmed")
    d.kill()
    mark = len(d.lines())
    d.start()
    d.wait_log("connected: pid", TURN, after=mark)
    ended(d, killed, "met")
    assert len(injections(d, killed)) == 1 and len(injected(server, killed)) == 1
    assert [c.exit_code for c in checks(d, killed)][-1] == 0
    assert len(checks(d, killed)) == 2


def test_c_a_turn_over_its_token_cap_gets_no_continuation_and_one_notice(
    provider, daemon, start_opencode, tmp_path
):
    sink = tmp_path / "notified.jsonl"
    d = daemon(config="[caps]\nmax_turn_tokens = 50\n" + notify_into(sink) + FAST_CONFIG)
    server = connect(start_opencode, d)
    session = server.create_session()["id"]
    server.prompt_async(session, "Say hello [[s:blank]]")  # 100 prompt tokens, no output
    [notice] = wait_until(lambda: decisions(d, session), TURN, "the blank reply is judged")
    assert notice.action == "notify" and notice.cause == "spend_cap", notice
    assert "over max_turn_tokens = 50" in notice.reason
    toast(server, "sending nothing more in this turn")
    [note] = wait_until(lambda: notified(sink), TURN, "the gave_up notification")
    assert note["event"] == "gave_up" and "100 tokens" in note["message"], note
    assert injections(d, session) == [] and len(provider.requests()) == 1


@pytest.mark.long  # five `opencode run` starts
def test_d_exec_until_exits_0_when_the_check_passes_and_75_when_it_gives_up(
    opencode_bin, opencode_home, provider, socket_path, tmp_path
):
    install_goals(provider)
    home = tmp_path / "autoretry"
    home.mkdir()
    (home / "config.toml").write_text(goal_config(timeout=30))
    passing = failing_then_passing(tmp_path, "exec", [
        "FAIL: the parser is missing", "FAIL: 2 parser tests fail"])
    result = run_exec_until(opencode_bin, opencode_home, home, socket_path, passing)
    assert result.returncode == 0, result.stderr
    assert result.stderr.count("autoretry: goal check `") == 3 and "passed" in result.stderr
    assert len(provider.requests()) == 3  # the run and exactly two continuations
    requests = provider.requests()
    assert "FAIL: the parser is missing" in requests[1].last_user_text
    assert "FAIL: 2 parser tests fail" in requests[2].last_user_text

    stuck = script(tmp_path / "stuck.sh", "echo 'FAIL: 1 test failed [[s:done]]'; exit 1\n")
    result = run_exec_until(opencode_bin, opencode_home, home, socket_path, stuck)
    assert result.returncode == EXIT_GAVE_UP, result.stderr
    assert "stagnation" in result.stderr


def run_exec_until(opencode_bin, opencode_home, home: Path, socket: Path, check: str
                   ) -> subprocess.CompletedProcess[str]:
    env = opencode_home.env(
        AUTORETRY_HOME=str(home), AUTORETRY_CONFIG=str(home / "config.toml"),
        AUTORETRY_SOCKET=str(socket), OPENCODE_DB=str(opencode_home.data_dir / "opencode.db"),
    )
    return subprocess.run(
        [sys.executable, "-m", "opencode_autoretry.cli", "exec", "--until", check, "--",
         str(opencode_bin), "run", "Build the parser [[s:done]]"],
        cwd=opencode_home.project, env=env, capture_output=True, text=True, timeout=180,
        stdin=subprocess.DEVNULL,
    )


def run_cli(d: DaemonProcess, *args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "opencode_autoretry.cli", *args],
                          env=d.env(), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout




@pytest.mark.own_opencode  # starts OpenCode itself
def test_e_a_pending_question_a_user_abort_and_off_leave_the_goal_unchecked(
    provider, daemon, start_opencode, tmp_path
):
    d = daemon(config=goal_config(timeout=30))
    server = connect(start_opencode, d, OPENCODE_ENABLE_QUESTION_TOOL="1")
    install_todos(provider)
    install_goals(provider)
    asked, aborted, off, probe = (server.create_session()["id"] for _ in range(4))
    count = tmp_path / "runs"
    check = script(tmp_path / "check.sh", f"echo run >> {count}; echo 'FAIL [[s:done]]'; exit 1\n")
    for session in (asked, aborted, off, probe):
        set_goal(server, session, check)
    status, _ = server.command(off, "autoretry", "off here")
    assert status == 500
    toast(server, "autoretry off (this session)")

    server.prompt_async(asked, "Plan the store [[s:question]]")
    server.events.wait_for(
        lambda e: e.get("type") == "question.asked"
        and e.get("properties", {}).get("sessionID") == asked, TURN, "the question is asked")
    server.prompt_async(aborted, "Build the parser [[s:stall]]")
    wait_until(lambda: any("[[s:stall]]" in r.last_user_text for r in provider.requests()),
               TURN, "the stalled request")
    server.abort(aborted)
    ended(d, aborted, "ended")
    server.prompt_async(off, "Build the parser [[s:done]]")
    server.wait_idle(off, TURN)
    # The probe's reply asks the user: its judgement is recorded after everything before it.
    server.prompt_async(probe, "Plan the store [[s:ask]]")
    wait_until(lambda: [x for x in decisions(d, probe) if "the reply asks" in x.reason], TURN,
               "the probe is judged")

    assert not count.exists()  # no check ever ran
    assert goals(d, aborted)[0].outcome == "the user aborted the turn"
    assert [g.state for g in goals(d, asked) + goals(d, off)] == ["active", "active"]
    for session in (asked, aborted, off):
        assert injections(d, session) == [] and injected(server, session) == []
