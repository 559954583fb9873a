"""Issue 24 item 6, "install it the Python way": the wheel `pipx install .` / `uv tool install .`
build carries the bridge, and `autoretry setup` in a throwaway home does what install.sh did
after its virtualenv: the bridge files land in ~/.config/opencode, the daemon starts (its first
heartbeat) and `autoretry stop` stops it; `setup --uninstall` takes the bridge away again.

The wheel is built from a copy of the checkout (building in place would leave build/ behind) and
installed, with its dependencies pinned by constraints.txt, into a fresh virtualenv: about 25 s,
most of it pip.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from throwaway_home import ROOT, RUN_TIMEOUT_S, Sandbox, sandboxed

from opencode_autoretry.opencode.versions import TESTED_OPENCODE
from opencode_autoretry.plugin_bridge.install import SHIPPED

pytestmark = [pytest.mark.long, pytest.mark.skipif(sys.platform == "win32",
                                                   reason="a POSIX daemon and venv layout")]

#: What install.sh leaves out of its copy of the checkout, too.
NOT_SOURCE = shutil.ignore_patterns(".venv", ".git", "build", "*.egg-info", "__pycache__",
                                    "node_modules", ".pytest_cache", ".mypy_cache",
                                    ".ruff_cache")
BRIDGE_IN_WHEEL = "opencode_autoretry/plugin_bridge/"


@pytest.fixture
def sandbox(tmp_path: Path) -> Iterator[Sandbox]:
    with sandboxed(tmp_path, "setup") as box:
        yield box


def run(box: Sandbox, *argv: str | Path) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([str(a) for a in argv], env=box.env, cwd=box.base,
                          capture_output=True, text=True, timeout=RUN_TIMEOUT_S,
                          stdin=subprocess.DEVNULL, check=False)
    box.pids |= box.recorded_pids()
    return done


def ok(done: subprocess.CompletedProcess[str], what: str) -> str:
    assert done.returncode == 0, f"{what} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout + done.stderr


def build_wheel(box: Sandbox) -> Path:
    source, dist = box.base / "src", box.base / "dist"
    shutil.copytree(ROOT, source, ignore=NOT_SOURCE)
    ok(run(box, sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir",
           dist, source), "pip wheel")
    wheels = list(dist.glob("opencode_autoretry-*.whl"))
    assert len(wheels) == 1, f"pip built {wheels}"
    return wheels[0]


def bridge_files_in(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as archive:
        return {name.removeprefix(BRIDGE_IN_WHEEL) for name in archive.namelist()
                if name.startswith(BRIDGE_IN_WHEEL) and name.endswith((".js", ".md"))}


def test_the_wheel_installs_and_setup_starts_and_stop_stops_the_daemon(sandbox: Sandbox) -> None:
    wheel = build_wheel(sandbox)
    assert bridge_files_in(wheel) == {file.name for file in SHIPPED}, \
        "the wheel's bridge files differ from what `bridge install` copies"

    venv = sandbox.base / "tool venv"  # as pipx and uv make one: the package's own venv
    ok(run(sandbox, sandbox.env["PYTHON"], "-m", "venv", venv), "venv")
    ok(run(sandbox, venv / "bin/python", "-m", "pip", "install", "--quiet", "-c",
           ROOT / "constraints.txt", wheel), "pip install the wheel")
    autoretry = venv / "bin/autoretry"
    assert "setup" in ok(run(sandbox, autoretry, "--help"), "autoretry --help")
    assert "--uninstall" in ok(run(sandbox, autoretry, "setup", "--help"), "setup --help")

    out = ok(run(sandbox, autoretry, "setup"), "autoretry setup")
    for file in SHIPPED:
        target = file.target(sandbox.config_home / "opencode")
        assert target.read_bytes() == file.content(), f"{target} is not the shipped file"
    assert f"OpenCode {TESTED_OPENCODE[1]}" in out
    for line in (f"config  {sandbox.config}", f"log     {sandbox.state}/log/daemon.log",
                 f"store   {sandbox.state}/autoretry.db", "restart your OpenCode windows"):
        assert line in out, f"{line!r} not in setup's output:\n{out}"
    (pid,) = sandbox.recorded_pids()
    assert sandbox.daemon_alive(pid, venv), f"pid {pid} is not the wheel's daemon"
    status = json.loads(ok(run(sandbox, autoretry, "status", "--json"), "status"))["daemon"]
    assert status["running"] and status["pid"] == pid, status

    out = ok(run(sandbox, autoretry, "stop"), "autoretry stop")
    assert f"stopped the daemon (pid {pid})" in out
    assert not sandbox.daemon_alive(pid, venv), "stop left the daemon running"
    assert not sandbox.pidfile.exists()

    ok(run(sandbox, autoretry, "setup", "--uninstall"), "setup --uninstall")
    assert not sandbox.plugin.exists() and not (sandbox.config_home / "opencode/command/"
                                                "autoretry.md").exists()
