"""``autoretry bridge status``: one column per field, however long a file's name is."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from opencode_autoretry.cli.main import main


@pytest.fixture()
def status_lines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    monkeypatch.setenv("AUTORETRY_SOCKET", str(tmp_path / "none.sock"))
    monkeypatch.setenv("AUTORETRY_CONFIG", str(tmp_path / "no-config.toml"))
    config = ["--opencode-config", str(tmp_path / "oc")]
    runner = CliRunner()
    assert runner.invoke(main, ["bridge", "install", *config]).exit_code == 0
    result = runner.invoke(main, ["bridge", "status", *config])
    assert result.exit_code == 0, result.output
    return result.output.splitlines()


def test_state_column_starts_at_the_same_offset_on_every_line(status_lines: list[str]) -> None:
    names = [line.split()[0] for line in status_lines[:-1]]
    assert "autoretry/history.js" in names
    width = max(len(n) for n in [*names, "daemon socket"])
    for line in status_lines[:-1]:
        assert line[width] == " " and line[width + 1 :].startswith("current"), line
    assert status_lines[-1].startswith("daemon socket".ljust(width) + " not running")
