"""Hung subagents (issue 9) against the real OpenCode 1.18.33 and the real daemon.

A root delegates with the ``task`` tool (``fake_faults.task``); its child session gets the
fault. ``stall_timeout`` is 3 s (the daemon's config), the daemon ticks every 0.2 s.

- a child that streams nothing is aborted once, never prompted, and the parent carries on;
- a child waiting on a permission is left alone, judged by the daemon's own "left alone"
  lines over two stall periods (not by a sleep);
- ``[stall] subagents = false``: the hung child is recorded as left alone and not aborted.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Any

import pytest
from daemon_process import FAST_CONFIG, DaemonProcess, wait_until
from fake_faults import install as install_faults
from fake_subagents import install as install_subagent_faults
from test_daemon_e2e import finished_ok, warmed_up

pytestmark = [pytest.mark.e2e, pytest.mark.shared_opencode]

TURN = 30.0
STALL_CONFIG = "stall_timeout = 3.0\n" + FAST_CONFIG  # as the root stall scenario
TIMINGS: dict[str, float] = {}


def records(d: DaemonProcess, session: str) -> tuple[list[Any], list[Any]]:
    view = d.store()
    try:
        return view.decisions(session), view.injections(session)
    finally:
        view.close()


def user_messages(server, session: str) -> list[dict[str, Any]]:
    return [m for m in server.messages(session) if m["info"]["role"] == "user"]


def delegate(server, provider, fault: str) -> tuple[str, str]:
    """A root whose task child gets ``fault``; returns (root, child) once the child exists."""
    assert provider.requests() == [], "the warm-up left requests behind"
    install_subagent_faults(install_faults(provider))
    root = server.create_session()["id"]
    server.prompt_async(root, f"Delegate [[s:task:{fault}]]")
    child = server.events.wait_for(
        lambda e: e.get("type") == "session.created"
        and e["properties"]["info"].get("parentID") == root, TURN, "the subagent session",
    )["properties"]["info"]["id"]
    return root, child


def report(d: DaemonProcess, *args: str) -> str:
    env = {
        **os.environ,
        "AUTORETRY_HOME": str(d.home),
        "OPENCODE_DB": str(d.opencode_db),
        "AUTORETRY_CONFIG": str(d.config),
    }
    done = subprocess.run([sys.executable, "-m", "opencode_autoretry.cli", *args], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_a_hung_subagent_is_aborted_and_its_parent_carries_on(provider, daemon, start_opencode):
    began = time.monotonic()
    server, d = warmed_up(start_opencode, daemon, STALL_CONFIG)
    root, child = delegate(server, provider, "stall")  # the child: headers, then silence

    [task_call, stalled] = provider.wait_for_requests(2, TURN)[:2]
    [abort] = wait_until(
        lambda: [x for x in records(d, child)[0] if x.action == "abort"], TURN,
        "the hung child is aborted",
    )
    wait_until(lambda: finished_ok(server, root), TURN, "the parent ends healthy")
    # The parent's step after its task tool returned: the first request after the child's
    # that is not the child's stalled stream (under load OpenCode may retry that one itself
    # before the daemon's abort lands: picking requests()[2] then took the retry).
    resumed = next(r for r in provider.requests()[2:] if r.behaviour != "stall")
    assert resumed.at >= abort.at.timestamp()
    TIMINGS["abort_to_parent_resumed_s"] = resumed.at - abort.at.timestamp()
    TIMINGS["stall_to_abort_s"] = abort.at.timestamp() - stalled.at

    assert abort.kind == "subagent_stall" and "hung" in abort.reason
    assert len(user_messages(server, child)) == 1  # the task prompt: nothing was ever added
    assert records(d, child)[1] == [] and records(d, root) == ([], [])
    server.events.wait_for(
        lambda e: e.get("type") == "tui.toast.show"
        and "a subagent hung" in e["properties"].get("message", ""), TURN,
        "the parent's toast that a subagent hung",
    )
    [task] = [p for m in server.messages(root) for p in m["parts"] if p.get("tool") == "task"]
    assert task["state"]["status"] in ("completed", "error")
    assert "Subagent aborted: hung" in report(d, "trace", root)
    assert "ABORT subagent_stall" in report(d, "timeline", root)
    assert "ABORT subagent_stall" in report(d, "timeline", child)
    TIMINGS["scenario_a_s"] = time.monotonic() - began
    TIMINGS["task_tool_" + task["state"]["status"]] = 1.0
    print(f"\nsubagent e2e timings: {TIMINGS}")


def left_alone_lines(d: DaemonProcess, child: str, count: int, after: int) -> None:
    """Wait for the daemon's ``count``-th "left alone" judgement of ``child`` (one per stall
    period): proof that it looked past ``stall_timeout`` and decided nothing."""
    needle = f"subagent {child} busy"
    wait_until(
        lambda: sum(needle in line and "left alone" in line for line in d.lines()[after:])
        >= count, TURN, f"{count} 'left alone' judgements of {child}",
    )


def test_a_subagent_waiting_on_a_permission_is_left_alone(provider, daemon, start_opencode):
    began = time.monotonic()
    server, d = warmed_up(start_opencode, daemon, STALL_CONFIG)
    mark = len(d.lines())
    root, child = delegate(server, provider, "read_outside")  # the child's read asks first
    asked = server.events.wait_for(lambda e: e.get("type") == "permission.asked", TURN,
                                   "the child's permission request")["properties"]
    assert asked["sessionID"] == child
    left_alone_lines(d, child, 2, mark)  # two stall periods past the timeout

    assert records(d, child) == ([], []) and records(d, root) == ([], [])
    # Nothing prompted: one user message each. OpenCode itself may repeat the child's request
    # on a loaded machine (a third request, read_outside again, in a three-worker run): every
    # request is still the fault's own, and none carries anything but the two user texts.
    assert len(user_messages(server, child)) == 1 and len(user_messages(server, root)) == 1
    asked_for = [(r.behaviour, r.last_user_text[:60]) for r in provider.requests()]
    assert {b for b, _ in asked_for} == {"task:read_outside", "read_outside"}, asked_for
    assert len({t for _, t in asked_for}) <= 2, asked_for
    assert not any(e.get("type") == "session.error" for e in server.events.all())
    server.ok("POST", f"/permission/{asked['id']}/reply", {"reply": "once"})
    wait_until(lambda: finished_ok(server, root), TURN, "the parent ends after the answer")
    assert records(d, child) == ([], []) and records(d, root) == ([], [])
    TIMINGS["scenario_b_s"] = time.monotonic() - began
    print(f"\nsubagent e2e timings: {TIMINGS}")


def test_subagents_off_leaves_a_hung_child_alone(provider, daemon, start_opencode):
    began = time.monotonic()
    server, d = warmed_up(start_opencode, daemon,
                          STALL_CONFIG + "\n[stall]\nsubagents = false\n")
    root, child = delegate(server, provider, "stall")
    provider.wait_for_requests(2, TURN)

    [skip] = wait_until(lambda: records(d, child)[0], TURN, "the hung child is judged")
    assert skip.action == "skip" and "[stall] subagents = false" in skip.reason
    status = server.ok("GET", "/session/status")
    assert status.get(child, {}).get("type") == "busy", status  # still hung: not aborted
    assert not any(e.get("type") == "session.error" for e in server.events.all())
    assert len(user_messages(server, child)) == 1 and records(d, root) == ([], [])
    server.abort(child)  # the user stops it; the parent carries on by itself
    wait_until(lambda: finished_ok(server, root), TURN, "the parent ends")
    assert [x.action for x in records(d, child)[0]].count("abort") == 0
    assert records(d, root)[1] == []
    TIMINGS["scenario_c_s"] = time.monotonic() - began
    print(f"\nsubagent e2e timings: {TIMINGS}")
