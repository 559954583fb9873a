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

import fcntl
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from daemon_process import FAST_CONFIG, DaemonProcess  # noqa: E402
from fake_provider import FakeProvider  # noqa: E402
from opencode import (  # noqa: E402
    OpenCodeHome,
    OpenCodeServer,
    cache_dir,
    ensure_opencode,
    prepare_home,
)
from standin import DaemonStandIn  # noqa: E402

TIMINGS: dict[str, list[float]] = {}
PLUGIN_DEP = Path("node_modules") / "@opencode-ai" / "plugin"


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


@pytest.fixture(scope="session")
def opencode_bin() -> Path:
    began = time.monotonic()
    # The suite runs on two pytest-xdist workers: on a fresh machine both would npm-install into
    # the same cache at once, so the first installs and the second waits for it.
    cache_dir().mkdir(parents=True, exist_ok=True)
    with open(cache_dir() / ".install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
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


def _wait_for_path(path: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise AssertionError(f"{path} did not appear within {timeout}s")
        time.sleep(0.1)  # polling a file OpenCode writes; nothing to wait on instead


@pytest.fixture(scope="session")
def opencode_home(
    opencode_bin: Path, fake_provider: FakeProvider, tmp_path_factory: pytest.TempPathFactory
) -> OpenCodeHome:
    began = time.monotonic()
    home = prepare_home(tmp_path_factory.mktemp("opencode-home"), fake_provider.url)
    with OpenCodeServer.start(opencode_bin, home) as server:
        server.ok("GET", "/path")  # boots the project instance, which loads the plugins
        _wait_for_path(home.config_dir / PLUGIN_DEP / "package.json", 180)
    record("config_prep", time.monotonic() - began)
    return home


@pytest.fixture
def socket_path() -> Iterator[Path]:
    # Unix socket paths are limited to ~107 bytes: pytest's tmp_path can be too long.
    directory = Path(tempfile.mkdtemp(prefix="ar-e2e-", dir="/tmp"))
    yield directory / "daemon.sock"
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def standin(socket_path: Path) -> Iterator[DaemonStandIn]:
    daemon = DaemonStandIn(socket_path).start()
    yield daemon
    daemon.stop()


@pytest.fixture
def start_opencode(
    opencode_bin: Path, opencode_home: OpenCodeHome, socket_path: Path
) -> Iterator[Callable[..., OpenCodeServer]]:
    servers: list[OpenCodeServer] = []

    def start(socket: Path | None = None, **env: str) -> OpenCodeServer:
        server = OpenCodeServer.start(
            opencode_bin, opencode_home, {"AUTORETRY_SOCKET": str(socket or socket_path), **env}
        )
        servers.append(server)
        record("opencode_start", server.started_in)
        return server

    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def daemon(
    tmp_path: Path, socket_path: Path, opencode_home: OpenCodeHome
) -> Iterator[Callable[..., DaemonProcess]]:
    """Starts the real ``autoretry run`` (fast interruption budgets unless a config is given)
    on the e2e OpenCode's DB; every daemon started must exit cleanly at the end."""
    started: list[DaemonProcess] = []

    def start(config: str = FAST_CONFIG) -> DaemonProcess:
        process = DaemonProcess(
            tmp_path / "autoretry", socket_path, opencode_home.data_dir / "opencode.db", config
        ).start()
        started.append(process)
        return process

    yield start
    for process in started:
        assert process.stop() in (0, -9, None), "the daemon did not exit cleanly"
