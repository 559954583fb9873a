"""The channels and their workers against a real local HTTP server and real commands."""

from __future__ import annotations

import json
import queue
import sys
import time
from datetime import UTC, datetime

import pytest
from notify_sink import WebhookSink

from opencode_autoretry.daemon.notifications.notifier import (
    CommandChannel,
    DeliveryResult,
    DesktopChannel,
    Notifier,
    WebhookChannel,
    deliver_once,
    desktop_program,
    send_test,
)
from opencode_autoretry.notifications.config import load_notify
from opencode_autoretry.notifications.events import Notification, NotifyEvent

NOTE = Notification(NotifyEvent.GAVE_UP, "ses_a", datetime(2026, 12, 1, tzinfo=UTC), "why",
                    title="T", directory="/p", turn_id="msg_u", kind="blank", attempts=2, budget=2)


@pytest.fixture
def sink():
    server = WebhookSink()
    yield server
    server.close()


def test_webhook_posts_the_json_payload(sink):
    ok, attempts, error = deliver_once(WebhookChannel(sink.url), NOTE, 5)
    assert (ok, attempts, error) == (True, 1, None)
    [got] = sink.received()
    assert got.body["event"] == "gave_up" and got.body["session_id"] == "ses_a"


def test_a_failing_webhook_is_retried_once_and_its_secret_never_shown(sink):
    sink.mode = "fail"
    ok, attempts, error = deliver_once(WebhookChannel(sink.url), NOTE, 5)
    assert not ok and attempts == 2 and len(sink.received()) == 2
    assert error is not None and "HTTP 500" in error
    assert "s3cret" not in error and "t0k" not in error


def test_a_hanging_webhook_times_out(sink):
    sink.mode = "hang"
    ok, attempts, error = deliver_once(WebhookChannel(sink.url), NOTE, 0.3, attempts=1)
    sink.release()
    assert not ok and error is not None and "timed out after 0.3 s" in error
    assert "s3cret" not in error


def test_an_unreachable_webhook_fails_cleanly():
    ok, _, error = deliver_once(WebhookChannel("http://127.0.0.1:9/x?token=abc"), NOTE, 2)
    assert not ok and error is not None and "abc" not in error


def test_slack_and_ntfy_bodies(sink):
    deliver_once(WebhookChannel(sink.url, "slack"), NOTE, 5)
    assert sink.received()[0].body["text"].startswith("*autoretry gave up*")
    deliver_once(WebhookChannel(sink.url, "ntfy"), NOTE, 5)
    ntfy = sink.received()[1]
    assert ntfy.path == "/hook/?token=t0k" and ntfy.body["topic"] == "s3cret-path"


def test_the_command_gets_the_event_on_stdin(tmp_path):
    out = tmp_path / "events.jsonl"
    script = f"import sys; open({str(out)!r}, 'a').write(sys.stdin.read() + '\\n')"
    ok, _, _ = deliver_once(CommandChannel([sys.executable, "-c", script]), NOTE, 10)
    assert ok and json.loads(out.read_text())["event"] == "gave_up"


def test_a_failing_command_names_its_status_not_its_arguments():
    channel = CommandChannel([sys.executable, "-c", "import sys; sys.exit(3)", "--token=abc"])
    ok, attempts, error = deliver_once(channel, NOTE, 10)
    assert not ok and attempts == 2 and error is not None
    assert "exited with status 3" in error and "abc" not in error


def test_desktop_uses_notify_send_or_osascript():
    assert desktop_program(lambda name: f"/usr/bin/{name}", "Linux") == "/usr/bin/notify-send"
    assert desktop_program(lambda name: f"/usr/bin/{name}", "Darwin") == "/usr/bin/osascript"
    assert desktop_program(lambda name: None, "Linux") is None
    argv = DesktopChannel("/usr/bin/osascript").argv(NOTE)
    assert argv[1] == "-e" and argv[2].startswith('display notification "')
    ok, _, error = deliver_once(DesktopChannel(None), NOTE, 1)
    assert not ok and error == "no notify-send or osascript on this machine"


def test_workers_deliver_off_the_callers_thread_and_report(sink):
    sink.mode = "hang"
    results: queue.Queue[DeliveryResult] = queue.Queue()
    # The channel's timeout outlasts the test: the hanging request ends only by release().
    notifier = Notifier([WebhookChannel(sink.url)], 100, results.put).start()
    assert notifier.enqueue({"webhook": 1}, NOTE) == []
    # enqueue() returned while the only delivery cannot have ended (the sink holds it until
    # released, below): the caller was never held by it, whatever the machine's speed.
    sink.wait_for(1, 10)  # the worker is now stuck in the hanging request
    assert results.empty(), "the delivery ended before the sink let it go"
    sink.mode = "ok"
    sink.release()
    result = results.get(timeout=10)
    assert result.ok and result.record_id == 1 and result.channel == "webhook"
    assert result.attempts == 1  # the one hanging request, delivered once let go
    notifier.stop()


def test_notify_test_reports_each_channel(sink, tmp_path):
    config = load_notify({"command": [sys.executable, "-c", "import sys; sys.exit(1)"],
                          "webhook": sink.url, "timeout": 5})
    results = send_test(config, NOTE)
    assert [(name, ok) for name, ok, _ in results] == [("command", False), ("webhook", True)]


def test_the_notify_test_command(sink, tmp_path):
    from click.testing import CliRunner

    from opencode_autoretry.cli.main import main

    config = tmp_path / "config.toml"
    config.write_text(f'[notify]\nwebhook = "{sink.url}"\n')
    result = CliRunner().invoke(main, ["--config", str(config), "notify", "test"])
    assert result.exit_code == 0 and result.output == "webhook: ok\n"
    assert sink.received()[0].body["event"] == "test"
    sink.mode = "fail"
    result = CliRunner().invoke(main, ["--config", str(config), "notify", "test"])
    assert result.exit_code == 1 and "webhook: FAILED — " in result.output
    assert "s3cret" not in result.output
    config.write_text('[notify]\nevents = ["nope"]\n')
    result = CliRunner().invoke(main, ["--config", str(config), "notify", "test"])
    assert result.exit_code == 2 and "notify.events[0]: unknown value 'nope'" in result.output


def test_start_up_warns_when_no_desktop_notifier_exists(caplog, monkeypatch):
    import opencode_autoretry.daemon.notifications.notifier as notifier_module

    monkeypatch.setattr(notifier_module, "desktop_program", lambda: None)
    assert notifier_module.start_notifier(load_notify({}), lambda r: None) is None
    with caplog.at_level("WARNING"):
        notifier = notifier_module.start_notifier(load_notify({"desktop": True}), lambda r: None)
    assert notifier is not None and notifier.channel_names == ("desktop",)
    assert "neither notify-send nor osascript is installed" in caplog.text
    notifier.stop()


@pytest.fixture
def target():
    server = WebhookSink()
    yield server
    server.close()


@pytest.mark.parametrize("scheme", ["http", "ftp"])
def test_a_redirect_is_a_failed_delivery_and_never_followed(sink, target, scheme):
    # Issue 20: the redirect was followed to any host and scheme and recorded as sent.
    sink.mode = "redirect"
    port = target.url.split(":")[2].split("/")[0]
    sink.location = f"{scheme}://127.0.0.1:{port}/elsewhere"
    ok, attempts, error = deliver_once(WebhookChannel(sink.url), NOTE, 5, attempts=1)
    assert not ok and error is not None and "redirect (HTTP 302)" in error
    assert len(sink.received()) == 1 and target.received() == []
    assert "s3cret" not in error and "t0k" not in error


def test_a_server_answering_a_byte_at_a_time_is_cut_at_the_attempts_deadline(sink):
    # Issue 20: the timeout was per socket operation, so a dripping answer held a 1 s attempt
    # for 8.8 s. Here the whole answer takes 0.3 s * 45 bytes = 13.5 s.
    sink.mode, sink.drip_every = "drip", 0.3
    started = time.monotonic()
    ok, _, error = deliver_once(WebhookChannel(sink.url), NOTE, 1.0, attempts=1)
    took = time.monotonic() - started
    sink.release()
    assert not ok and error is not None and "timed out after 1 s" in error
    assert took < 6.0, f"an attempt with a 1 s deadline took {took:.1f} s"


def test_a_dripping_answer_that_ends_in_time_is_delivered(sink):
    sink.mode, sink.drip_every = "drip", 0.001
    ok, _, error = deliver_once(WebhookChannel(sink.url), NOTE, 30, attempts=1)
    assert ok, error


def test_plain_http_to_another_host_is_warned_about_once_at_start(caplog):
    from opencode_autoretry.daemon.notifications.notifier import (
        cleartext_warning,
        start_notifier,
    )

    remote = load_notify({"webhook": "http://hooks.example.com/s3cret"})
    warning = cleartext_warning(remote)
    assert warning is not None and "http://hooks.example.com/…" in warning
    assert "s3cret" not in warning
    for safe in ("https://hooks.example.com/x", "http://127.0.0.1:8/x", "http://[::1]:8/x",
                 "http://localhost/x"):
        assert cleartext_warning(load_notify({"webhook": safe})) is None, safe
    notifier = start_notifier(remote, lambda result: None)
    assert notifier is not None
    notifier.stop()
    assert [r.getMessage() for r in caplog.records].count(warning) == 1


def test_the_notify_send_body_is_escaped_markup():
    # Issue 20: notify-send renders its body as markup, so a title's tags became live.
    title = '<a href="http://evil/">x</a> <img src="file:///etc/passwd"> & <b>'
    note = Notification(NotifyEvent.GAVE_UP, "ses_a", datetime(2026, 12, 1, tzinfo=UTC),
                        "why", title=title)
    argv = DesktopChannel("/usr/bin/notify-send").argv(note)
    body = argv[-1]
    assert "<" not in body and ">" not in body
    assert "&lt;a href=\"http://evil/\"&gt;x&lt;/a&gt;" in body and "&amp;" in body
    assert note.summary != body and title in note.summary  # the same text, escaped
