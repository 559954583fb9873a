"""Quota waits and "needs you" alerts against the real OpenCode 1.18.33 (issue 23).

A usage window that resets 20 s ahead is waited out with exactly one continuation, no sooner
than the reset, across a daemon SIGKILL and restart; a user message cancels another session's
wait; a reset 7 hours ahead gives up (``gave_up``) with nothing scheduled; a child and a
switched-off session never wait. A permission left unanswered raises one ``waiting``
notification; a child's or a switched-off session's raises none. Sessions side by side in one
OpenCode with one daemon.
"""

from __future__ import annotations

import json
import re
from datetime import datetime

import pytest
from daemon_process import FAST_CONFIG, DaemonProcess, wait_until
from fake_quota import install as install_quota
from fake_quota import resets
from notify_sink import WebhookSink
from test_daemon_e2e import (
    TURN,
    confirmed,
    connect,
    decisions,
    finished_ok,
    injected,
    injections,
)

from opencode_autoretry.notifications.records import notifications

pytestmark = [pytest.mark.e2e, pytest.mark.shared_opencode]

RESET_S = 20.0
CONTINUE = "Continue. The usage limit has reset"
FIGURES: dict[str, float] = {}


@pytest.fixture(scope="module", autouse=True)
def report_figures():
    """Printed at the end of the module (visible with ``-s``)."""
    yield
    if FIGURES:
        print(f"\nquota figures: {FIGURES}")


@pytest.fixture
def sink():
    server = WebhookSink()
    yield server
    server.close()


def config(sink: WebhookSink, waiting_after: float = 120) -> str:
    return (FAST_CONFIG + "\n[quota]\njitter = 0\n"
            f"[notify]\nwebhook = {json.dumps(sink.url)}\nwaiting_after = {waiting_after}\n")


def events(sink: WebhookSink) -> list[tuple[str, str]]:
    return [(r.body["event"], r.body["session_id"]) for r in sink.received()]


def causes(d: DaemonProcess, session: str) -> list[str]:
    return [str(x.cause) for x in decisions(d, session)]


def delivered(d: DaemonProcess, sessions: set[str]) -> int:
    view = d.store()
    try:
        return sum(r.state == "sent" for r in notifications(view) if r.session_id in sessions)
    finally:
        view.close()


def judged(d: DaemonProcess, session: str, cause: str) -> None:
    wait_until(lambda: cause in causes(d, session), TURN, f"{session} judged {cause}")


@pytest.mark.opencode("gives_up")
def test_a_usage_window_is_waited_out_once_across_a_restart(provider, daemon, start_opencode,
                                                            sink):
    install_quota(provider)
    d = daemon(config=config(sink))
    server = connect(start_opencode, d)
    waits = server.create_session(title="waits")["id"]
    writes = server.create_session(title="the user writes")["id"]
    far = server.create_session(title="resets in 7 h")["id"]
    off = server.create_session(title="off")["id"]
    root = server.create_session(title="parent")["id"]
    child = server.create_session(parent_id=root)["id"]
    status, _ = server.command(off, "autoretry", "off here")
    assert status == 500  # the bridge stops the model call (reference §6.5)
    for session, seconds in ((waits, RESET_S), (writes, RESET_S), (far, 7 * 3600),
                             (off, RESET_S), (child, RESET_S)):
        server.prompt_async(session, f"Say hello [[s:usage429:{seconds:g}]]")
    judged(d, waits, "quota_wait")
    judged(d, writes, "quota_wait")
    judged(d, far, "gave_up")
    judged(d, off, "off")
    judged(d, child, "child_session")
    announced = max(resets())  # the newest reset any response named

    server.prompt_async(writes, "Never mind, say hello")  # cancels that session's wait
    wait_until(lambda: [i.state for i in injections(d, writes)] == ["cancelled"], TURN,
               "the user's message cancels the wait")
    # Killed once the three notifications are recorded delivered: one delivered and killed
    # before its record is sent again after the restart (at least once, docs/notifications.md;
    # a CI run got waits' twice), which is not what this test is about.
    wait_until(lambda: delivered(d, {waits, writes, far}) == 3, TURN,
               "the three notifications recorded delivered before the kill")
    d.kill()  # SIGKILL during the wait
    mark = len(d.lines())
    d.start()
    d.wait_log("connected: pid", TURN, after=mark)

    [done] = confirmed(d, waits)
    wait_until(lambda: finished_ok(server, waits), TURN, "the continued turn completes")
    continuations = [r for r in provider.requests() if r.last_user_text.startswith(CONTINUE)]
    assert len(continuations) == 1, "exactly one continuation, across the restart"
    [wait] = [x for x in decisions(d, waits) if str(x.cause) == "quota_wait"]
    assert wait.due is not None and wait.facts.resets_at is not None
    own_reset = wait.facts.resets_at.timestamp()
    assert continuations[0].at >= own_reset, (continuations[0].at, own_reset)
    FIGURES["continuation_after_due_s"] = round(continuations[0].at - wait.due.timestamp(), 3)
    FIGURES["continuation_after_reset_s"] = round(continuations[0].at - own_reset, 3)
    assert own_reset <= announced + 0.01
    assert [i.state for i in injections(d, waits)] == ["confirmed"] and done.state == "confirmed"
    for session in (writes, far, off, child):
        assert injected(server, session) == []
    assert injections(d, far) == [] and injections(d, off) == [] and injections(d, child) == []
    # Only this test's sessions: the worker's OpenCode DB holds earlier tests' turns too, and the
    # restarted daemon's gap review may judge (and notify) one that ended in its look-back.
    mine = {waits, writes, far, off, child}
    expected = sorted([("waiting_quota", waits), ("waiting_quota", writes), ("gave_up", far)])
    wait_until(lambda: len([e for e in events(sink) if e[1] in mine]) >= 3, TURN,
               "this test's three notifications")
    got = [r for r in sink.received() if r.body["session_id"] in mine]
    assert sorted(e for e in events(sink) if e[1] in mine) == expected, [r.body for r in got]
    gave_up = next(r.body for r in got if r.body["event"] == "gave_up")
    assert "max_wait" in gave_up["message"]
    waiting = next(r.body for r in got if r.body["session_id"] == waits)
    assert re.search(r"resets at \d{4}-\d\d-\d\d \d\d:\d\d UTC", waiting["message"])


@pytest.mark.opencode("session_permission_rules")
def test_a_permission_left_unanswered_raises_one_waiting_alert(provider, daemon,
                                                              start_opencode, sink):
    d = daemon(config=config(sink, waiting_after=2))
    server = connect(start_opencode, d)
    rules = [{"permission": "bash", "pattern": "*", "action": "ask"}]
    root = server.ok("POST", "/session", {"permission": rules})["id"]
    parent = server.create_session()["id"]
    child = server.ok("POST", "/session", {"permission": rules, "parentID": parent})["id"]
    off = server.ok("POST", "/session", {"permission": rules})["id"]
    status, _ = server.command(off, "autoretry", "off here")
    assert status == 500
    asked = []
    for session in (child, off, root):  # the root's ask last: its alert is the fence
        server.prompt_async(session, "Run it [[s:tool]]")
        server.events.wait_for(
            lambda e, s=session: e.get("type") == "permission.asked"
            and e["properties"].get("sessionID") == s, TURN, f"{session} asks")
        asked.append(datetime.now().timestamp())
    [alert] = sink.wait_for(1, TURN)
    assert alert.body["event"] == "waiting" and alert.body["session_id"] == root
    assert alert.body["ask"] == "bash: echo hi-from-tool"
    assert "needs you" in alert.body["message"]
    FIGURES["waiting_alert_after_ask_s"] = round(alert.at - asked[-1], 3)
    assert alert.at - asked[-1] >= 2
    # the others were due first and would have been posted before it (in order)
    assert events(sink) == [("waiting", root)]
    loop_ms = [float(m[1]) for line in d.lines()
               if (m := re.search(r"waiting alert .* \(loop thread ([0-9.]+) ms\)", line))]
    assert len(loop_ms) == 1
    FIGURES["waiting_alert_loop_thread_ms"] = loop_ms[0]
    for session in (child, off, root):
        assert decisions(d, session) == [] and injected(server, session) == []
