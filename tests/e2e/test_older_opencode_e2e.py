"""The key scenarios on the oldest supported OpenCode (``versions.OLDEST_SUPPORTED``), every run.

The rest of the suite runs on the pinned latest; this module overrides ``opencode_bin`` /
``opencode_home`` / ``opencode_version`` for its own tests, so they start the older binary
(npm-installed on first use like the pinned one, see ``opencode.installed_binary``) in a home
of its own (an older OpenCode must not open a newer one's DB). The scenarios are the existing
ones, called with the same fixtures: a gateway disconnect is continued (a blank reply: the
soak below, whose lanes 0 and 1 draw one as their second turn with seed 11),
``/autoretry off|on`` is obeyed, a child session is never prompted; plus what this version
does by itself where it differs from 1.18 (``versions.py``), and the soak's short variant
(issue 11) with the faults whose outcome is the same on this version.
"""

from __future__ import annotations

import functools
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from daemon_process import wait_until
from fake_provider import FakeProvider
from opencode import OpenCodeHome, SharedServer, ensure_opencode, warm_home
from soak_driver import Soak, SoakOptions
from test_daemon_e2e import (
    connect,
    continued_after,
    decisions,
    injected,
    injections,
)
from test_daemon_e2e import test_s11_off_leaves_faults_alone_and_on_recovers as _s11
from test_soak_e2e import log_of
from versions import OLDEST_SUPPORTED, behaviour

pytestmark = [pytest.mark.e2e, pytest.mark.shared_opencode]

TURN = 30.0


@pytest.fixture(scope="module")
def opencode_bin() -> Path:
    return ensure_opencode(OLDEST_SUPPORTED)


@pytest.fixture(scope="module")
def opencode_version() -> str:
    return OLDEST_SUPPORTED


@pytest.fixture(scope="module")
def opencode_home(
    opencode_bin: Path, fake_provider: FakeProvider, tmp_path_factory: pytest.TempPathFactory
) -> OpenCodeHome:
    return warm_home(opencode_bin, tmp_path_factory.mktemp("opencode-older"), fake_provider.url)


@pytest.fixture(scope="module")
def worker_socket() -> Iterator[Path]:
    """This module's own: the 1.18 OpenCode the worker shares keeps its bridge on the
    session's, and must not meet this module's daemons."""
    directory = Path(tempfile.mkdtemp(prefix="ar-e2e-", dir="/tmp"))
    yield directory / "daemon.sock"
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(scope="module")
def shared_server(opencode_bin: Path, opencode_home: OpenCodeHome, worker_socket: Path,
                  fake_provider: FakeProvider) -> Iterator[SharedServer]:
    """One warm 1.17.11 OpenCode for this module's scenarios (the soak starts its own)."""
    shared = SharedServer.launch(opencode_bin, opencode_home, worker_socket, fake_provider.reset)
    yield shared
    shared.server.stop()


@pytest.fixture
def start_opencode(start_opencode):
    """Every OpenCode this module starts has run one plain turn (``warm=True``). A fresh
    1.17.11 process's first turn waits for its provider SDK to load (5 s before the request
    leaves on an idle machine, far longer beside a second worker and a CPU hog, where a
    scenario's 30 s bound ran out once): warmed, a scenario's bounds time only its own steps.
    The daemon, already running, sees a healthy turn in a session of its own and decides
    nothing (its stall timeout here is the default 180 s)."""
    return functools.partial(start_opencode, warm=True)


def test_a_gateway_disconnect_is_continued(provider, daemon, start_opencode) -> None:
    # scenario 3's path with the fast budgets (1 s): scenario 1's default 5 s back-off would
    # cost this module's time budget, and the back-off is autoretry's, not OpenCode's
    continued_after("http400_disconnect", "disconnect", 1.0, provider, daemon, start_opencode)


def test_off_leaves_a_fault_alone_and_on_recovers(provider, daemon, start_opencode) -> None:
    _s11(provider, daemon, start_opencode)


def test_a_child_session_is_never_prompted(provider, daemon, start_opencode) -> None:
    d = daemon()
    server = connect(start_opencode, d)
    root = server.create_session()["id"]
    child = server.create_session(parent_id=root)["id"]
    provider.script(["http400_disconnect"])  # final on every version: OpenCode does not retry
    server.prompt_async(child, "Subtask")
    wait_until(
        lambda: any("child session" in x.reason for x in decisions(d, child)),
        TURN,
        "the child's failure is recorded as never injected",
    )
    server.wait_idle(child, TURN)
    assert injected(server, child) == [] and injections(d, child) == []
    assert len(provider.requests()) == 1  # nothing was sent after the failure


@pytest.mark.skipif(
    behaviour(OLDEST_SUPPORTED).own_attempts is not None,
    reason="this version gives up by itself: test_daemon_e2e covers it",
)
def test_a_lasting_rate_limit_is_left_to_opencodes_own_retries(
    provider, daemon, start_opencode
) -> None:
    # 1.17 retries a 429 without end (1.18: 6 requests, then the turn fails and autoretry
    # continues it): while OpenCode retries, autoretry must decide nothing. (Not asserted here:
    # a user's abort in such a back-off leaves no finish and no error, which autoretry reads
    # as an interruption and continues, on 1.18 too: see docs/versions.md.)
    d = daemon()
    server = connect(start_opencode, d)
    session = server.create_session()["id"]
    server.prompt_async(session, "Say hello [[s:http429:0.1]]")
    provider.wait_for_requests(7, TURN)  # beyond 1.18's six attempts
    assert all(e.get("type") != "session.error" for e in server.events.all())
    assert decisions(d, session) == [] and injections(d, session) == []


#: The soak's faults whose outcome 1.17 changes (versions.py): it retries a 429, a quota 429
#: and a 5xx without end, a stream without a finish reason (also a reset one) is one step
#: there, not a loop, and its permission asks were not seen in the suite's shared home.
NOT_ON_1_17 = frozenset({"rate_limit", "quota", "server_503", "subagent_rate_limit",
                         "noreason_loop", "reset", "permission_wait"})


@pytest.mark.long
@pytest.mark.skipif(os.environ.get("AUTORETRY_SOAK") == "0",
                    reason="the soaks are left out with AUTORETRY_SOAK=0")
def test_short_soak_has_no_violation(opencode_bin, opencode_home, provider, tmp_path) -> None:
    options = SoakOptions(seed=11, seconds=20.0, lanes=8, short=True, daemon_kills=1,
                          opencode_restarts=1, socket_cuts=1, leave_out=NOT_ON_1_17)
    soak = Soak(opencode_bin, opencode_home, provider, options, tmp_path)
    result = soak.run()
    print(result.table)
    assert not result.violations, "\n".join(
        [f"{v.rule}: {v.where}: {v.detail}" for v in result.violations]
        + ["the daemon's log on those sessions:", *log_of(soak, result.violations)])
