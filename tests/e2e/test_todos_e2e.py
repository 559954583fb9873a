"""Unfinished todos (issue 9) against the real OpenCode 1.18.33 and the real daemon.

The fake model makes real ``todowrite`` tool calls (``fake_todos.py``), so OpenCode fills its
``todo`` table, and ends its reply with a scripted text. The countdown is shortened through
``[todos] countdown`` in the daemon's config, never by sleeping. "Nothing happened" is proven
by waiting for the daemon's recorded judgement of the reply, or, where the daemon records
nothing, for its judgement of a probe session started afterwards (the daemon handles events in
order, so the first session's idle was handled before the probe's).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from daemon_process import FAST_CONFIG, DaemonProcess, wait_until
from fake_todos import TODO_NAMES
from fake_todos import install as install_todos
from test_daemon_e2e import confirmed, connect, decisions, injected, injections, toast

pytestmark = [pytest.mark.e2e, pytest.mark.shared_opencode]

TURN = 30.0
START = "say:I've split the work into two todos. I'll start with the first one."
QUESTION = "say:I wrote the plan. Should I use SQLite or Postgres for the store?"


def todo_config(countdown: float = 1.0) -> str:
    return f"[todos]\nenabled = true\ncountdown = {countdown}\n" + FAST_CONFIG


def judged(d: DaemonProcess, session: str, needle: str) -> list:
    return wait_until(
        lambda: [x for x in decisions(d, session) if needle in x.reason],
        TURN, f"a decision with {needle!r}",
    )


def probe(d: DaemonProcess, server, provider) -> None:
    """A later session whose reply the daemon must judge: everything before it was handled."""
    provider.script(["todowrite:pending", QUESTION])
    session = server.create_session()["id"]
    server.prompt_async(session, "Probe")
    judged(d, session, "the reply asks")


def text_of(message: dict) -> str:
    return "".join(p.get("text", "") for p in message["parts"] if p.get("type") == "text")


def run_trace(d: DaemonProcess, session: str) -> str:
    env = {**os.environ, "AUTORETRY_HOME": str(d.home), "OPENCODE_DB": str(d.opencode_db),
           "AUTORETRY_CONFIG": str(d.config)}
    done = subprocess.run([sys.executable, "-m", "opencode_autoretry.cli", "trace", session],
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_a_todos_left_after_ill_start_get_one_continuation_then_nothing(
    provider, daemon, start_opencode
):
    d = daemon(config=todo_config())
    server = connect(start_opencode, d)
    install_todos(provider).script([
        "todowrite:in_progress,pending", START,
        "todowrite:completed,completed", "say:Both are implemented and tested.",
    ])
    session = server.create_session()["id"]
    server.prompt_async(session, "Build the parser and its tests")

    toast(server, "autoretry: 2 todos left — continuing in 1 s; write anything to stop")
    [done] = confirmed(d, session)
    judged(d, session, "no unfinished todos left after 1 continuation")
    [message] = injected(server, session)
    assert TODO_NAMES[0] in text_of(message) and TODO_NAMES[1] in text_of(message)
    requests = provider.requests()
    assert len(requests) == 4
    assert requests[2].last_user_text.startswith("Your todo list still has 2 unfinished")
    assert [x.action for x in decisions(d, session)] == ["inject_at", "skip"]
    trace = run_trace(d, session)
    assert "Todo continuations: 1" in trace and "✓ progress: 2 todo(s) changed" in trace, trace


def test_b_todos_left_but_the_reply_asks_the_user_nothing_ever(provider, daemon, start_opencode):
    d = daemon(config=todo_config())
    server = connect(start_opencode, d)
    install_todos(provider).script(["todowrite:pending,pending", QUESTION])
    session = server.create_session()["id"]
    server.prompt_async(session, "Plan the store")

    [skip] = judged(d, session, "the reply asks")
    assert skip.action == "skip" and skip.kind == "unfinished_todos"
    probe(d, server, provider)
    assert injections(d, session) == [] and injected(server, session) == []
    assert len(decisions(d, session)) == 1


def test_c_all_todos_completed_nothing(provider, daemon, start_opencode):
    d = daemon(config=todo_config())
    server = connect(start_opencode, d)
    install_todos(provider).script(
        ["todowrite:completed,completed", "say:Both todos are finished. Next I'll tidy up."]
    )
    session = server.create_session()["id"]
    server.prompt_async(session, "Build the parser")
    server.wait_idle(session, TURN)

    probe(d, server, provider)
    assert decisions(d, session) == [] and injections(d, session) == []
    assert injected(server, session) == []


def test_d_a_user_message_during_the_countdown_stops_it(provider, daemon, start_opencode):
    d = daemon(config=todo_config(countdown=60.0))  # the test never waits for it
    server = connect(start_opencode, d)
    install_todos(provider).script(
        ["todowrite:pending,pending", START, "say:Understood, leaving the rest to you."]
    )
    session = server.create_session()["id"]
    server.prompt_async(session, "Build the parser")
    wait_until(lambda: [i for i in injections(d, session) if i.state == "intent"], TURN,
               "the continuation waits for its countdown")

    server.prompt_async(session, "Stop there, I'll do the rest myself")
    wait_until(lambda: [i for i in injections(d, session) if i.state == "cancelled"], TURN,
               "the user's message cancels the countdown")
    judged(d, session, "the reply asks")  # the reply to the user is judged, and left alone
    assert injected(server, session) == [] and len(provider.requests()) == 3
    [cancelled] = injections(d, session)
    assert "user wrote a new message" in (cancelled.error or "")


def test_e_a_model_that_never_updates_its_todos_gets_two_continuations_then_a_notice(
    provider, daemon, start_opencode
):
    d = daemon(config=todo_config())
    server = connect(start_opencode, d)
    install_todos(provider).script([
        "todowrite:pending,pending", START,
        "say:Working on it; next I'll write the parser.", "say:Next I'll write the parser.",
    ])
    session = server.create_session()["id"]
    server.prompt_async(session, "Build the parser")

    [notice] = judged(d, session, "stagnation")
    assert notice.action == "notify"
    toast(server, "the last 2 continuations changed none of them")
    assert [x.action for x in decisions(d, session)] == ["inject_at", "inject_at", "notify"]
    assert len(confirmed(d, session, 2)) == 2 and len(injected(server, session)) == 2
    assert len(provider.requests()) == 4
    trace = run_trace(d, session)
    assert trace.count("✗ no todo changed") == 2, trace


def test_f_off_here_and_child_sessions_are_left_alone(provider, daemon, start_opencode):
    d = daemon(config=todo_config())
    server = connect(start_opencode, d)
    install_todos(provider)
    session = server.create_session()["id"]
    status, _ = server.command(session, "autoretry", "off here")
    assert status == 500  # the bridge stops the model call (reference §6.5)
    toast(server, "autoretry off")
    provider.script(["todowrite:pending,pending", START])
    server.prompt_async(session, "Build the parser")
    judged(d, session, "skip: autoretry is off")

    root = server.create_session()["id"]
    child = server.create_session(parent_id=root)["id"]
    provider.script(["todowrite:pending,pending", START])
    server.prompt_async(child, "Subtask")
    judged(d, child, "child session")
    assert injections(d, session) == [] and injections(d, child) == []
    assert injected(server, session) == [] and injected(server, child) == []


# --- issue 19: never talk over the user -----------------------------------------------------

CONTINUED = ["todowrite:completed,completed", "say:Both are implemented and tested."]


@pytest.mark.parametrize("reply", [
    "say:I've drafted the migration in migrations/0042.sql. If the column names look right, "
    "I'll apply it to staging.",
    "say:迁移脚本写好了，字段名确认没问题后我就在测试库上执行。",
    "say:I can't run the integration tests: the database container fails to start, so I'm "
    "stuck here.",
    "say:The upgrade is complete and every test passes. Make sure the migration runs on "
    "staging before the next deploy.",
], ids=["conditional-en", "conditional-zh", "blocked", "done-advice"])
def test_g_a_reply_that_hands_over_to_the_user_is_never_continued(
    reply, provider, daemon, start_opencode
):
    d = daemon(config=todo_config())
    server = connect(start_opencode, d)
    install_todos(provider).script(["todowrite:pending,pending", reply])
    session = server.create_session()["id"]
    server.prompt_async(session, "Build the parser")

    [skip] = judged(d, session, "the reply ")  # the daemon's judgement of this very reply
    assert skip.action == "skip" and skip.kind == "unfinished_todos", skip
    assert injections(d, session) == [] and injected(server, session) == []
    assert len(provider.requests()) == 2  # the todowrite and the reply: nothing prompted


@pytest.mark.parametrize("reply", [
    "say:Extracted the retry logic from client.py into retry.py.",
    "say:Now let me update the tests:",
], ids=["progress-report", "action-intent-colon"])
def test_h_a_reply_that_stops_midway_gets_exactly_one_continuation(
    reply, provider, daemon, start_opencode
):
    d = daemon(config=todo_config())
    server = connect(start_opencode, d)
    install_todos(provider).script(["todowrite:in_progress,pending", reply, *CONTINUED])
    session = server.create_session()["id"]
    server.prompt_async(session, "Build the parser and its tests")

    judged(d, session, "no unfinished todos left after 1 continuation")
    assert [x.action for x in decisions(d, session)] == ["inject_at", "skip"]
    assert len(confirmed(d, session)) == 1 and len(injected(server, session)) == 1
    assert len(provider.requests()) == 4


def test_i_a_continuation_answered_by_restating_the_question_gets_nothing_more(
    provider, daemon, start_opencode
):
    d = daemon(config=todo_config())
    server = connect(start_opencode, d)
    install_todos(provider).script([
        "todowrite:pending,pending", START,
        "say:Before going on I need one decision: should the store use SQLite or Postgres?",
    ])
    session = server.create_session()["id"]
    server.prompt_async(session, "Build the parser")

    [skip] = judged(d, session, "the reply asks")
    requests = provider.requests()
    assert "restate that question in one line and stop" in requests[2].last_user_text
    assert [x.action for x in decisions(d, session)] == ["inject_at", "skip"]
    assert len(confirmed(d, session)) == 1 and len(injected(server, session)) == 1
    assert len(requests) == 3 and skip.kind == "unfinished_todos"


@pytest.mark.own_opencode  # starts OpenCode itself
def test_j_a_pending_question_tool_call_is_never_continued(provider, daemon, start_opencode):
    d = daemon(config=todo_config())
    server = connect(start_opencode, d, OPENCODE_ENABLE_QUESTION_TOOL="1")
    install_todos(provider).script(
        ["todowrite:pending,pending", "question:Should the store use SQLite or Postgres?"]
    )
    session = server.create_session()["id"]
    server.prompt_async(session, "Plan the store")
    server.events.wait_for(
        lambda e: e.get("type") == "question.asked"
        and e.get("properties", {}).get("sessionID") == session,
        TURN, "the question tool asks the user",
    )

    # The bridge forwards the ask: the daemon's status shows the session waiting on the user.
    wait_until(lambda: "question" in waiting_on(d, session), TURN,
               "autoretry status shows the session waiting on a question", every=1.0)
    probe(d, server, provider)  # every event of the first session was handled before it
    assert decisions(d, session) == [] and injections(d, session) == []
    assert injected(server, session) == [] and len(provider.requests()) == 2 + 2


def waiting_on(d: DaemonProcess, session: str) -> list[str]:
    """What ``autoretry status --json`` says the session waits on (its heartbeat: every 5 s)."""
    report = json.loads(d.cli("status", "--json").stdout)
    return list(report.get("sessions", {}).get(session, {}).get("waiting", []))
