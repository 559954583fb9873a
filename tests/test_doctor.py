"""``autoretry doctor``: every check against fakes (tmp dirs, a fake machine, fake heartbeats)."""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner
from opencode_rows import OpenCodeRows

from opencode_autoretry import package_version
from opencode_autoretry.cli.main import main
from opencode_autoretry.config.settings import Settings
from opencode_autoretry.diagnostics.doctor.checks import Status, Subject
from opencode_autoretry.diagnostics.doctor.machine import (
    Machine,
    ProcessInfo,
    is_opencode,
)
from opencode_autoretry.diagnostics.doctor.report import (
    doctor_json,
    render_doctor,
    run_checks,
    summary_line,
)
from opencode_autoretry.plugin_bridge import install as installer
from opencode_autoretry.store.database import Heartbeat

NOW = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
DAEMON_PID = 5151
OPENCODE_PID = 6161
VERSION = package_version()


class World:
    """A healthy machine in a tmp dir; each test breaks one thing."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.config = tmp / "opencode-config"
        installer.install(self.config)
        rows = OpenCodeRows(tmp / "opencode.db")
        rows.commit()
        rows.conn.close()
        state = tmp / "state"
        state.mkdir(mode=0o700)
        (state / "log").mkdir(mode=0o700)
        run = tmp / "run"
        run.mkdir(mode=0o700)
        self.settings = replace(Settings(), opencode_db=tmp / "opencode.db",
                                store=state / "autoretry.db", socket=run / "daemon.sock",
                                log_dir=state / "log")
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(self.settings.socket))
        os.chmod(self.settings.socket, 0o600)
        self.listener.listen(4)
        self.info: dict = {
            "started": NOW.isoformat(), "stopping": False,
            "bridges": [{"conn": "b1", "pid": OPENCODE_PID, "opencode": "1.18.33",
                         "bridge": VERSION}],
            "lines": {"lines": 12, "garbage": 0, "oversize": 0, "unknown": 0, "partial": 0,
                      "rejected": 0},
        }
        self.beat_at = NOW - timedelta(seconds=3)
        self.alive = {DAEMON_PID, OPENCODE_PID}
        self.procs = [ProcessInfo(OPENCODE_PID, 1, ("opencode",))]
        self.commands: dict[str, tuple[int, str]] = {"opencode": (0, "1.18.33")}
        self.settings_error: str | None = None

    def run(self, argv: list[str], timeout: float) -> tuple[int, str]:
        return self.commands.get(Path(argv[0]).name, (127, "not found"))

    def machine(self, **changes: object) -> Machine:
        base = Machine(which=lambda name: f"/usr/bin/{name}", run=self.run,
                       processes=lambda: list(self.procs), pid_alive=lambda p: p in self.alive,
                       now=lambda: NOW, uid=os.geteuid(), platform="linux", version=VERSION)
        return replace(base, **changes)

    def subject(self, heartbeat: bool = True) -> Subject:
        beat = Heartbeat(self.beat_at, DAEMON_PID, self.info) if heartbeat else None
        return Subject(self.settings, self.settings_error, self.config, None, beat, None)

    def checks(self, heartbeat: bool = True, **machine: object) -> dict[str, tuple[Status, str]]:
        found = run_checks(self.subject(heartbeat), self.machine(**machine))
        return {c.name: (c.status, c.detail + " | " + (c.fix or "")) for c in found}


@pytest.fixture()
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg-config"))  # no service unit
    w = World(tmp_path)
    yield w
    w.listener.close()


def statuses(checks: dict[str, tuple[Status, str]]) -> dict[str, Status]:
    return {name: status for name, (status, _) in checks.items()}


def test_a_healthy_machine_passes_every_check(world: World) -> None:
    checks = world.checks()
    assert set(statuses(checks).values()) == {Status.OK}, checks
    assert "detached" in checks["service"][1]
    found = run_checks(world.subject(), world.machine())
    assert summary_line(found) == f"autoretry doctor: all {len(found)} checks passed"


def test_no_heartbeat_fails_the_daemon_and_bridges_with_a_fix(world: World) -> None:
    checks = world.checks(heartbeat=False)
    assert checks["daemon"][0] is Status.FAIL
    assert "autoretry run" in checks["daemon"][1]
    assert checks["bridges"][0] is Status.FAIL
    assert checks["service"][0] is Status.WARN  # no unit and no daemon


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"beat_at": NOW - timedelta(seconds=45)}, "hung"),
        ({"alive": {OPENCODE_PID}}, "crashed"),
        ({"info": {"stopping": True}}, "stopped"),
    ],
)
def test_a_stale_dead_or_stopped_daemon_fails(world: World, change: dict, needle: str) -> None:
    for name, value in change.items():
        setattr(world, name, value)
    status, text = world.checks()["daemon"]
    assert status is Status.FAIL
    assert needle in text


def test_an_untested_opencode_version_is_a_warning_not_a_failure(world: World) -> None:
    world.commands["opencode"] = (0, "1.15.13")
    world.info["bridges"][0]["opencode"] = "1.15.13"
    status, text = world.checks()["opencode"]
    assert status is Status.WARN
    assert "outside the tested range" in text and "1.18.33" in text


def test_no_opencode_anywhere_fails(world: World) -> None:
    checks = world.checks(heartbeat=False, which=lambda name: None)
    assert checks["opencode"][0] is Status.FAIL
    assert "--opencode PATH" in checks["opencode"][1]


def test_opencode_off_path_is_found_through_the_bridges(world: World) -> None:
    status, text = world.checks(which=lambda name: None)["opencode"]
    assert status is Status.OK
    assert "1.18.33" in text and "not on PATH" in text


def test_diagnose_mode_never_runs_the_binary(world: World) -> None:
    world.commands.clear()  # any run would answer 127
    assert world.checks(run_binary=False)["opencode"][0] is Status.OK


def test_an_unreadable_opencode_db_fails(world: World) -> None:
    world.settings = replace(world.settings, opencode_db=world.tmp / "missing.db")
    status, text = world.checks()["opencode db"]
    assert status is Status.FAIL
    assert "OPENCODE_DB" in text


def test_a_missing_or_outdated_bridge_fails_and_an_edited_command_warns(world: World) -> None:
    plugin = installer.PLUGIN.target(world.config)
    plugin.write_bytes(installer.PLUGIN_SIGNATURE + b"\n// an older release\n")
    installer.COMMAND.target(world.config).write_text("my own /autoretry\n")
    installer.HELPERS[0].target(world.config).unlink()
    checks = world.checks()
    assert checks["bridge"][0] is Status.FAIL
    assert "plugins/autoretry.js from another release" in checks["bridge"][1]
    assert f"{installer.HELPERS[0].name} missing" in checks["bridge"][1]
    assert "autoretry bridge install" in checks["bridge"][1]
    assert checks["/autoretry"][0] is Status.WARN


def test_a_missing_command_file_fails(world: World) -> None:
    installer.COMMAND.target(world.config).unlink()
    assert world.checks()["/autoretry"][0] is Status.FAIL


def test_opencode_without_a_bridge_and_old_bridges_warn(world: World) -> None:
    world.procs.append(ProcessInfo(7171, 1, ("/opt/opencode", "serve")))
    status, text = world.checks()["bridges"]
    assert status is Status.WARN and "7171" in text
    world.procs.pop()
    world.info["bridges"][0]["bridge"] = "0.0.9"
    status, text = world.checks()["bridges"]
    assert status is Status.WARN and "older bridge" in text


def test_dropped_bridge_lines_warn_with_their_counts(world: World) -> None:
    world.info["lines"].update(garbage=3, rejected=1)
    status, text = world.checks()["bridge lines"]
    assert status is Status.WARN
    assert "garbage 3" in text and "rejected 1" in text


def test_socket_permissions_and_owner(world: World) -> None:
    os.chmod(world.settings.socket.parent, 0o755)
    status, text = world.checks()["socket"]
    assert status is Status.FAIL and "0755" in text
    os.chmod(world.settings.socket.parent, 0o700)
    assert world.checks()["socket"][0] is Status.OK
    status, text = world.checks(uid=os.geteuid() + 1)["socket"]
    assert status is Status.FAIL and "belongs to uid" in text


def test_a_socket_nobody_listens_on_fails(world: World) -> None:
    world.listener.close()
    status, text = world.checks()["socket"]
    assert status is Status.FAIL and "nothing listens" in text
    world.settings.socket.unlink()
    assert "does not exist" in world.checks()["socket"][1]


def test_open_state_files_fail(world: World) -> None:
    world.settings.store.write_bytes(b"")
    os.chmod(world.settings.store, 0o644)
    status, text = world.checks()["state files"]
    assert status is Status.FAIL and "0644" in text and "chmod" in text


def test_a_bad_config_fails_with_the_key(world: World) -> None:
    world.settings = replace(world.settings, policy={"budgets": {"server": {"max_retries": -1}}})
    status, text = world.checks()["config"]
    assert status is Status.FAIL and "budgets.server.max_retries" in text
    world.settings = replace(world.settings, policy={},
                             repetition={"penalties": {"x": {"frequency_penalty": 9}}})
    assert world.checks()["config"][0] is Status.FAIL


def test_a_systemd_unit_is_checked(world: World, tmp_path: Path) -> None:
    unit = tmp_path / "xdg-config" / "systemd" / "user" / "opencode-autoretry.service"
    unit.parent.mkdir(parents=True)
    unit.write_text("[Service]\n")
    world.commands["systemctl"] = (3, "inactive")
    status, text = world.checks()["service"]
    assert status is Status.FAIL and "systemctl --user restart" in text
    world.commands["systemctl"] = (0, "active")
    assert world.checks()["service"][0] is Status.OK


def test_json_and_text_reports(world: World) -> None:
    world.info["lines"]["garbage"] = 1
    found = run_checks(world.subject(), world.machine())
    body = doctor_json(found)
    assert (body["report"], body["version"], body["ok"]) == ("doctor", 1, True)
    assert body["counts"] == {"ok": len(found) - 1, "warn": 1, "fail": 0}
    assert {c["name"] for c in body["checks"]} >= {"daemon", "socket", "bridge"}
    text = render_doctor(found)
    assert "fix: see daemon.log" in text
    assert text.splitlines()[-1] == summary_line(found)
    assert "1 warning (bridge lines)" in summary_line(found)


def test_is_opencode_skips_commands_that_load_no_plugin() -> None:
    assert is_opencode(("/x/opencode",), "opencode")
    assert is_opencode(("opencode.exe", "serve", "--port", "0"), "")
    assert not is_opencode(("opencode", "--version"), "opencode")
    assert not is_opencode(("/usr/bin/python", "opencode"), "python")


def test_cli_exits_1_with_json_on_a_fresh_machine(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("AUTORETRY_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("AUTORETRY_SOCKET", str(tmp_path / "run" / "d.sock"))
    monkeypatch.setenv("AUTORETRY_CONFIG", str(tmp_path / "none.toml"))
    monkeypatch.setenv("PATH", str(tmp_path))  # no opencode, no systemctl
    result = CliRunner().invoke(main, ["--db", str(tmp_path / "none.db"), "doctor", "--json"])
    assert result.exit_code == 1, result.output
    body = json.loads(result.output)
    assert body["report"] == "doctor" and not body["ok"]
    fails = {c["name"] for c in body["checks"] if c["status"] == "fail"}
    assert {"opencode", "opencode db", "bridge", "daemon", "socket"} <= fails
    assert all(c["fix"] for c in body["checks"] if c["status"] != "ok")


def test_cli_reports_a_broken_config_and_still_runs_the_rest(tmp_path: Path, monkeypatch) -> None:
    config = tmp_path / "config.toml"
    config.write_text("poll_interval = -5\n")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("AUTORETRY_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("PATH", str(tmp_path))
    result = CliRunner().invoke(main, ["--config", str(config), "doctor"])
    assert result.exit_code == 2  # a bad config: 2, as every command (issue 18; was 1)
    assert "FAIL  config" in result.output and "poll_interval" in result.output
    assert "opencode db" in result.output


def test_what_the_bridges_dropped_is_reported_too(world: World) -> None:
    world.info["bridges"][0].update(dropped=12, unknown=2)
    status, text = world.checks()["bridge lines"]
    assert status is Status.WARN
    assert "bridge events 12" in text and "bridge bad lines 2" in text


def test_diagnose_prints_doctors_summary_first(tmp_path: Path, monkeypatch) -> None:
    rows = OpenCodeRows(tmp_path / "opencode.db")
    rows.commit()
    rows.conn.close()
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("AUTORETRY_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("AUTORETRY_CONFIG", str(tmp_path / "none.toml"))
    monkeypatch.setenv("PATH", str(tmp_path))
    result = CliRunner().invoke(main, ["--db", str(tmp_path / "opencode.db"), "diagnose"])
    assert result.exit_code == 0, result.output
    first = result.output.splitlines()[0]
    assert first.startswith("autoretry doctor: ") and "problem" in first
    body = CliRunner().invoke(main, ["--db", str(tmp_path / "opencode.db"), "diagnose", "--json"])
    assert json.loads(body.output)["report"] == "diagnose"  # the JSON is unchanged


def test_telemetry_is_checked_only_when_configured(world: World) -> None:
    assert "telemetry" not in world.checks()
    world.settings = replace(world.settings, telemetry={
        "otlp_endpoint": "http://127.0.0.1:4318/token/s3cret"})
    checks = world.checks()
    assert checks["telemetry"][0] is Status.OK
    assert "exporting to http://127.0.0.1:4318/… every 60 s" in checks["telemetry"][1]
    checks = world.checks(module_found=lambda name: name != "opentelemetry.sdk")
    assert checks["telemetry"][0] is Status.WARN
    assert "opentelemetry.sdk is not installed: nothing is exported" in checks["telemetry"][1]
    assert "s3cret" not in repr(checks)
