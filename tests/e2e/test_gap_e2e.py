"""Issue 11, the restart gap, on the real OpenCode 1.18.33: faults that end while the daemon is
down are judged when it is back, from OpenCode's DB, exactly once.

The daemon is SIGKILLed with four sessions on one OpenCode: one whose blank replies already
exhausted their budget before the kill, and three that are prompted while it is down (a blank
reply, a rate limit after OpenCode's own six attempts, a healthy answer). The restarted daemon
must continue the two failures once each and leave the other two alone.
"""

from __future__ import annotations

import signal

import pytest
from daemon_process import FAST_CONFIG, DaemonProcess, wait_until
from test_daemon_e2e import (
    TURN,
    confirmed,
    connect,
    decisions,
    finished_ok,
    injected,
    injections,
)

pytestmark = [pytest.mark.e2e, pytest.mark.shared_opencode]


def owners(d: DaemonProcess) -> dict[str, int]:
    view = d.store()
    try:
        beat = view.heartbeat()
    finally:
        view.close()
    return dict(beat.info.get("owners", {})) if beat is not None else {}


@pytest.mark.opencode("gives_up")
def test_faults_that_end_while_the_daemon_is_down_are_continued_once(
    provider, daemon, start_opencode
):
    d = daemon()
    server = connect(start_opencode, d)
    spent = server.create_session()["id"]
    provider.script(["blank"] * 3)  # continued twice, then the budget is exhausted
    server.prompt_async(spent, "Say hello")
    wait_until(lambda: [x.action for x in decisions(d, spent)] == ["inject", "inject", "notify"],
               TURN, "the blank budget is spent before the kill")
    server.wait_idle(spent, TURN)
    spent_requests = len(provider.requests())

    blank, limited, healthy = (server.create_session()["id"] for _ in range(3))
    wait_until(lambda: {blank, limited, healthy} <= owners(d).keys(), TURN,
               "the owners are in the heartbeat")
    d.kill()
    server.prompt_async(blank, "Say hello [[s:blank]]")
    server.prompt_async(limited, "Say hello [[s:http429:0.1]]")  # 6 attempts, then final
    server.prompt_async(healthy, "Say hello")
    for session in (blank, limited, healthy):
        server.wait_idle(session, TURN)
    in_gap = len(provider.requests())
    assert in_gap - spent_requests == 1 + 6 + 1

    mark = len(d.lines())
    d.start()
    d.wait_log("connected: pid", TURN, after=mark)  # the same OpenCode reconnects
    for session in (blank, limited):
        confirmed(d, session)
        wait_until(lambda s=session: finished_ok(server, s), TURN, "the turn completes")
    d.wait_log("gap: the daemon was down since", TURN, after=mark)
    d.wait_log("sessions judged", TURN, after=mark)  # the DB-wide look-back ran too

    assert len(injected(server, blank)) == 1 and len(injected(server, limited)) == 1
    assert len(provider.requests()) == in_gap + 2  # exactly one continuation each
    assert [x.kind for x in decisions(d, blank)] == ["blank"]
    assert [x.kind for x in decisions(d, limited)] == ["rate_limit"]
    assert decisions(d, healthy) == [] and injected(server, healthy) == []
    assert [x.action for x in decisions(d, spent)] == ["inject", "inject", "notify"]
    assert len(injected(server, spent)) == 2


def test_a_session_no_heartbeat_named_is_continued_once_its_bridge_says_hello(
    provider, daemon, start_opencode
):
    # Found by the soak: a session created just before a SIGKILL is in no heartbeat's owners;
    # the restarted daemon judged its failed turn ownerless and never looked at it again. Its
    # bridge's hello names it now (the sessions its process saw), so it is continued, once.
    d = daemon()
    server = connect(start_opencode, d)
    assert d.process is not None
    d.process.send_signal(signal.SIGSTOP)  # frozen: no heartbeat can name what comes now
    try:
        fresh = server.create_session()["id"]
    finally:
        d.kill()
    server.prompt_async(fresh, "Say hello [[s:blank]]")
    server.wait_idle(fresh, TURN)
    assert fresh not in owners(d)
    in_gap = len(provider.requests())

    mark = len(d.lines())
    d.start()
    d.wait_log("connected: pid", TURN, after=mark)
    confirmed(d, fresh)
    wait_until(lambda: finished_ok(server, fresh), TURN, "the continued turn completes")
    d.wait_log("sessions judged", TURN, after=mark)  # the DB-wide look-back ran too

    assert len(injected(server, fresh)) == 1
    assert len(provider.requests()) == in_gap + 1
    assert [x.action for x in decisions(d, fresh) if x.action != "skip"] == ["inject"]


@pytest.mark.opencode("session_permission_rules")
def test_a_permission_wait_through_a_restart_is_left_alone(provider, daemon, start_opencode):
    # The negative case of the hello's named sessions: one waiting on the user is restored as
    # such (the daemon's log says so) and nothing is judged or sent until it is answered.
    d = daemon(config="stall_timeout = 2.0\n" + FAST_CONFIG)
    server = connect(start_opencode, d)
    rules = [{"permission": "bash", "pattern": "*", "action": "ask"}]
    assert d.process is not None
    d.process.send_signal(signal.SIGSTOP)  # frozen: the session is in no heartbeat
    try:
        session = server.ok("POST", "/session", {"permission": rules})["id"]
        server.prompt_async(session, "Run it [[s:tool]]")
        asked = server.events.wait_for(lambda e: e.get("type") == "permission.asked", TURN,
                                       "permission")
    finally:
        d.kill()
    mark = len(d.lines())
    d.start()
    named = d.wait_log("sessions (", TURN, after=mark)
    assert "names 1 sessions (1 waiting on the user)" in named, named
    d.wait_log("sessions judged", TURN, after=mark)  # the look-back ran and passed it over
    server.ok("POST", f"/permission/{asked['properties']['id']}/reply", {"reply": "once"})
    wait_until(lambda: finished_ok(server, session), TURN, "the turn ends once answered")
    assert decisions(d, session) == [] and injections(d, session) == []
    assert injected(server, session) == []
    # Answered, it is an ordinary session again: its next turn's fault is continued.
    provider.script(["http400_disconnect"])
    server.prompt_async(session, "Say hello")
    wait_until(lambda: injected(server, session), TURN, "the next turn's fault continued")
