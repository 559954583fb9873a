"""install.sh, run for real in a throwaway home.

Every run gets its own HOME, XDG dirs, TMPDIR, runtime dir (the daemon's socket) and OpenCode DB
path, a fake ``opencode`` on PATH that prints a tested version, and ``AUTORETRY_SERVICE=none``:
the daemon runs as a detached process with a pid file, never as a systemd user service or a
launchd agent of the real user. pip keeps the index it already uses (the ``PIP_*`` variables
and the user's pip config file are passed on). The daemons a test started are stopped at its end,
pass or fail, and the paths install.sh would touch in the real home are checked unchanged.

The two scenarios that pip-install (``test_install_upgrade_uninstall``: install 16 s, upgrade
9 s, uninstall 4 s on an idle 2-core machine; ``test_existing_venv_own_command_and_bad_config``:
about 25 s) are the slow ones, the rest takes a second; about 50 s of CPU in all.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from opencode_autoretry.opencode.versions import TESTED_OPENCODE

ROOT = Path(__file__).resolve().parents[1]
INSTALL_SH = ROOT / "install.sh"
#: A whole install (venv, pip, the daemon's first heartbeat) on a slow machine; reaching it is a
#: failure that says so, never a measure of speed.
RUN_TIMEOUT_S = 900
STOP_TIMEOUT_S = 30
BAD_CONFIG = 'poll_interval = "often"\n'
BAD_CONFIG_ERROR = "poll_interval must be a number, got 'often'"  # the daemon's own line

pytestmark = pytest.mark.skipif(
    sys.platform == "win32" or shutil.which("bash") is None, reason="install.sh needs bash"
)


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


def _real_home_paths() -> list[Path]:
    home = Path.home()
    data = Path(os.environ.get("XDG_DATA_HOME") or home / ".local/share")
    config = Path(os.environ.get("XDG_CONFIG_HOME") or home / ".config")
    return [home / ".local/bin/autoretry", data / "opencode-autoretry/venv",
            data / "opencode-autoretry/daemon.pid", config / "opencode/plugins/autoretry.js",
            config / "systemd/user/opencode-autoretry.service"]


def _fingerprint(path: Path) -> tuple[object, ...] | None:
    try:
        stat = path.lstat()
    except FileNotFoundError:
        return None
    return stat.st_ino, stat.st_mtime_ns, stat.st_size, stat.st_mode


@pytest.fixture
def sandbox(tmp_path: Path) -> Iterator[Sandbox]:
    before = {path: _fingerprint(path) for path in _real_home_paths()}
    runtime = Path(tempfile.mkdtemp(prefix="ar-run-"))  # short: a socket path has ~100 bytes
    box = Sandbox(tmp_path, runtime)
    try:
        yield box
    finally:
        box.stop_daemons()
        shutil.rmtree(runtime, ignore_errors=True)
    after = {path: _fingerprint(path) for path in _real_home_paths()}
    assert after == before, "install.sh touched the real home"


def _ok(done: subprocess.CompletedProcess[str], what: str) -> str:
    assert done.returncode == 0, f"{what} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout + done.stderr


def _pid(box: Sandbox) -> int:
    pids = box.recorded_pids()
    assert len(pids) == 1, f"no pid in {box.pidfile}"
    return pids.pop()


def test_install_upgrade_uninstall(sandbox: Sandbox) -> None:
    """The real path: install.sh creates the venv, links the command, installs the bridge and
    starts the daemon; a second run upgrades in place; --uninstall removes exactly that."""
    out = _ok(sandbox.run(), "install")
    assert (sandbox.venv / ".opencode-autoretry-install").is_file(), "the venv is not marked"
    assert sandbox.link.is_symlink()
    assert os.readlink(sandbox.link) == f"{sandbox.venv}/bin/autoretry"
    assert sandbox.plugin.is_file()
    first = _pid(sandbox)
    assert sandbox.daemon_alive(first), f"pid {first} is not the daemon"
    daemon = sandbox.status()
    assert daemon["running"] and daemon["pid"] == first, daemon
    assert f"OpenCode {TESTED_OPENCODE[1]}" in out
    for line in (f"config  {sandbox.config}", f"log     {sandbox.state}/log/daemon.log",
                 f"store   {sandbox.state}/autoretry.db", "restart your OpenCode windows"):
        assert line in out, f"{line!r} not in the install's output:\n{out}"

    out = _ok(sandbox.run(), "re-run (upgrade)")
    assert "upgrading" in out
    assert f"stopped the daemon (pid {first})" in out
    second = _pid(sandbox)
    assert second != first
    assert not sandbox.daemon_alive(first), "the old daemon still runs"
    assert sandbox.daemon_alive(second)
    assert sandbox.status()["pid"] == second
    assert (sandbox.venv / ".opencode-autoretry-install").is_file()
    assert os.readlink(sandbox.link) == f"{sandbox.venv}/bin/autoretry"

    sandbox.config.parent.mkdir(parents=True, exist_ok=True)
    sandbox.config.write_text("# mine\n")
    _ok(sandbox.run("--uninstall"), "uninstall")
    assert not sandbox.daemon_alive(second), "uninstall left the daemon running"
    assert not sandbox.pidfile.exists()
    assert not sandbox.venv.exists()
    assert not sandbox.link.exists() and not sandbox.link.is_symlink()
    assert not sandbox.plugin.exists()
    assert (sandbox.state / "autoretry.db").is_file(), "uninstall lost the store"
    assert sandbox.config.read_text() == "# mine\n", "uninstall touched the config"


def test_existing_venv_own_command_and_bad_config(sandbox: Sandbox, tmp_path: Path) -> None:
    """A venv the user gave (AUTORETRY_VENV) and the user's own ~/.local/bin/autoretry survive
    install and uninstall; a config the daemon rejects fails the install with the daemon's
    words (the package is installed by then: uninstall takes it out of the user's venv)."""
    venv = tmp_path / "my venv"  # a space, too
    subprocess.run([sandbox.env["PYTHON"], "-m", "venv", str(venv)], check=True, timeout=300)
    (venv / "mine.txt").write_text("keep me\n")
    dev_checkout = tmp_path / "checkout/autoretry"
    dev_checkout.parent.mkdir()
    dev_checkout.write_text("#!/bin/sh\necho mine\n")
    sandbox.link.parent.mkdir(parents=True)
    sandbox.link.symlink_to(dev_checkout)
    sandbox.config.parent.mkdir(parents=True)
    sandbox.config.write_text(BAD_CONFIG)

    done = sandbox.run(AUTORETRY_VENV=str(venv))
    assert done.returncode == 1, f"install with a bad config exited {done.returncode}:\n" \
        f"{done.stdout}\n{done.stderr}"
    assert BAD_CONFIG_ERROR in done.stderr, f"the daemon's error is not shown:\n{done.stderr}"
    assert not sandbox.recorded_pids(), "a pid file for a daemon that died"
    assert os.readlink(sandbox.link) == str(dev_checkout), "install replaced the user's link"
    assert f"{sandbox.link} is a link to {dev_checkout}" in done.stderr

    assert "not created by install.sh" in done.stdout
    assert not (venv / ".opencode-autoretry-install").exists(), "a venv it did not create marked"
    assert (venv / "bin/autoretry").exists(), "the package was not installed into the user's venv"

    _ok(sandbox.run("--uninstall", AUTORETRY_VENV=str(venv)), "uninstall")
    assert (venv / "mine.txt").read_text() == "keep me\n", "uninstall removed the user's venv"
    assert not (venv / "bin/autoretry").exists()
    shown = subprocess.run([str(venv / "bin/python"), "-m", "pip", "show", "opencode-autoretry"],
                           env=sandbox.env, capture_output=True, timeout=120, check=False)
    assert shown.returncode != 0, "the package is still installed in the user's venv"
    assert os.readlink(sandbox.link) == str(dev_checkout), "uninstall removed the user's link"
    assert not sandbox.plugin.exists()


def test_a_directory_that_is_not_a_venv_is_refused_and_never_removed(sandbox: Sandbox,
                                                                     tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "notes.txt").write_text("mine\n")
    done = sandbox.run(AUTORETRY_VENV=str(project))
    assert done.returncode == 1
    assert done.stderr.startswith("error: ") and "not a virtualenv" in done.stderr, done.stderr
    assert sorted(p.name for p in project.iterdir()) == ["notes.txt"]

    _ok(sandbox.run("--uninstall", AUTORETRY_VENV=str(project)), "uninstall")
    assert (project / "notes.txt").read_text() == "mine\n", "uninstall removed a directory"


@pytest.mark.parametrize("args, env, message", [
    (["--bogus"], {}, "error: unknown option --bogus"),
    (["--uninstall", "--dev"], {}, "error: one option at most"),
    ([], {"AUTORETRY_SERVICE": "cron"}, "error: AUTORETRY_SERVICE=cron is not one of"),
])
def test_bad_input_is_one_line_and_exit_1(sandbox: Sandbox, args: list[str],
                                          env: dict[str, str], message: str) -> None:
    done = sandbox.run(*args, **env)
    assert done.returncode == 1
    assert done.stderr.startswith(message) and done.stderr.count("\n") == 1, done.stderr
    assert not sandbox.venv.exists() and not sandbox.link.is_symlink()


def test_help_explains_what_uninstall_removes(sandbox: Sandbox) -> None:
    out = _ok(sandbox.run("--help"), "--help")
    for word in ("--uninstall", "--dev", "AUTORETRY_VENV", "AUTORETRY_SERVICE", "marker",
                 "~/.local/bin/autoretry", "Exit status"):
        assert word in out, f"{word!r} not in --help"
    assert not sandbox.venv.exists()


def test_no_process_is_found_by_a_name_pattern() -> None:
    text = INSTALL_SH.read_text()
    for tool in ("pkill", "pgrep", "killall"):
        assert tool not in text, f"install.sh uses {tool}: stop the daemon by its pid"


def test_shellcheck_is_clean() -> None:
    shellcheck = shutil.which("shellcheck")
    if shellcheck is None:
        pytest.skip("shellcheck is not installed (apt-get install shellcheck)")
    done = subprocess.run([shellcheck, "--severity=style", str(INSTALL_SH)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
