"""`autoretry setup` (issue 24 item 6) without pip: the service files it writes, whose units it
removes, and a configuration the daemon would refuse."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from opencode_autoretry.cli.main import main
from opencode_autoretry.daemon import setup
from opencode_autoretry.plugin_bridge.install import SHIPPED


def env_for(home: Path) -> dict[str, str]:
    return {"HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"),
            "AUTORETRY_HOME": str(home / "state"), "OPENCODE_DB": str(home / "opencode.db"),
            "AUTORETRY_CONFIG": str(home / "config.toml"), "AUTORETRY_SOCKET":
            str(home / "d.sock"), "AUTORETRY_SERVICE": "none", "PATH": "/nonexistent"}


def test_the_unit_runs_the_command_with_the_environment_quoted() -> None:
    text = setup.unit_text(["/home/me/my venv/bin/autoretry", "run"],
                           {"AUTORETRY_CONFIG": '/etc/a "b" 100%.toml'})
    assert text.startswith("# written by opencode-autoretry setup;")
    assert 'ExecStart="/home/me/my venv/bin/autoretry" run\n' in text
    assert 'Environment="AUTORETRY_CONFIG=/etc/a \\"b\\" 100%%.toml"\n' in text
    assert "Restart=on-failure" in text and "WantedBy=default.target" in text


def test_the_agent_is_escaped_xml() -> None:
    text = setup.plist_text(["/Users/me/a&b/autoretry", "run"], {"X": "<y>"},
                            Path("/tmp/log/daemon.stderr"))
    assert "<string>/Users/me/a&amp;b/autoretry</string><string>run</string>" in text
    assert "<key>X</key><string>&lt;y&gt;</string>" in text
    assert "written by opencode-autoretry setup" in text


def test_units_of_install_sh_and_of_setup_are_ours_and_no_one_elses(tmp_path: Path) -> None:
    old = tmp_path / "old.service"
    old.write_text("# written by opencode-autoretry install.sh; ./install.sh --uninstall ...\n")
    new = tmp_path / "new.service"
    new.write_text(setup.unit_text(["autoretry", "run"], {}))
    mine = tmp_path / "mine.service"
    mine.write_text("[Service]\nExecStart=/usr/bin/autoretry run\n")
    assert setup.is_ours(old) and setup.is_ours(new)
    assert not setup.is_ours(mine) and not setup.is_ours(tmp_path / "missing")


def test_uninstall_removes_our_unit_and_keeps_someone_elses(tmp_path: Path) -> None:
    unit = tmp_path / ".config/systemd/user/opencode-autoretry.service"
    unit.parent.mkdir(parents=True)
    unit.write_text(setup.unit_text(["autoretry", "run"], {}))
    runner = CliRunner()
    result = runner.invoke(main, ["setup", "--uninstall"], env=env_for(tmp_path))
    assert result.exit_code == 0, result.output
    assert not unit.exists() and f"removed {unit}" in result.output

    unit.write_text("[Service]\nExecStart=/usr/bin/autoretry run\n")
    result = runner.invoke(main, ["setup", "--uninstall"], env=env_for(tmp_path))
    assert result.exit_code == 0 and unit.exists()
    assert "was not written by autoretry: left as it is" in result.output


def test_a_config_the_daemon_would_refuse_fails_setup_with_its_line(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text('poll_interval = "often"\n')
    result = CliRunner().invoke(main, ["setup"], env=env_for(tmp_path))
    assert result.exit_code == 1, result.output
    assert "the daemon cannot start:" in result.output
    assert "poll_interval must be a number, got 'often'" in result.output
    assert not (tmp_path / "state/daemon.pid").exists()
    # the bridge went in before the refusal (a re-run after the fix starts only the daemon)
    for file in SHIPPED:
        assert file.target(tmp_path / ".config/opencode").is_file()
    assert "OpenCode is not on your PATH" in result.output


def test_a_bad_service_name_is_refused(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["setup"], env={**env_for(tmp_path),
                                                      "AUTORETRY_SERVICE": "cron"})
    assert result.exit_code == 2 and "AUTORETRY_SERVICE=cron is not one of" in result.output
