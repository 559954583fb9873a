"""A continuation whose line dies in a cut socket is sent again, once, and only where it still
belongs (issue 11, ``Recovery.resend_lost``).

The bridge talks to the daemon through the soak's ``SocketProxy``. It swallows the daemon's
``prompt`` line whole and closes both ends: the daemon's write succeeded, the bridge never read
the line, as in a socket cut mid-write. The bridge reconnects; its hello lists the marked
continuations it ran, and this one is not among them.

- Positive: the continuation goes out again on the new connection and arrives exactly once.
- Negatives: the proxy refuses the bridge's reconnects while the user switches autoretry off
  for the session, or writes a new message; once the bridge is back, the lost continuation is
  cancelled, never sent. (A child session or a user's abort cannot reach this path: a
  continuation is only ever marked sent for a root session the gate passed, and a user's abort
  of the turn cancels it before the send. Their own negatives are in test_daemon_e2e.)
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from daemon_process import wait_until
from soak_chaos import SocketProxy
from test_daemon_e2e import TURN, confirmed, connect, finished_ok, injected, injections

pytestmark = pytest.mark.e2e

PROMPT_LINE = b'"type":"prompt"'
LOST = "not run: its line was lost on the way to the bridge"


@pytest.fixture
def proxied(daemon, start_opencode, socket_path):
    d = daemon()
    directory = Path(tempfile.mkdtemp(prefix="ar-lost-", dir="/tmp"))  # short: sun_path
    proxy = SocketProxy(directory / "proxy.sock", socket_path).start()
    server = connect(start_opencode, d, socket=proxy.listen)
    yield d, server, proxy
    proxy.close()


def lose_the_continuation(d, server, proxy, provider) -> str:
    """A blank reply, judged and continued at once; its prompt line is swallowed."""
    session = server.create_session()["id"]
    provider.script(["blank"])
    proxy.swallow(PROMPT_LINE)
    server.prompt_async(session, "Say hello")
    assert proxy.wait_swallowed(1, TURN), "the continuation's prompt line was never written"
    server.wait_idle(session, TURN)
    return session


def back_and_closed(d, proxy, session: str):
    """Lets the bridge back in; returns the lost continuation once the re-send path has
    turned it into an intent again and closed it without a send."""
    mark = len(d.lines())
    proxy.admit()
    d.wait_log("connected: pid", TURN, after=mark)
    d.wait_log(LOST, TURN, after=mark)  # the re-send path ran, and stopped short of sending
    [gone] = wait_until(
        lambda: [i for i in injections(d, session) if i.state in ("cancelled", "failed")],
        TURN, "the lost continuation closed",
    )
    return gone


def test_a_continuation_lost_in_a_cut_socket_is_sent_again_once(provider, proxied):
    d, server, proxy = proxied
    mark = len(d.lines())
    session = lose_the_continuation(d, server, proxy, provider)
    d.wait_log(LOST, TURN, after=mark)
    [done] = confirmed(d, session)
    wait_until(lambda: finished_ok(server, session), TURN, "the continued turn completes")
    assert len(injected(server, session)) == 1
    assert len(provider.requests()) == 2  # the blank, then the one continuation
    assert [i.state for i in injections(d, session)] == ["confirmed"]


def test_a_lost_continuation_is_not_sent_once_autoretry_is_off(provider, proxied):
    d, server, proxy = proxied
    proxy.refuse()  # the bridge stays away until the switch is in the store
    session = lose_the_continuation(d, server, proxy, provider)
    d.cli("off", "--session", session)
    gone = back_and_closed(d, proxy, session)
    assert gone.state == "cancelled" and "switched off" in (gone.error or ""), gone
    assert injected(server, session) == [] and len(provider.requests()) == 1


def test_a_lost_continuation_is_not_sent_after_a_new_user_message(provider, proxied):
    d, server, proxy = proxied
    proxy.refuse()
    session = lose_the_continuation(d, server, proxy, provider)
    server.prompt_async(session, "Never mind, say goodbye")  # healthy: the default reply
    provider.wait_for_requests(2, TURN)
    server.wait_idle(session, TURN)
    gone = back_and_closed(d, proxy, session)
    assert gone.state == "cancelled" and "new user turn" in (gone.error or ""), gone
    assert injected(server, session) == [] and len(provider.requests()) == 2
