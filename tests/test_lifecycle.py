"""Issue 24, "lifecycle and where things are": start/stop/restart by the daemon's own pid file,
logs, config path/show/check, the paths in status, and SIGHUP's reload."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
from click.testing import CliRunner, Result

from opencode_autoretry.cli.main import main
from opencode_autoretry.daemon.pidfile import daemon_pid, is_autoretry_run, write_pid_file

#: Generous: the machine may be busy; every wait ends at its event, not at this bound.
WAIT_S = 60.0


def env_for(home: Path, **more: str) -> dict[str, str]:
    return {"AUTORETRY_HOME": str(home), "OPENCODE_DB": str(home / "opencode.db"),
            "AUTORETRY_CONFIG": str(home / "config.toml"), "AUTORETRY_SOCKET":
            str(home / "d.sock"), "AUTORETRY_SERVICE": "none", "AUTORETRY_TICK_INTERVAL": "0.1",
            **more}


def cli(home: Path, *args: str, **env: str) -> Result:
    return CliRunner().invoke(main, list(args), env=env_for(home, **env),
                              catch_exceptions=False)


def wait_for(what: str, condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, f"waited {WAIT_S} s for {what}"
        time.sleep(0.05)


def text_of(path: Path) -> str:
    return path.read_text(encoding="utf-8") if path.exists() else ""


# -- config path | check | show ------------------------------------------------------------------


def test_config_path_says_whether_the_file_exists(tmp_path):
    result = cli(tmp_path, "config", "path")
    assert result.exit_code == 0
    assert result.output == f"{tmp_path / 'config.toml'}  (not found: the defaults apply)\n"
    (tmp_path / "config.toml").write_text("poll_interval = 5\n")
    assert cli(tmp_path, "config", "path").output == f"{tmp_path / 'config.toml'}\n"


def test_config_check_refuses_with_runs_own_line_and_exit_2(tmp_path):
    (tmp_path / "config.toml").write_text('poll_interval = "x"\n')
    checked = cli(tmp_path, "config", "check")
    ran = cli(tmp_path, "run")
    assert checked.exit_code == ran.exit_code == 2
    assert "poll_interval must be a number" in checked.output
    assert checked.output == ran.output
    (tmp_path / "config.toml").write_text("poll_interval = 5\n")
    good = cli(tmp_path, "config", "check")
    assert (good.exit_code, good.output) == (0, f"config ok: {tmp_path / 'config.toml'}\n")


def test_config_show_names_where_each_value_came_from(tmp_path):
    (tmp_path / "config.toml").write_text(
        "poll_interval = 5\n[budgets.rate_limit]\nmax_retries = 2\n")
    result = cli(tmp_path, "--store", str(tmp_path / "s.db"), "config", "show", "--json",
                 AUTORETRY_STALL_TIMEOUT="99")
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    shown = report["settings"]
    config = str(tmp_path / "config.toml")
    assert report["config"] == config and report["exists"] is True
    assert shown["poll_interval"] == {"value": 5.0, "source": "file", "where": config}
    assert shown["stall_timeout"] == {"value": 99.0, "source": "environment",
                                      "where": "AUTORETRY_STALL_TIMEOUT"}
    assert shown["store"] == {"value": str(tmp_path / "s.db"), "source": "flag",
                              "where": "--store"}
    assert shown["runaway_steps"] == {"value": 6, "source": "default", "where": ""}
    assert shown["policy"]["source"] == "file" and shown["policy"]["value"] == {
        "budgets": {"rate_limit": {"max_retries": 2}}}
    text = cli(tmp_path, "config", "show", AUTORETRY_STALL_TIMEOUT="99").output
    assert f"poll_interval    5.0  (file {config})" in text
    assert "stall_timeout    99.0  (environment AUTORETRY_STALL_TIMEOUT)" in text


def test_config_show_refuses_a_bad_config_like_run(tmp_path):
    (tmp_path / "config.toml").write_text("[budgets]\nnope = 1\n")
    shown, ran = cli(tmp_path, "config", "show"), cli(tmp_path, "run")
    assert shown.exit_code == 2 and shown.output == ran.output


# -- status and logs -----------------------------------------------------------------------------


def test_status_names_the_config_log_and_store(tmp_path):
    report = json.loads(cli(tmp_path, "status", "--json").output)
    assert report["paths"] == {"config": str(tmp_path / "config.toml"), "config_exists": False,
                               "log": str(tmp_path / "log" / "daemon.log"),
                               "store": str(tmp_path / "autoretry.db")}
    text = cli(tmp_path, "status").output
    assert f"config: {tmp_path / 'config.toml'} (not found" in text
    assert f"log: {tmp_path / 'log' / 'daemon.log'}\n" in text
    assert f"store: {tmp_path / 'autoretry.db'}\n" in text


def test_logs_prints_the_last_lines_escaped(tmp_path):
    (tmp_path / "log").mkdir()
    lines = [f"line {n}" for n in range(60)] + ["title \x1b]0;pwned\x07 here"]
    (tmp_path / "log" / "daemon.log").write_text("\n".join(lines) + "\n")
    result = cli(tmp_path, "logs", "-n", "2")
    assert result.exit_code == 0
    assert result.output == "line 59\ntitle \\x1b]0;pwned\\x07 here\n"
    assert len(cli(tmp_path, "logs").output.splitlines()) == 50


def test_logs_follows_new_lines(tmp_path):
    (tmp_path / "log").mkdir()
    log = tmp_path / "log" / "daemon.log"
    log.write_text("old\n")
    command = [sys.executable, "-m", "opencode_autoretry.cli", "logs", "-f", "-n", "1"]
    out = tmp_path / "out.txt"
    with out.open("w") as sink, subprocess.Popen(
            command, env={**os.environ, **env_for(tmp_path)}, stdout=sink) as proc:
        try:
            wait_for("the last line", lambda: "old" in text_of(out))
            with log.open("a") as handle:
                handle.write("new \x1b[2J\n")
            wait_for("the appended line", lambda: "new" in text_of(out))
            proc.send_signal(signal.SIGINT)
            assert proc.wait(timeout=WAIT_S) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
    assert text_of(out) == "old\nnew \\x1b[2J\n"


# -- the pid file, start, stop, restart ------------------------------------------------------------


def test_a_command_line_is_an_autoretry_run_only_when_it_runs_run():
    assert is_autoretry_run(["/v/bin/python", "/v/bin/autoretry", "run"])
    assert is_autoretry_run(["python3", "-m", "opencode_autoretry.cli", "--db", "x", "run"])
    assert not is_autoretry_run(["/v/bin/python", "/v/bin/autoretry", "status"])
    assert not is_autoretry_run(["vim", "run"])
    assert not is_autoretry_run(["python", "opencode_autoretry.cli", "run"])


def test_a_stale_pid_file_is_ignored_and_stop_says_none_runs(tmp_path):
    write_pid_file(tmp_path / "daemon.pid", os.getpid())  # pytest: not an autoretry run
    assert daemon_pid(tmp_path / "daemon.pid") is None
    result = cli(tmp_path, "stop")
    assert (result.exit_code, result.output) == (0, "no daemon running\n")
    assert psutil.pid_exists(os.getpid())


def _kill_left_over(home: Path) -> None:
    pid = daemon_pid(home / "daemon.pid")
    if pid is not None:
        os.kill(pid, signal.SIGKILL)


def test_start_restart_and_stop_a_real_daemon_by_its_pid_file(tmp_path):
    pid_file = tmp_path / "daemon.pid"
    try:
        started = cli(tmp_path, "start")
        assert started.exit_code == 0, started.output
        first = daemon_pid(pid_file)
        assert first is not None and started.output.startswith(f"started the daemon (pid {first})")
        assert is_autoretry_run(psutil.Process(first).cmdline())
        again = cli(tmp_path, "start")
        assert again.output == f"the daemon is already running (pid {first})\n"

        restarted = cli(tmp_path, "restart")
        assert restarted.exit_code == 0, restarted.output
        second = daemon_pid(pid_file)
        assert second is not None and second != first
        assert f"stopped the daemon (pid {first}" in restarted.output
        assert f"started the daemon (pid {second})" in restarted.output
        assert not _alive(first)

        stopped = cli(tmp_path, "stop")
        assert stopped.exit_code == 0, stopped.output
        assert f"stopped the daemon (pid {second}" in stopped.output
        assert not _alive(second)
        assert not pid_file.exists()  # the daemon removed its own file on the way out
        assert "autoretry daemon stopped" in text_of(tmp_path / "log" / "daemon.log")
    finally:
        _kill_left_over(tmp_path)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_start_shows_the_daemons_own_error_when_it_dies(tmp_path):
    (tmp_path / "store.db").mkdir()  # a directory: the daemon cannot open its store
    try:
        result = cli(tmp_path, "start", AUTORETRY_STORE=str(tmp_path / "store.db"))
    finally:
        _kill_left_over(tmp_path)
    assert result.exit_code == 1
    assert "the daemon exited at once (exit status 1)" in result.output
    assert f"cannot open the autoretry store {tmp_path / 'store.db'}" in result.output


# -- SIGHUP ----------------------------------------------------------------------------------------


def test_sighup_restarts_with_a_good_config_and_refuses_a_bad_one(tmp_path):
    log, new_log = tmp_path / "log" / "daemon.log", tmp_path / "log2" / "daemon.log"
    command = [sys.executable, "-m", "opencode_autoretry.cli", "run"]
    with subprocess.Popen(command, env={**os.environ, **env_for(tmp_path)},
                          stderr=subprocess.DEVNULL) as proc:
        try:
            wait_for("the start line", lambda: f"autoretry daemon {proc.pid}" in text_of(log))
            (tmp_path / "config.toml").write_text('poll_interval = "x"\n')
            proc.send_signal(signal.SIGHUP)
            wait_for("the refusal", lambda: "not reloading: bad configuration" in text_of(log))
            assert "poll_interval must be a number" in text_of(log)
            assert proc.poll() is None  # the old daemon goes on

            (tmp_path / "config.toml").write_text(f'log_dir = "{tmp_path / "log2"}"\n')
            proc.send_signal(signal.SIGHUP)
            wait_for("the restarted daemon's start line in the new log dir",
                     lambda: f"autoretry daemon {proc.pid}" in text_of(new_log))
            assert "reloading the configuration (SIGHUP)" in text_of(log)
            assert daemon_pid(tmp_path / "daemon.pid") == proc.pid  # same process, same file
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=WAIT_S) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
    assert "autoretry daemon stopped" in text_of(new_log)


@pytest.mark.parametrize("command", ["start", "stop", "restart", "logs", "config"])
def test_every_lifecycle_command_has_help(tmp_path, command):
    result = cli(tmp_path, command, "--help")
    assert result.exit_code == 0 and "Usage:" in result.output
