"""``[notify] urls`` through Apprise (issue 23): checked at load (a bad URL is one line, exit 2,
without its secret), imported only when a URL is configured, delivered by its own worker to
a loopback endpoint the test owns (Apprise's ``json://127.0.0.1:PORT/…``), once per event,
and ``autoretry notify test`` works with it. The other channels are unchanged."""

from __future__ import annotations

import json
import logging
import queue
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from click.testing import CliRunner
from daemon_fakes import Harness
from notify_sink import WebhookSink
from opencode_rows import api_error

from opencode_autoretry.cli.main import main
from opencode_autoretry.daemon.loop import Loop
from opencode_autoretry.daemon.notifications.notifier import (
    AppriseChannel,
    DeliveryResult,
    build_channels,
    deliver_once,
    start_notifier,
)
from opencode_autoretry.notifications.apprise_urls import shown
from opencode_autoretry.notifications.config import NotifyConfigError, load_notify, scrub
from opencode_autoretry.notifications.events import Notification, NotifyEvent
from opencode_autoretry.opencode.db import OpenCodeDB

NOTE = Notification(NotifyEvent.GAVE_UP, "ses_a", datetime(2026, 12, 1, tzinfo=UTC), "why",
                    title="T", directory="/p", turn_id="msg_u", kind="blank", attempts=2, budget=2)
SECRET = "s3cret-path"


@pytest.fixture
def sink():
    server = WebhookSink()
    yield server
    server.close()


def json_url(sink: WebhookSink) -> str:
    """Apprise's JSON notifier, POSTing to the test's own endpoint on 127.0.0.1."""
    port = sink.url.split(":")[2].split("/")[0]
    return f"json://127.0.0.1:{port}/hook/{SECRET}"


# -- the config -------------------------------------------------------------------------------


def test_urls_make_one_apprise_channel_next_to_the_others(sink):
    config = load_notify({"urls": [json_url(sink), "tgram://123456789:AAbbCCddEEff/4242"],
                          "webhook": sink.url})
    assert config.channels == ("webhook", "apprise")
    assert [c.name for c in build_channels(config)] == ["webhook", "apprise"]
    assert load_notify({}).channels == () and load_notify({"urls": []}).channels == ()


@pytest.mark.parametrize("urls, message", [
    ("tgram://x/y", "notify.urls must be a list of Apprise URLs"),
    ([42], "notify.urls[0] must be an Apprise URL (scheme://…), got int"),
    (["no scheme at all"], "notify.urls[0] must be an Apprise URL (scheme://…), got ?://…"),
    (["nosuch://tok3n-value/x"], "notify.urls[0]: nosuch://… is not a URL Apprise supports"),
    (["json://127.0.0.1:1/ok", "tgram://"], "notify.urls[1]: tgram://… is not a URL Apprise"),
])
def test_a_bad_url_names_its_index_and_never_its_secret(urls, message):
    with pytest.raises(NotifyConfigError) as error:
        load_notify({"urls": urls})
    assert message in str(error.value)
    assert "tok3n" not in str(error.value)


def test_the_cli_refuses_a_bad_url_with_one_line_and_exit_2(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text('[notify]\nurls = ["tgram://bad-token-9f8e"]\n')
    result = CliRunner().invoke(main, ["--config", str(config), "notify", "test"])
    assert result.exit_code == 2
    assert "notify.urls[0]: tgram://… is not a URL Apprise supports" in result.output
    assert "9f8e" not in result.output and len(result.output.strip().splitlines()) == 1


def test_the_secrets_of_a_url_are_scrubbed():
    url = "tgram://123456789:AAbbCCddEEff/4242"
    config = load_notify({"urls": [url]})
    text = f"failed posting to {url} (bot 123456789:AAbbCCddEEff, chat 4242)"
    cleaned = scrub(text, config.secrets())
    assert "AAbbCCddEEff" not in cleaned and "123456789" not in cleaned
    assert shown(url) == "tgram://…"


# -- imported only when a URL is configured -----------------------------------------------------

PROBE = """
import json, sys
from opencode_autoretry.config.load import parse_config
from opencode_autoretry.config.settings import Settings
from opencode_autoretry.daemon.notifications.notifier import start_notifier
config = parse_config(Settings(notify=json.loads(sys.argv[1])))
notifier = start_notifier(config.notify, lambda result: None)
print(json.dumps({"apprise": "apprise" in sys.modules, "channels": notifier.channel_names}))
notifier.stop()
"""


@pytest.mark.parametrize("with_urls", [False, True])
def test_apprise_is_imported_only_when_a_url_is_configured(with_urls):
    notify = {"webhook": "http://127.0.0.1:9/h", **(
        {"urls": ["json://127.0.0.1:9/h"]} if with_urls else {})}
    done = subprocess.run([sys.executable, "-c", PROBE, json.dumps(notify)],
                          capture_output=True, text=True, timeout=60, check=True)
    found = json.loads(done.stdout)
    assert found["apprise"] is with_urls
    assert found["channels"] == (["webhook", "apprise"] if with_urls else ["webhook"])


# -- delivery -----------------------------------------------------------------------------------


def test_apprise_delivers_to_a_loopback_endpoint(sink):
    ok, attempts, error = deliver_once(AppriseChannel([json_url(sink)]), NOTE, 5)
    assert (ok, attempts, error) == (True, 1, None)
    [got] = sink.received()
    assert got.path == f"/hook/{SECRET}"
    assert got.body["title"] == "autoretry gave up"
    assert got.body["message"].startswith("autoretry gave up after 2/2 in 'T': why")


def test_a_failing_url_is_retried_once_and_named_by_its_scheme_only(sink, caplog):
    sink.mode = "fail"
    caplog.set_level(logging.DEBUG)
    ok, attempts, error = deliver_once(AppriseChannel([json_url(sink)]), NOTE, 5)
    assert not ok and attempts == 2 and len(sink.received()) == 2
    assert error == "apprise: json://… failed (1 of 1 URLs)"
    assert SECRET not in caplog.text, "a URL's secret reached the log"


def test_the_notify_test_command_delivers_through_apprise(sink, tmp_path):
    config = tmp_path / "config.toml"
    config.write_text(f'[notify]\nurls = ["{json_url(sink)}"]\n')
    result = CliRunner().invoke(main, ["--config", str(config), "notify", "test"])
    assert result.exit_code == 0 and result.output == "apprise: ok\n"
    [got] = sink.received()
    assert got.body["title"] == "autoretry test notification"
    sink.mode = "fail"
    result = CliRunner().invoke(main, ["--config", str(config), "notify", "test"])
    assert result.exit_code == 1
    assert "apprise: FAILED — apprise: json://… failed" in result.output
    assert SECRET not in result.output


def test_the_daemon_sends_one_terminal_event_through_apprise_off_the_loop(sink, tmp_path):
    """The loop's path, with the real notifier: the event is queued (the loop never waits on
    the network), delivered once by the worker, and recorded as sent; the duplicated idles
    of the same failure add nothing."""
    url = json_url(sink)
    h = Harness(tmp_path, notify={"urls": [url]})
    results: queue.Queue[DeliveryResult] = queue.Queue()
    notifier = start_notifier(h.config.notify, results.put)
    assert notifier is not None and notifier.channel_names == ("apprise",)
    h.loop = Loop(h.config, h.store, h.bridge, lambda: OpenCodeDB.open(h.settings.opencode_db),
                  h.timers, h.clock, rand=lambda: 0.0, pid=999, notifier=notifier)
    h.loop.recovery.rebuild(h.clock.now())
    h.hello()
    unauthorized = api_error("Invalid API key (fake)", status=401, retryable=False)
    sid, _, _ = h.failed_turn(unauthorized)
    h.error_then_idle(sid, unauthorized)
    h.idle(sid)
    result = results.get(timeout=30)
    h.loop.handle(result)
    notifier.stop()
    assert result.ok and result.channel == "apprise"
    [got] = sink.received()
    assert got.body["title"] == "autoretry stopped on an error it does not retry"
    [row] = [n for n in h.store._rows("SELECT * FROM notifications")]
    assert (row["channel"], row["state"], row["event"]) == ("apprise", "sent", "terminal")
    assert SECRET not in json.dumps(dict(row))


def test_a_missing_apprise_is_a_config_error_saying_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "apprise", None)  # import apprise -> ImportError
    with pytest.raises(NotifyConfigError) as error:
        load_notify({"urls": ["json://127.0.0.1:1/x"]})
    assert "pip install 'opencode-autoretry[apprise]'" in str(error.value)
    assert load_notify({"webhook": "http://127.0.0.1:1/x"}).channels == ("webhook",)


def test_install_sh_installs_the_apprise_extra():
    script = (Path(__file__).resolve().parent.parent / "install.sh").read_text()
    assert 'install --quiet "${wheel}[apprise]"' in script
