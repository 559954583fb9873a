"""Fixtures for the e2e suite: real OpenCode 1.18.33 + fake provider + bridge + daemon stand-in.

Session scope: ``opencode_bin`` (installs OpenCode when missing), ``fake_provider``,
``opencode_home`` (isolated HOME/XDG dirs + config + bridge; warmed up once because OpenCode
npm-installs ``@opencode-ai/plugin`` into its config dir on first start).
Function scope: ``provider`` (the fake provider, reset), ``socket_path`` (short, private),
``standin`` (a started ``DaemonStandIn`` on ``socket_path``), ``start_opencode`` (factory:
``start_opencode(socket=None, **env) -> OpenCodeServer``, stopped at teardown).
Timings are collected in ``TIMINGS`` and printed in the terminal summary.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from daemon_process import FAST_CONFIG, DaemonProcess
from fake_provider import FakeProvider
from opencode import (
    OpenCodeHome,
    OpenCodeServer,
    SharedServer,
    binary_version,
    ensure_opencode,
    warm_home,
)
from standin import DaemonStandIn
from versions import FACTS, skip_reason

# The suite may run under coverage.py (README's test command): its workers are measured, but
# the daemons, CLIs and OpenCode processes the e2e tests start are left unmeasured, so they run
# at the speed their timing bounds were set for.
os.environ.pop("COVERAGE_PROCESS_CONFIG", None)

TIMINGS: dict[str, list[float]] = {}


def record(name: str, seconds: float) -> None:
    TIMINGS.setdefault(name, []).append(round(seconds, 2))


def pytest_sessionfinish(session: pytest.Session) -> None:
    # Under pytest-xdist each worker collects its own timings: hand them to the controller.
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["e2e_timings"] = TIMINGS


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: object, error: object) -> None:
    """(pytest-xdist, controller side) merge a finished worker's timings."""
    for name, values in getattr(node, "workeroutput", {}).get("e2e_timings", {}).items():
        TIMINGS.setdefault(name, []).extend(values)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if TIMINGS:
        terminalreporter.write_line(
            "e2e timings (s): " + ", ".join(f"{k}={v}" for k, v in TIMINGS.items())
        )


CALL_FAILED = pytest.StashKey[bool]()
DAEMON_LOG_LINES = 80  # the tail of each daemon's log printed for a failed test


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Iterator[pytest.TestReport]:
    """Remembers whether the test itself failed, for the daemon fixture's teardown."""
    report: pytest.TestReport = yield
    if report.when == "call":
        item.stash[CALL_FAILED] = report.failed
    return report


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "shared_opencode: the test's start_opencode() is its worker's warm OpenCode")
    config.addinivalue_line(
        "markers", "own_opencode: the test starts OpenCode itself, in a shared_opencode module")
    config.addinivalue_line(
        "markers", f"opencode(*facts): needs these facts of OpenCode's own behaviour: {FACTS}"
    )


@pytest.fixture(autouse=True)
def _opencode_facts(request: pytest.FixtureRequest) -> None:
    """Skips a test marked ``@pytest.mark.opencode(fact, ...)`` on a version where a fact
    does not hold (versions.py); unmarked tests never look at the version."""
    facts = tuple(f for mark in request.node.iter_markers("opencode") for f in mark.args)
    if facts:
        reason = skip_reason(facts, request.getfixturevalue("opencode_version"))
        if reason:
            pytest.skip(reason)


@pytest.fixture(scope="session")
def opencode_bin() -> Path:
    began = time.monotonic()
    binary = ensure_opencode()
    record("ensure_opencode", time.monotonic() - began)
    return binary


@pytest.fixture(scope="session")
def fake_provider() -> Iterator[FakeProvider]:
    provider = FakeProvider().start()
    yield provider
    provider.close()


@pytest.fixture
def provider(fake_provider: FakeProvider) -> FakeProvider:
    fake_provider.reset()
    return fake_provider


@pytest.fixture(scope="session")
def opencode_home(
    opencode_bin: Path, fake_provider: FakeProvider, tmp_path_factory: pytest.TempPathFactory
) -> OpenCodeHome:
    began = time.monotonic()
    home = warm_home(opencode_bin, tmp_path_factory.mktemp("opencode-home"), fake_provider.url)
    record("config_prep", time.monotonic() - began)
    return home


@pytest.fixture(scope="session")
def opencode_version(opencode_bin: Path) -> str:
    """What ``opencode_bin --version`` says (``1.18.33`` unless
    ``$AUTORETRY_E2E_OPENCODE_VERSION`` asks for another); ``versions.py`` says what it does."""
    return binary_version(opencode_bin)


def private_socket_dir() -> Path:
    # Unix socket paths are limited to ~107 bytes: pytest's tmp_path can be too long.
    return Path(tempfile.mkdtemp(prefix="ar-e2e-", dir="/tmp"))


def shares_opencode(request: pytest.FixtureRequest) -> bool:
    """``@pytest.mark.shared_opencode`` (module or test), unless ``own_opencode`` says no."""
    node = request.node
    return (node.get_closest_marker("shared_opencode") is not None
            and node.get_closest_marker("own_opencode") is None)


@pytest.fixture(scope="session")
def worker_socket() -> Iterator[Path]:
    """The socket path of this worker's shared OpenCode: every sharing test's daemon (or
    stand-in) listens here, one test at a time."""
    directory = private_socket_dir()
    yield directory / "daemon.sock"
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(scope="session")
def shared_server(
    opencode_bin: Path, opencode_home: OpenCodeHome, worker_socket: Path,
    fake_provider: FakeProvider,
) -> Iterator[SharedServer]:
    """One warm ``opencode serve`` per worker for the tests marked ``shared_opencode``
    (issue 20: a start and a warm-up turn cost about 3.5 s of wall and 2.5 s of CPU each).
    Its bridge retries the socket every 250 ms, so each test's new daemon is found at once."""
    shared = SharedServer.launch(opencode_bin, opencode_home, worker_socket, fake_provider.reset)
    record("opencode_start", shared.server.started_in)
    yield shared
    shared.server.stop()


@pytest.fixture
def socket_path(request: pytest.FixtureRequest) -> Iterator[Path]:
    """A private socket path for this test; for a test sharing its worker's OpenCode, that
    OpenCode's, and at its end every session the test made is aborted and deleted (its
    bridge forgets it: the next test's daemon must not find it owned)."""
    if not shares_opencode(request):
        directory = private_socket_dir()
        yield directory / "daemon.sock"
        shutil.rmtree(directory, ignore_errors=True)
        return
    shared: SharedServer = request.getfixturevalue("shared_server")
    socket = request.getfixturevalue("worker_socket")
    shared.begin_test()
    yield socket
    shared.end_test()
    socket.unlink(missing_ok=True)  # a SIGKILLed daemon's


@pytest.fixture
def standin(socket_path: Path) -> Iterator[DaemonStandIn]:
    daemon = DaemonStandIn(socket_path).start()
    yield daemon
    daemon.stop()


@pytest.fixture
def start_opencode(
    request: pytest.FixtureRequest, opencode_bin: Path, opencode_home: OpenCodeHome,
    socket_path: Path, fake_provider: FakeProvider,
) -> Iterator[Callable[..., OpenCodeServer]]:
    """Starts ``opencode serve``; ``warm=True`` has it run one plain turn first (and forgets
    that turn's requests), for scenarios whose bounds must not time a cold start. In a test
    marked ``shared_opencode`` it returns the worker's warm OpenCode instead (``shared_server``)."""
    servers: list[OpenCodeServer] = []
    shared = shares_opencode(request)

    def start(socket: Path | None = None, warm: bool = False, **env: str) -> OpenCodeServer:
        if shared:
            assert socket is None and not env, (
                "a test that starts OpenCode with its own socket or environment must be "
                "marked @pytest.mark.own_opencode")
            server: OpenCodeServer = request.getfixturevalue("shared_server").server
            return server  # already warm
        server = OpenCodeServer.start(
            opencode_bin, opencode_home, {"AUTORETRY_SOCKET": str(socket or socket_path), **env}
        )
        servers.append(server)
        record("opencode_start", server.started_in)
        if warm:
            server.warm_up()
            fake_provider.reset()
        return server

    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def daemon(
    request: pytest.FixtureRequest, tmp_path: Path, socket_path: Path,
    opencode_home: OpenCodeHome,
) -> Iterator[Callable[..., DaemonProcess]]:
    """Starts the real ``autoretry run`` (fast interruption budgets unless a config is given)
    on the e2e OpenCode's DB; every daemon started must exit cleanly at the end: stop on
    SIGTERM (within 20 s, else SIGKILLed and the test fails) and leave no traceback in its
    log (the test fails with the excerpt). A failed
    test prints the tail of each daemon's log (not debug): what a CI failure is read from."""
    started: list[DaemonProcess] = []

    def start(config: str = FAST_CONFIG) -> DaemonProcess:
        process = DaemonProcess(
            tmp_path / "autoretry", socket_path, opencode_home.data_dir / "opencode.db", config
        ).start()
        started.append(process)
        return process

    yield start
    if request.node.stash.get(CALL_FAILED, False):
        for number, process in enumerate(started, 1):
            lines = [line for line in process.lines() if " DEBUG " not in line]
            print(f"\n--- daemon {number} log, last {DAEMON_LOG_LINES} lines (not debug) ---")
            print("\n".join(lines[-DAEMON_LOG_LINES:]))
    faults: list[str] = []
    for process in started:
        code = process.stop()
        faults += process.teardown_faults()
        # -9: a daemon the test itself SIGKILLed and left down (refusing SIGTERM is a fault).
        assert code in (0, -9, None), f"the daemon did not exit cleanly (exit code {code})"
    assert not faults, "\n\n".join(faults)
