"""Model fallback against the real OpenCode 1.18.33 (issue 10): a hard quota on the first model
is continued on the second (the provider's log shows the model), a chain used up gives up and
says so, and a child session or a switched-off session is never moved to another model.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from daemon_process import FAST_CONFIG, wait_until
from fake_unattended import install as install_unattended
from notify_sink import WebhookSink
from test_daemon_e2e import TURN, confirmed, connect, decisions, finished_ok, injected, toast

pytestmark = [pytest.mark.e2e, pytest.mark.shared_opencode]

OBSERVED: dict[str, str] = {}
CHAIN = '[fallback]\n"fake/fake-model" = ["fake/fake-b"]\n'


@pytest.fixture(scope="module", autouse=True)
def report_observed():
    """Printed at the end of the module (visible with ``-s``)."""
    yield
    if OBSERVED:
        print(f"\nfallback observed: {OBSERVED}")


@pytest.fixture
def sink():
    server = WebhookSink()
    yield server
    server.close()


def config(sink: WebhookSink | None = None) -> str:
    notify = f"[notify]\nwebhook = {json.dumps(sink.url)}\n" if sink else ""
    return FAST_CONFIG + "\n" + CHAIN + notify


def models(provider) -> list[str]:
    return [r.model for r in provider.requests()]


def trace(d, session: str) -> str:
    env = {**os.environ, "AUTORETRY_HOME": str(d.home), "OPENCODE_DB": str(d.opencode_db),
           "AUTORETRY_CONFIG": str(d.config)}
    done = subprocess.run([sys.executable, "-m", "opencode_autoretry.cli", "trace", session],
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.opencode("quota_is_final")
def test_a_hard_quota_continues_on_the_next_model(provider, daemon, start_opencode):
    d = daemon(config=config())
    server = connect(start_opencode, d)
    install_unattended(provider)
    session = server.create_session()["id"]
    server.prompt_async(session, "Say hello [[s:quota429]]")

    confirmed(d, session)
    wait_until(lambda: finished_ok(server, session), TURN, "the turn ends healthy on fake-b")
    failed = [r for r in provider.requests() if r.behaviour == "quota429"]
    last = provider.requests()[-1]
    assert failed and {r.model for r in failed} == {"fake-model"}
    assert last.model == "fake-b" and last.last_user_text.startswith("Continue.")
    assert len(injected(server, session)) == 1
    [switch] = [x for x in decisions(d, session) if x.action == "inject"]
    assert "usage limit on fake/fake-model: switched fake/fake-model → fake/fake-b" in switch.reason
    toast(server, "switched fake/fake-model → fake/fake-b")
    assert "switched fake/fake-model → fake/fake-b" in trace(d, session)

    # The next real message is the user's own: the model it names, not the fallback.
    before = len(provider.requests())
    server.prompt_async(session, "And again", model={"providerID": "fake",
                                                     "modelID": "fake-model"})
    assert provider.wait_for_requests(before + 1, TURN)[before].model == "fake-model"
    # A message that names no model does not inherit the fallback either (OpenCode 1.18.33
    # takes its configured default, not the model of the session's last message).
    wait_until(lambda: finished_ok(server, session), TURN, "the user's turn ends")
    before = len(provider.requests())
    server.prompt_async(session, "Once more, no model named")
    unnamed = provider.wait_for_requests(before + 1, TURN)[before].model
    OBSERVED["model of a prompt without a model"] = unnamed
    assert unnamed == "fake-model"


@pytest.mark.opencode("quota_is_final")
def test_a_chain_used_up_gives_up_once(provider, daemon, start_opencode, sink):
    d = daemon(config=config(sink))
    server = connect(start_opencode, d)
    install_unattended(provider)
    provider.script(["quota429"] * 40)  # every model is out of quota
    session = server.create_session(title="Out of quota")["id"]
    server.prompt_async(session, "Say hello")

    [post] = sink.wait_for(1, 2 * TURN)
    assert post.body["event"] == "gave_up" and post.body["session_id"] == session
    assert "fallback chain used up (fake/fake-model → fake/fake-b)" in post.body["reason"]
    wait_until(lambda: [x.action for x in decisions(d, session)][-1:] == ["notify"], TURN,
               "the give-up is recorded")
    assert sorted(set(models(provider))) == ["fake-b", "fake-model"]
    assert [x.action for x in decisions(d, session)].count("inject") == 1
    assert len(injected(server, session)) == 1


@pytest.mark.opencode("quota_is_final")
def test_a_child_or_a_switched_off_session_keeps_its_model(provider, daemon, start_opencode):
    d = daemon(config=config())
    server = connect(start_opencode, d)
    install_unattended(provider)
    root = server.create_session()["id"]
    child = server.create_session(parent_id=root)["id"]
    server.prompt_async(child, "Subtask [[s:quota429]]")
    wait_until(lambda: any("child session" in x.reason for x in decisions(d, child)), TURN,
               "the child's quota error is judged")

    off = server.create_session()["id"]
    status, _ = server.command(off, "autoretry", "off here")
    assert status == 500  # the bridge stops the model call (reference §6.5)
    server.prompt_async(off, "Say hello [[s:quota429]]")
    wait_until(lambda: any("autoretry is off" in x.reason for x in decisions(d, off)), TURN,
               "the switched-off session's quota error is judged")
    assert "fake-b" not in models(provider)
    assert injected(server, child) == [] and injected(server, off) == []
