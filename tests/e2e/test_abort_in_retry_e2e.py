"""A stop pressed while OpenCode waits out its own retry back-off is the user's: never continued.

OpenCode records such a step with no finish and no error (the reference's "silent" row), the
same row a lost stream can leave, so only the live status tells them apart: the session went
idle straight from ``retry`` and autoretry had asked for no abort.
"""

from __future__ import annotations

import pytest
from daemon_process import wait_until
from test_daemon_e2e import TURN, connect, decisions, injections

pytestmark = [pytest.mark.e2e, pytest.mark.shared_opencode]


def test_a_user_abort_during_opencodes_retry_back_off_is_not_continued(
    provider, daemon, start_opencode
):
    d = daemon()
    server = connect(start_opencode, d)
    provider.script(["http500"] * 8)  # OpenCode retries a 500 itself, 2 s then 4 s apart
    session = server.create_session()["id"]
    server.prompt_async(session, "Build it")
    server.events.wait_for(
        lambda e: e.get("type") == "session.status"
        and e["properties"].get("sessionID") == session
        and e["properties"].get("status", {}).get("type") == "retry",
        TURN,
        "OpenCode's own retry back-off",
    )
    requests = len(provider.requests())
    server.abort(session)
    server.wait_idle(session, TURN)
    wait_until(lambda: decisions(d, session), TURN, "the stopped back-off is judged")
    [decision] = decisions(d, session)
    assert decision.reason == "skip: user aborted this turn", decision
    assert injections(d, session) == []
    assert len(provider.requests()) == requests  # nothing asked of the model after the stop
