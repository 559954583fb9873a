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
from collections.abc import Iterator
from pathlib import Path

import pytest
from throwaway_home import INSTALL_SH, Sandbox, sandboxed

from opencode_autoretry.opencode.versions import TESTED_OPENCODE

BAD_CONFIG = 'poll_interval = "often"\n'
BAD_CONFIG_ERROR = "poll_interval must be a number, got 'often'"  # the daemon's own line

pytestmark = pytest.mark.skipif(
    sys.platform == "win32" or shutil.which("bash") is None, reason="install.sh needs bash"
)


@pytest.fixture
def sandbox(tmp_path: Path) -> Iterator[Sandbox]:
    with sandboxed(tmp_path, "install.sh") as box:
        yield box


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
