"""`autoretry doctor` against the real daemon and the real OpenCode 1.18.33 (issue 11 item 6).

One OpenCode with the bridge connected to a running `autoretry run`: every check passes (a
warning is allowed only for OpenCode processes of other suites), the bridge is seen with its
OpenCode version; then the daemon is stopped and doctor exits 1 naming the daemon and the
socket, each with a fix.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from daemon_process import DaemonProcess, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.shared_opencode]

TURN = 30.0


def doctor(d: DaemonProcess, opencode_bin: Path, config_dir: Path) -> tuple[int, dict[str, Any]]:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("AUTORETRY_", "XDG_"))},
        "AUTORETRY_HOME": str(d.home), "AUTORETRY_SOCKET": str(d.socket),
        "AUTORETRY_CONFIG": str(d.config), "OPENCODE_DB": str(d.opencode_db),
        "XDG_CONFIG_HOME": str(config_dir.parent),  # no service unit in there
    }
    done = subprocess.run(
        [sys.executable, "-m", "opencode_autoretry.cli", "doctor", "--json",
         "--opencode", str(opencode_bin), "--opencode-config", str(config_dir)],
        env=env, capture_output=True, text=True, timeout=60,
    )
    assert done.stderr == "", done.stderr
    return done.returncode, json.loads(done.stdout)


def by_name(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {check["name"]: check for check in report["checks"]}


def bridge_in_heartbeat(d: DaemonProcess, pid: int) -> bool:
    view = d.store()
    try:
        beat = view.heartbeat()
    finally:
        view.close()
    return beat is not None and any(b.get("pid") == pid for b in beat.info.get("bridges", []))


def test_doctor_on_a_live_daemon_and_opencode(daemon, start_opencode, opencode_bin,
                                              opencode_home) -> None:
    d = daemon()
    mark = len(d.lines())
    server = start_opencode()
    server.ok("GET", "/path")  # boots the instance, which loads the bridge
    d.wait_log("connected: pid", TURN, after=d.started_line if server.shared else mark)
    wait_until(lambda: bridge_in_heartbeat(d, server.process.pid), TURN,
               "the heartbeat lists the bridge")

    code, report = doctor(d, opencode_bin, opencode_home.config_dir)
    checks = by_name(report)
    assert (report["report"], report["version"]) == ("doctor", 1)
    assert code == 0 and report["ok"], report
    for name in ("config", "opencode", "opencode db", "bridge", "/autoretry", "daemon",
                 "socket", "state files", "service"):
        assert checks[name]["status"] == "ok", checks[name]
    assert "1.18.33" in checks["opencode"]["detail"]
    bridges = checks["bridges"]
    assert bridges["status"] in ("ok", "warn"), bridges
    assert "1 connected" in bridges["detail"]
    assert str(server.process.pid) not in bridges["detail"]  # ours has its bridge
    assert not any("outside the tested range" in line for line in d.lines())

    assert d.stop() == 0
    code, report = doctor(d, opencode_bin, opencode_home.config_dir)
    checks = by_name(report)
    assert code == 1 and not report["ok"]
    assert checks["daemon"]["status"] == "fail" and "stopped" in checks["daemon"]["detail"]
    assert checks["socket"]["status"] == "fail"
    assert all(c["fix"] for c in report["checks"] if c["status"] == "fail")
