"""Notifications against the real OpenCode 1.18.33 (issue 10): a local webhook on 127.0.0.1 and a
command channel, fed by the daemon's own decisions.

Silence is proven by order, not by waiting: every channel delivers in order, so a message that
should not exist would reach the sinks before the "fence" notification that follows it.
"""

from __future__ import annotations

import json
import re
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from daemon_process import FAST_CONFIG, DaemonProcess, wait_until
from fake_unattended import install as install_unattended
from notify_sink import WebhookSink
from test_daemon_e2e import TURN, confirmed, connect, decisions, finished_ok

from opencode_autoretry.notifications.records import notifications

pytestmark = [pytest.mark.e2e, pytest.mark.shared_opencode]

#: The command channel: one line per event, the payload and the arrival time.
COMMAND = (
    "import json, sys, time\n"
    "event = json.load(sys.stdin)\n"
    "event['received'] = time.time()\n"
    "open(sys.argv[1], 'a').write(json.dumps(event) + '\\n')\n"
)


def notify_config(sink: WebhookSink, out: Path, *extra: str) -> str:
    command = json.dumps([sys.executable, "-c", COMMAND, str(out)])
    lines = ["[notify]", f"command = {command}", f"webhook = {json.dumps(sink.url)}", *extra]
    return FAST_CONFIG + "\n" + "\n".join(lines) + "\n"


def command_events(out: Path) -> list[dict[str, Any]]:
    if not out.exists():
        return []
    return [json.loads(line) for line in out.read_text().splitlines() if line.strip()]


def wait_commands(out: Path, count: int) -> list[dict[str, Any]]:
    return wait_until(lambda: len(command_events(out)) >= count and command_events(out), TURN,
                      f"{count} command notification(s)")


def latency_s(event: dict[str, Any], arrived: float) -> float:
    """From the decision (the payload's ``time``) to the arrival at the sink."""
    return arrived - datetime.fromisoformat(event["time"]).timestamp()


FIGURES: dict[str, list[float]] = {}


def record(name: str, value: float) -> None:
    FIGURES.setdefault(name, []).append(round(value, 4))


@pytest.fixture(scope="module", autouse=True)
def report_figures():
    """Printed at the end of the module (visible with ``-s``; pytest captures it otherwise)."""
    yield
    if FIGURES:
        print("\nnotify figures: " + ", ".join(f"{k}={v}" for k, v in FIGURES.items()))


def loop_thread_ms(d: DaemonProcess) -> list[float]:
    found = [re.search(r"loop thread ([0-9.]+) ms", line) for line in d.lines()]
    return [float(m[1]) for m in found if m]


def rows_of(d: DaemonProcess) -> list[Any]:
    view = d.store()
    try:
        return notifications(view)
    finally:
        view.close()


@pytest.fixture
def sink():
    server = WebhookSink()
    yield server
    server.close()


def blank_budget_runs_out(provider, server, d) -> str:
    provider.script(["blank"] * 3)
    session = server.create_session(title="Blank three times")["id"]
    server.prompt_async(session, "Say hello")
    wait_until(lambda: [x.action for x in decisions(d, session)][-1:] == ["notify"], TURN,
               "the blank budget runs out")
    return session


def test_gave_up_and_terminal_once_each_none_for_a_child_or_a_recovery(
    provider, daemon, start_opencode, sink, tmp_path
):
    out = tmp_path / "events.jsonl"
    d = daemon(config=notify_config(sink, out))
    server = connect(start_opencode, d)
    install_unattended(provider)

    gave_up = blank_budget_runs_out(provider, server, d)
    sink.wait_for(1, TURN)

    root = server.create_session()["id"]
    child = server.create_session(parent_id=root)["id"]
    server.prompt_async(child, "Subtask [[s:http401]]")
    wait_until(lambda: any("child session" in x.reason for x in decisions(d, child)), TURN,
               "the child's 401 is judged")

    provider.script(["blank"])
    recovered = server.create_session()["id"]
    server.prompt_async(recovered, "Say hello")
    confirmed(d, recovered)
    wait_until(lambda: finished_ok(server, recovered), TURN, "the blank is recovered")
    server.wait_idle(recovered, TURN)

    terminal = server.create_session(title="Bad key")["id"]  # the fence
    server.prompt_async(terminal, "Say hello [[s:http401]]")
    posts = sink.wait_for(2, TURN)
    lines = wait_commands(out, 2)

    for events in ([p.body for p in posts], lines):
        assert [(e["event"], e["session_id"]) for e in events] == [
            ("gave_up", gave_up), ("terminal", terminal)]
    first, second = lines
    assert (first["kind"], first["attempts"], first["budget"]) == ("blank", 2, 2)
    assert first["title"] == "Blank three times" and first["directory"]
    assert first["resume"].startswith(f"cd {first['directory']} && opencode --session {gave_up}")
    assert "HTTP 401" in second["message"] and second["title"] == "Bad key"
    rows = wait_until(lambda: (r := rows_of(d)) and all(x.state != "queued" for x in r) and r,
                      TURN, "every delivery is recorded")
    assert sorted((r.event, r.channel, r.state) for r in rows) == [
        ("gave_up", "command", "sent"), ("gave_up", "webhook", "sent"),
        ("terminal", "command", "sent"), ("terminal", "webhook", "sent")]
    assert "s3cret" not in "\n".join(d.lines()) and "t0k" not in "\n".join(d.lines())
    for line, post in zip(lines, posts, strict=True):
        record("notify_latency_command_s", latency_s(line, line["received"]))
        record("notify_latency_webhook_s", latency_s(post.body, post.at))
    record("notify_loop_thread_ms", max(loop_thread_ms(d)))


def test_a_recovered_blank_is_told_when_asked(provider, daemon, start_opencode, sink, tmp_path):
    out = tmp_path / "events.jsonl"
    d = daemon(config=notify_config(sink, out, 'events = ["gave_up", "recovered"]'))
    server = connect(start_opencode, d)
    provider.script(["blank"])
    session = server.create_session()["id"]
    server.prompt_async(session, "Say hello")
    [post] = sink.wait_for(1, TURN)
    assert post.body["event"] == "recovered" and post.body["session_id"] == session
    assert post.body["attempts"] == 1
    assert [e["event"] for e in wait_commands(out, 1)] == ["recovered"]


@pytest.mark.parametrize("mode", ["fail", "hang"])
def test_a_failing_webhook_does_not_delay_another_sessions_recovery(
    mode, provider, daemon, start_opencode, sink, tmp_path
):
    sink.mode = mode
    out = tmp_path / "events.jsonl"
    # A hang outlasts the whole scenario (60 s per attempt), so the sink sees one attempt only.
    d = daemon(config=notify_config(sink, out, f"timeout = {60 if mode == 'hang' else 10}"))
    server = connect(start_opencode, d)

    blank_budget_runs_out(provider, server, d)
    sink.wait_for(1, TURN)  # the webhook now answers 500 (and is retried) or hangs

    provider.script(["blank"])
    other = server.create_session()["id"]
    server.prompt_async(other, "Say hello")
    blank, continued = provider.wait_for_requests(2, TURN)[-2:]
    confirmed(d, other)
    wait_until(lambda: finished_ok(server, other), TURN, "the other session recovers")
    if mode == "hang":
        assert len(sink.received()) == 1  # still inside the first, hanging attempt
    [line] = wait_commands(out, 1)  # the command channel is not held up by the webhook
    assert line["event"] == "gave_up"
    record(f"recovery_gap_with_{mode}_webhook_s", continued.at - blank.at)
    record(f"notify_loop_thread_{mode}_ms", max(loop_thread_ms(d)))
    sink.release()

    def webhook_row() -> Any:
        rows = [r for r in rows_of(d) if r.channel == "webhook"]
        return rows and rows[0].state != "queued" and rows[0]

    row = wait_until(webhook_row, 3 * TURN, "the webhook's failure is recorded")
    if mode == "fail":
        assert row.state == "failed" and row.attempts == 2 and "HTTP 500" in row.error
        assert len(sink.received()) == 2  # retried exactly once
    assert "s3cret" not in (row.error or "") and "t0k" not in (row.error or "")
