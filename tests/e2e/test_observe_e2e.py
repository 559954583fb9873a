"""Observe mode against the real OpenCode 1.18.33 (issue 23).

The soak's fault corpus (``soak_plan.MENU``: every fault a plain prompt can carry, less the
minute-long ones) runs side by side, one session per fault, in one OpenCode with one daemon
in observe mode and a fallback chain. For every fault the daemon records its decision, with
the kind the corpus expects and what it WOULD have done, and carries none of it out: the
provider sees no continuation (every request's newest user message is the fault's own
prompt) and no request for the fallback model, no session gets an abort (OpenCode stores no
``MessageAbortedError``, the looping sessions keep looping), no trim is recorded. ``status``,
``trace --json``, the ``diagnose`` summary and the toasts say observe mode.

The 401 runs on the chain's last model (``fake/fake-b``): no switch applies, the turn is left
alone (``skip``, as in act mode) and its ``terminal`` event reaches the test's own endpoint on
127.0.0.1 through Apprise (``[notify] urls = ["json://127.0.0.1:PORT/…"]``), once, with no
part of the URL in the daemon's log.

The gates come before observe mode, as before any action: a blank reply in a session switched
off (``/autoretry off here``) and a blank reply of a subagent (``task``) are left alone, with no
would-be action recorded for them.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from daemon_process import FAST_CONFIG, DaemonProcess, wait_until
from fake_faults import install as install_faults
from fake_loops import install as install_loops
from fake_provider import FakeProvider, ProviderRequest
from fake_soak import install as install_soak
from fake_unattended import install as install_unattended
from notify_sink import WebhookSink
from opencode import OpenCodeServer
from soak_plan import BY_NAME, MENU, Expect, Fault, How
from test_exec_e2e import run_exec

from opencode_autoretry.decisions.observed import OBSERVE_TITLE

pytestmark = [pytest.mark.e2e, pytest.mark.shared_opencode]

TURN = 60.0  # every session's decision, all side by side on a loaded 2-core machine
STALL_TIMEOUT_S = 8.0  # long enough that 14 cold turns at once do not look stalled
CHAIN = '[fallback]\n"fake/fake-model" = ["fake/fake-b"]\n'
SECRET = "s3cret-path"
#: Faults OpenCode 1.18.33 itself repeats without end (no finish reason): never stopped here.
LOOPING = {"noreason_loop", "reset"}
#: The model-bound failure on the chain's first model: a (would-be) switch.
SWITCHED = {"quota"}
#: Left alone (a 401 on the chain's last model): a skip, the same in both modes.
LEFT = {"unauthorized"}
LAST_MODEL = {"providerID": "fake", "modelID": "fake-b"}


def config(sink: WebhookSink) -> str:
    port = sink.url.split(":")[2].split("/")[0]
    notify = (f'[notify]\nurls = ["json://127.0.0.1:{port}/hook/{SECRET}"]\n'
              'events = ["terminal", "gave_up"]\n')
    return (f'mode = "observe"\nstall_timeout = {STALL_TIMEOUT_S}\n{FAST_CONFIG}\n{CHAIN}'
            f"{notify}")

CORPUS = [f for f in MENU if f.how is How.PROMPT and not f.slow and f.expect is not Expect.HEALTHY]
#: The negative cases: the gates leave these alone in observe mode as in act mode.
OFF_HERE, SUBAGENT = BY_NAME["off_here"], BY_NAME["subagent_blank"]


def tag(fault: Fault) -> str:
    return f"(observe {fault.name})"


def prompt(fault: Fault) -> str:
    return f"Observe {tag(fault)}: say hello [[s:{fault.marker}]]"


def requests_of(provider: FakeProvider, fault: Fault) -> list[ProviderRequest]:
    return [r for r in provider.requests() if tag(fault) in json.dumps(r.messages)]


def decisions(d: DaemonProcess, session: str) -> list[Any]:
    view = d.store()
    try:
        return view.decisions(session)
    finally:
        view.close()


def acted_on(d: DaemonProcess) -> tuple[list[Any], list[Any]]:
    """The store's continuations and trims: observe mode writes neither."""
    view = d.store()
    try:
        return view.injections(), view.trims()
    finally:
        view.close()


def would_be(d: DaemonProcess, session: str, fault: Fault) -> Any:
    """The session's first decision to act (its would-be action), once recorded; for a fault
    left alone, its first decision about the failure."""
    if fault.name in LEFT:
        return next((x for x in decisions(d, session) if x.kind == "terminal"), None)
    return next((x for x in decisions(d, session) if x.action != "skip"), None)


def aborted(server: OpenCodeServer) -> list[dict[str, Any]]:
    return [e for e in server.events.of_type("session.error")
            if (e["properties"].get("error") or {}).get("name") == "MessageAbortedError"]


def switched_off(server: OpenCodeServer, d: DaemonProcess, session: str) -> bool:
    """`/autoretry off here`, repeated until the daemon's store shows it."""
    view = d.store()
    try:
        if not view.is_enabled(session):
            return True
    finally:
        view.close()
    server.command(session, "autoretry", "off here")
    return False


def child_decisions(d: DaemonProcess, server: OpenCodeServer, root: str) -> list[Any]:
    children = server.ok("GET", f"/session/{root}/children")
    return [x for c in children for x in decisions(d, c["id"]) if x.kind == "blank"]


def check_decision(fault: Fault, decision: Any) -> None:
    assert decision.kind in fault.kinds, (fault.name, decision)
    assert decision.observed, (fault.name, decision)
    if fault.name in LEFT:
        assert (decision.action, decision.would) == ("skip", None), (fault.name, decision)
        return
    would = decision.would or ""
    if fault.name in SWITCHED:
        assert would.startswith("would switch fake/fake-model → fake/fake-b"), (fault.name, would)
    elif decision.action == "abort_then_inject":
        assert would.startswith("would stop and continue: "), (fault.name, would)
    else:
        assert (decision.action, would.split(":")[0].split(" in ")[0]) in (
            ("inject", "would continue"), ("inject_at", "would continue")), (fault.name, would)


def check_untouched(provider: FakeProvider, server: OpenCodeServer, fault: Fault,
                    session: str) -> None:
    """No continuation, no switch: every request of the session answers its own prompt."""
    requests = requests_of(provider, fault)
    assert requests, fault.name
    assert all(tag(fault) in r.last_user_text for r in requests), (
        fault.name, [r.last_user_text[:60] for r in requests])
    if fault.name not in LEFT:  # the left-alone 401 runs on fake-b from the start
        assert all("fake-b" not in (r.model or "") for r in requests), (
            fault.name, [r.model for r in requests])
    users = [m for m in server.messages(session) if m["info"]["role"] == "user"]
    assert len(users) == 1, (fault.name, [m["parts"] for m in users])


@pytest.fixture
def sink():
    server = WebhookSink()
    yield server
    server.close()


def test_every_fault_of_the_corpus_is_judged_and_nothing_is_done(provider, daemon,
                                                                   start_opencode, sink):
    for install in (install_faults, install_loops, install_soak, install_unattended):
        install(provider)
    server = start_opencode(warm=True)
    d = daemon(config=config(sink))
    d.wait_log("OBSERVE MODE", TURN)
    d.wait_log("connected: pid", TURN)
    sessions: dict[str, str] = {}
    off = server.create_session(title="observe off here")["id"]
    wait_until(lambda: switched_off(server, d, off), TURN, "/autoretry off here", every=0.5)
    server.prompt_async(off, prompt(OFF_HERE))
    root = server.create_session(title="observe subagent")["id"]
    server.prompt_async(root, prompt(SUBAGENT))
    for fault in CORPUS:
        session = server.create_session(title=f"observe {fault.name}")["id"]
        server.prompt_async(session, prompt(fault),
                            **({"model": LAST_MODEL} if fault.name in LEFT else {}))
        sessions[fault.name] = session

    found = {fault.name: wait_until(lambda f=fault: would_be(d, sessions[f.name], f), TURN,
                                    f"{fault.name}: its would-be decision")
             for fault in CORPUS}
    for fault in CORPUS:
        check_decision(fault, found[fault.name])
    # Not stopped: OpenCode goes on looping where an abort would have ended the loop.
    for fault in CORPUS:
        if fault.name in LOOPING:
            decided = found[fault.name].at.timestamp()
            wait_until(lambda f=fault, t=decided: len(
                [r for r in requests_of(provider, f) if r.at > t]) >= 3, TURN,
                f"{fault.name}: OpenCode still loops after the would-be abort")

    # The gates: the switched-off session and the subagent are left alone, nothing would be.
    left = wait_until(lambda: [x for x in decisions(d, off) if x.kind == "blank"], TURN,
                      "the blank reply of the switched-off session is judged")
    assert [(x.action, x.cause) for x in left] == [("skip", "off")], left
    wait_until(lambda: server.finished_ok(root), TURN, "the subagent's parent finishes")
    child = wait_until(lambda: child_decisions(d, server, root), TURN,
                       "the subagent's blank reply is judged")
    assert [(x.action, x.cause) for x in child] == [("skip", "child_session")], child
    assert [x for x in decisions(d, root) if x.action != "skip"] == []

    assert aborted(server) == [], "an abort reached OpenCode in observe mode"
    for fault in CORPUS:
        check_untouched(provider, server, fault, sessions[fault.name])
    assert acted_on(d) == ([], []), "observe mode wrote a continuation or a trim"
    toasts = server.events.of_type("tui.toast.show")
    assert toasts and {t["properties"].get("title") for t in toasts} == {OBSERVE_TITLE}
    assert any("would continue" in t["properties"]["message"] for t in toasts)

    for fault in CORPUS:  # the test's own aborts (a user's): the loops and the stall end
        if fault.name in LOOPING or fault.name == "stall":
            server.abort(sessions[fault.name])
    status = json.loads(d.cli("status", "--json").stdout)
    assert status["mode"] == "observe"
    assert "OBSERVE MODE" in d.cli("status").stdout
    trace = json.loads(d.cli("trace", "--json").stdout)
    observed = {o["session_id"]: o for o in reversed(trace["observed"])}
    assert {f.name for f in CORPUS if sessions[f.name] in observed} == {
        f.name for f in CORPUS if f.name not in LEFT}
    # This test's sessions (the worker's OpenCode DB holds earlier tests' continuations too).
    mine = set(sessions.values()) | {root}
    assert [c for c in trace["continuations"] if c["session_id"] in mine] == []
    assert trace["subagent_aborts"] == []  # from this test's own store
    assert all(o["would"].startswith("would ") for o in trace["observed"])
    summary = json.loads(d.cli("diagnose", "0", "--json").stdout)["summary"]
    assert summary["observed"]["count"] >= len(CORPUS) - len(LEFT)
    assert summary["continuations"]["sent"] == 0

    # Apprise: the left-alone 401's terminal event, delivered to the test's endpoint, once.
    [got] = sink.wait_for(1, TURN)
    assert got.path == f"/hook/{SECRET}"
    assert got.body["title"] == "autoretry stopped on an error it does not retry"
    assert "observe unauthorized" in got.body["message"] or sessions["unauthorized"] in (
        got.body["message"])
    d.wait_log("via apprise delivered", TURN)
    assert len(sink.received()) == 1
    assert not [line for line in d.lines() if SECRET in line], "a URL's secret was logged"


def test_exec_in_observe_mode_judges_the_run_and_re_runs_nothing(
        provider, opencode_bin, opencode_home, socket_path, tmp_path):
    """``autoretry exec`` under ``mode = "observe"``: the blank reply is judged on the
    daemon's decision path and recorded as a would-be continuation; no second ``opencode
    run``, so the provider gets one request; exec exits with the run's own status."""
    install_faults(provider)
    home = tmp_path / "autoretry"
    home.mkdir()
    (home / "config.toml").write_text(f'mode = "observe"\n{FAST_CONFIG}')
    result = run_exec(opencode_bin, opencode_home, home, socket_path,
                      "Observe exec: say hello [[s:blank]]")
    assert result.status == 0, result.stderr
    assert "would continue: blank reply (1/2) — nothing done" in result.stderr
    assert len(provider.requests()) == 1, [r.behaviour for r in provider.requests()]
    assert result.injections() == []
    [decision] = [x for x in result.decisions() if x.action != "skip"]
    assert (decision.kind, decision.action, decision.observed) == ("blank", "inject", True)
