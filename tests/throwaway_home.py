"""A throwaway home for install.sh, ``autoretry setup`` and the daemons they start.

Its own HOME, XDG dirs, TMPDIR, runtime dir (the daemon's socket) and OpenCode DB path, a fake
``opencode`` on PATH that prints a tested version, and ``AUTORETRY_SERVICE=none``: the daemon
runs as a detached process with a pid file, never as a systemd user service or a launchd agent
of the real user. pip keeps the index it already uses (the ``PIP_*`` variables and the user's
pip config file are passed on).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil

from opencode_autoretry.opencode.versions import TESTED_OPENCODE

ROOT = Path(__file__).resolve().parents[1]
INSTALL_SH = ROOT / "install.sh"
#: A whole install (venv, pip, the daemon's first heartbeat) on a slow machine; reaching it is a
#: failure that says so, never a measure of speed.
RUN_TIMEOUT_S = 900
STOP_TIMEOUT_S = 30


def _user_pip_config() -> str | None:
    """The pip config file of the real user (its index, find-links), read by pip in the
    sandbox too: the sandbox's HOME has none."""
    if os.environ.get("PIP_CONFIG_FILE"):
        return os.environ["PIP_CONFIG_FILE"]
    home = Path.home()
    config_home = Path(os.environ.get("XDG_CONFIG_HOME") or home / ".config")
    for candidate in (config_home / "pip/pip.conf", home / ".pip/pip.conf",
                      home / "Library/Application Support/pip/pip.conf"):
        if candidate.is_file():
            return str(candidate)
    return None


_PASSED_ON = ("LANG", "LC_ALL", "http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY",
              "HTTPS_PROXY", "NO_PROXY", "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE")


class Sandbox:
    """A throwaway home for install.sh and the daemons it starts."""

    def __init__(self, base: Path, runtime: Path) -> None:
        self.base = base
        self.home = base / "home"
        self.config_home = self.home / ".config"
        self.data_home = self.home / ".local/share"
        self.state = self.data_home / "opencode-autoretry"
        self.venv = self.state / "venv"
        self.link = self.home / ".local/bin/autoretry"
        self.config = self.config_home / "opencode-autoretry/config.toml"
        self.plugin = self.config_home / "opencode/plugins/autoretry.js"
        self.pidfile = self.state / "daemon.pid"
        self.pids: set[int] = set()
        fakebin = base / "fakebin"
        for directory in (self.home, fakebin, base / "tmp"):
            directory.mkdir(parents=True)
        opencode = fakebin / "opencode"
        opencode.write_text(f"#!/bin/sh\necho {TESTED_OPENCODE[1]}\n")
        opencode.chmod(0o755)
        env = {name: os.environ[name] for name in _PASSED_ON if name in os.environ}
        env.update({name: value for name, value in os.environ.items() if name.startswith("PIP_")})
        pip_config = _user_pip_config()
        if pip_config:
            env["PIP_CONFIG_FILE"] = pip_config
        env.update(
            HOME=str(self.home),
            PATH=os.pathsep.join([str(fakebin), "/usr/local/bin", "/usr/bin", "/bin"]),
            TMPDIR=str(base / "tmp"),
            XDG_CONFIG_HOME=str(self.config_home),
            XDG_DATA_HOME=str(self.data_home),
            XDG_CACHE_HOME=str(self.home / ".cache"),
            XDG_STATE_HOME=str(self.home / ".local/state"),
            XDG_RUNTIME_DIR=str(runtime),
            OPENCODE_DB=str(base / "opencode.db"),
            PYTHON=getattr(sys, "_base_executable", sys.executable),
            AUTORETRY_SERVICE="none",
            PIP_NO_INPUT="1",
            PIP_DISABLE_PIP_VERSION_CHECK="1",
        )
        self.env = env

    def run(self, *args: str, **extra_env: str) -> subprocess.CompletedProcess[str]:
        try:
            done = subprocess.run(
                ["bash", str(INSTALL_SH), *args], env={**self.env, **extra_env},
                cwd=self.base, capture_output=True, text=True, timeout=RUN_TIMEOUT_S,
                stdin=subprocess.DEVNULL, check=False,
            )
        finally:
            self.pids |= self.recorded_pids()
        return done

    def recorded_pids(self) -> set[int]:
        try:
            text = self.pidfile.read_text().strip()
        except OSError:
            return set()
        return {int(text)} if text.isdigit() else set()

    def daemon_alive(self, pid: int, venv: Path | None = None) -> bool:
        """Process ``pid`` runs ``VENV/bin/autoretry run`` and is not a zombie."""
        try:
            process = psutil.Process(pid)
            if process.status() == psutil.STATUS_ZOMBIE:
                return False
            return f"{venv or self.venv}/bin/autoretry" in process.cmdline()
        except psutil.Error:
            return False

    def status(self, venv: Path | None = None) -> dict[str, object]:
        import json

        done = subprocess.run([str((venv or self.venv) / "bin/autoretry"), "status", "--json"],
                              env=self.env, capture_output=True, text=True, check=True,
                              timeout=120)
        daemon = json.loads(done.stdout)["daemon"]
        assert isinstance(daemon, dict)
        return daemon

    def stop_daemons(self) -> None:
        """Every daemon a run of install.sh started from this sandbox (its pid file's pid,
        checked to be a daemon from this sandbox): SIGTERM, then SIGKILL."""
        for pid in self.pids | self.recorded_pids():
            try:
                process = psutil.Process(pid)
                if str(self.base) not in " ".join(process.cmdline()):
                    continue
                process.terminate()
                try:
                    process.wait(STOP_TIMEOUT_S)
                except psutil.TimeoutExpired:
                    process.kill()
            except psutil.Error:
                continue


def real_home_paths() -> list[Path]:
    home = Path.home()
    data = Path(os.environ.get("XDG_DATA_HOME") or home / ".local/share")
    config = Path(os.environ.get("XDG_CONFIG_HOME") or home / ".config")
    return [home / ".local/bin/autoretry", data / "opencode-autoretry/venv",
            data / "opencode-autoretry/daemon.pid", config / "opencode/plugins/autoretry.js",
            config / "systemd/user/opencode-autoretry.service"]


def fingerprint(path: Path) -> tuple[object, ...] | None:
    try:
        stat = path.lstat()
    except FileNotFoundError:
        return None
    return stat.st_ino, stat.st_mtime_ns, stat.st_size, stat.st_mode


@contextmanager
def sandboxed(tmp_path: Path, what: str) -> Iterator[Sandbox]:
    """A Sandbox whose daemons are stopped at the end, and a check that ``what`` (install.sh,
    setup) left the real home as it found it."""
    before = {path: fingerprint(path) for path in real_home_paths()}
    runtime = Path(tempfile.mkdtemp(prefix="ar-run-"))  # short: a socket path has ~100 bytes
    box = Sandbox(tmp_path, runtime)
    try:
        yield box
    finally:
        box.stop_daemons()
        shutil.rmtree(runtime, ignore_errors=True)
    after = {path: fingerprint(path) for path in real_home_paths()}
    assert after == before, f"{what} touched the real home"
