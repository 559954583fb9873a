"""The HTML timeline (issue 12) of a session the real OpenCode 1.18.33 ran and the real daemon
recovered, checked in a real browser (headless Chromium from Debian's packages).

A rate limit that OpenCode retries by itself (6 requests, Retry-After 0.1 s) ends the step
with a retryable error; the daemon waits its 1 s backoff and continues; the reply answers. The
page must show that story: the fault, OpenCode's own retries, the wait, the decision, the
continuation and its outcome, with no console error.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from browser import check_page, find_chromium
from daemon_process import DaemonProcess, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.shared_opencode]

TURN = 30.0


def _report_env(d: DaemonProcess) -> dict[str, str]:
    return {
        **os.environ,
        "AUTORETRY_HOME": str(d.home),
        "OPENCODE_DB": str(d.opencode_db),
        "AUTORETRY_CONFIG": str(d.config),
        "NO_COLOR": "1",
    }


def _finished_ok(server, session: str) -> bool:
    last = server.messages(session)[-1]["info"]
    return last["role"] == "assistant" and last.get("finish") == "stop" and not last.get("error")


def _confirmed(d: DaemonProcess, session: str) -> bool:
    view = d.store()
    try:
        return any(i.state == "confirmed" for i in view.injections(session))
    finally:
        view.close()


@pytest.mark.skipif(
    find_chromium() is None,
    reason="chromium is not installed and could not be (apt-get install chromium)",
)
@pytest.mark.opencode("gives_up")
def test_recovered_session_timeline_renders_in_chromium(
    provider, daemon, start_opencode, tmp_path: Path
) -> None:
    d = daemon()
    mark = len(d.lines())
    server = start_opencode()
    server.ok("GET", "/path")  # boots the instance, which loads the bridge
    d.wait_log("connected: pid", TURN, after=d.started_line if server.shared else mark)
    provider.script(["http429:0.1"] * 6)
    session = server.create_session()["id"]
    server.prompt_async(session, "Say hello")
    wait_until(lambda: _confirmed(d, session), TURN, "the continuation is confirmed")
    wait_until(lambda: _finished_ok(server, session), TURN, "the turn completes")

    page = tmp_path / "timeline.html"
    written = subprocess.run(
        [sys.executable, "-m", "opencode_autoretry.cli", "timeline", session, "--html", str(page)],
        env=_report_env(d),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert written.returncode == 0, written.stdout + written.stderr
    found = check_page(page)
    assert found.done, found
    assert found.console == (), found.console
    assert found.marks == found.drawn == found.tips == found.rows > 0, found
    expected = {"user-real", "fault", "oc-retry", "wait", "inject", "user-injected", "ok"}
    assert expected | {"recovered"} <= found.kinds, found.kinds
    assert "continuation #1: recovered" in page.read_text(encoding="utf-8")
