"""The tested OpenCode range, and the daemon's warning at a bridge's hello outside it."""

from __future__ import annotations

import logging
import queue
import socket
import time
from pathlib import Path

import pytest

from opencode_autoretry.daemon.intake.bridges import BridgeServer
from opencode_autoretry.opencode import versions
from opencode_autoretry.plugin_bridge import protocol


@pytest.mark.parametrize(("text", "parsed"), [
    ("1.18.33", (1, 18, 33)), ("opencode 1.18.33\n", (1, 18, 33)), ("v1.17.11-beta", (1, 17, 11)),
    ("", None), (None, None), ("latest", None), ("1.18", None),
])
def test_parse_version(text: str | None, parsed: tuple[int, int, int] | None) -> None:
    assert versions.parse_version(text) == parsed


def test_the_tested_range_holds_the_pinned_e2e_version() -> None:
    low, high = versions.TESTED_OPENCODE
    assert versions.in_tested_range(low) and versions.in_tested_range(high)
    assert versions.in_tested_range("1.18.33") is True
    assert versions.untested_warning("1.18.33") is None
    assert versions.in_tested_range("1.17.11") is True  # the oldest supported (issue 11)
    assert versions.in_tested_range("1.17.10") is False
    assert versions.in_tested_range("1.15.13") is False
    assert versions.in_tested_range("9.0.0") is False
    assert versions.in_tested_range("garbage") is None
    assert "outside the tested range" in str(versions.untested_warning("1.15.0"))
    assert "unreadable" in str(versions.untested_warning(None))


def _hello(path: Path, version: str | None) -> None:
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.settimeout(5)
    client.connect(str(path))
    client.sendall(protocol.encode(protocol.Hello(pid=1, directory="/x", opencode=version)))
    assert b"welcome" in client.recv(1000)
    client.close()


def test_the_daemon_warns_once_per_untested_version(tmp_path: Path, caplog) -> None:
    caplog.set_level(logging.WARNING, logger="opencode_autoretry.daemon.intake.bridges")
    with BridgeServer(tmp_path / "d.sock", queue.Queue()) as server:
        for version in ("1.18.33", "1.15.13", "1.15.13", "1.15.4"):
            _hello(server.path, version)
        deadline = time.monotonic() + 30  # a poll: returns as soon as it holds
        while server.counters().lines < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
    warned = [r.getMessage() for r in caplog.records if "tested range" in r.getMessage()]
    assert len(warned) == 2
    assert "1.15.13" in warned[0] and "1.15.4" in warned[1]
