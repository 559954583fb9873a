"""One configuration (issue 18): every command refuses the same bad config.toml with the same
line naming the key path, and exit status 2; ``run`` before it starts anything."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from opencode_autoretry.cli.main import main
from opencode_autoretry.config.load import Config, load_config
from opencode_autoretry.config.settings import ConfigError

#: (config.toml text, the key path the line must name): one per table at least, and the
#: hostile numbers that crashed or silently broke the daemon before.
BAD = [
    ("tick_interval = 1e300\n", "tick_interval"),
    ("poll_interval = 1e300\n", "poll_interval"),
    ("poll_interval = nan\n", "poll_interval"),
    ("stall_timeout = -5\n", "stall_timeout"),
    ("runaway_steps = \"six\"\n", "runaway_steps"),
    ("tick_interval = true\n", "tick_interval"),
    ("pol_interval = 3\n", "pol_interval"),
    ("[stall]\nsubagents = \"yes\"\n", "stall.subagents"),
    ("[budgets.server]\nmax_retries = -1\n", "budgets.server.max_retries"),
    ("[providers.x.budgets.server]\ninitial_delay = nan\n",
     "providers.x.budgets.server.initial_delay"),
    ("[messages]\nblank = 5\n", "messages.blank"),
    ("[repetition.penalties.p]\nfrequency_penalty = 9\n",
     "repetition.penalties.p.frequency_penalty"),
    ("[repetition]\npenalty = 1\n", "repetition"),
    ("[todos]\ncountdown = -1\n", "todos.countdown"),
    ("[todos]\ncountdwn = 5\n", "countdwn"),
    ("[notify]\nwebhook = \"http://127.0.0.1:99999/h\"\n", "notify.webhook"),
    ("[notify]\ntimeout = nan\n", "notify.timeout"),
    ("[notify]\ndesktp = true\n", "desktp"),
    ("[notify]\nmax_per_hour = 1.5\n", "notify.max_per_hour"),
    ("[fallback]\n\"a/b\" = \"c/d\"\n", 'fallback."a/b"'),
    ("[fallback]\n\"*\" = [\"nomodel\"]\n", 'fallback."*"[0]'),
    ("[budgets]\ntodos = {max_retries = 5}\n", "budgets.todos"),
]


@pytest.fixture
def env(tmp_path: Path) -> Iterator[dict[str, str]]:
    """An isolated home; the root logger and umask as they were (``run`` sets both)."""
    handlers = list(logging.getLogger().handlers)
    umask = os.umask(0o022)
    os.umask(umask)
    yield {
        "AUTORETRY_CONFIG": str(tmp_path / "config.toml"),
        "AUTORETRY_HOME": str(tmp_path / "state"),
        "AUTORETRY_SOCKET": str(tmp_path / "run" / "d.sock"),
        "XDG_CONFIG_HOME": str(tmp_path / "xdg"),
        "OPENCODE_DB": str(tmp_path / "none.db"),
        "PATH": str(tmp_path),
    }
    for handler in logging.getLogger().handlers:
        if handler not in handlers:
            logging.getLogger().removeHandler(handler)
            handler.close()
    os.umask(umask)


def invoke(env: dict[str, str], *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args), env=env)
    return result.exit_code, result.output


def error_line(output: str) -> str:
    lines = [line for line in output.splitlines() if line.startswith("Error: ")]
    assert len(lines) == 1, output
    return lines[0].removeprefix("Error: ")


@pytest.mark.parametrize(("text", "key"), BAD, ids=[k for _, k in BAD])
def test_doctor_and_run_refuse_a_bad_config_with_the_same_line(
    env: dict[str, str], text: str, key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    Path(env["AUTORETRY_CONFIG"]).write_text(text)
    started: list[object] = []
    monkeypatch.setattr("opencode_autoretry.daemon.commands.serve", started.append)
    code, output = invoke(env, "run")
    line = error_line(output)
    assert code == 2 and key in line and env["AUTORETRY_CONFIG"] in line, output
    assert started == [] and not Path(env["AUTORETRY_SOCKET"]).exists()  # nothing started
    assert not (Path(env["AUTORETRY_HOME"]) / "autoretry.db").exists()
    log = (Path(env["AUTORETRY_HOME"]) / "log" / "daemon.log").read_text()
    assert f"bad configuration: {line}" in log  # where a background start leaves its reason

    code, output = invoke(env, "doctor", "--json")
    config = next(c for c in json.loads(output)["checks"] if c["name"] == "config")
    assert code == 2 and config["status"] == "fail" and config["detail"] == line


@pytest.mark.parametrize("command", [["status"], ["notify", "test"],
                                     ["exec", "--", "opencode", "run", "hi"], ["run"],
                                     ["doctor"]])
def test_every_command_exits_2_for_a_bad_config(env: dict[str, str], command: list[str]) -> None:
    Path(env["AUTORETRY_CONFIG"]).write_text("[notify]\ntiemout = 5\n")
    code, output = invoke(env, *command)
    assert code == 2, output
    assert "notify: unknown key 'tiemout'" in output


def test_a_good_config_is_one_frozen_object_with_every_table(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text(
        "tick_interval = 0.5\n[stall]\nsubagents = false\n[budgets.blank]\nmax_retries = 1\n"
        "[todos]\ncountdown = 2\n[notify]\nwebhook = \"http://127.0.0.1:8080/h\"\n"
        "[fallback]\n\"a/b\" = [\"c/d\"]\n[repetition.penalties.p]\npresence_penalty = 1\n"
    )
    config = load_config({}, environ={}, config_path=path, opencode_config_dir=tmp_path)
    assert isinstance(config, Config)
    assert config.settings.tick_interval == 0.5 and not config.settings.stall_subagents
    assert config.todos.countdown == 2.0 and config.notify.webhook == "http://127.0.0.1:8080/h"
    assert config.fallback.chain_for("a/b") == ("c/d",)
    assert config.penalties == {"p": {"presence_penalty": 1.0}}
    from opencode_autoretry.models import BudgetGroup

    assert config.policy.budgets[BudgetGroup.BLANK].max_retries == 1
    assert config.policy.budgets[BudgetGroup.TODOS].initial_delay == 2.0  # [todos] budget
    with pytest.raises(AttributeError):
        config.todos = config.todos  # type: ignore[misc]


def test_a_control_character_in_a_key_is_escaped_in_the_line(env: dict[str, str]) -> None:
    Path(env["AUTORETRY_CONFIG"]).write_text('[notify]\n"\\u001b[2Jx" = 1\n')
    code, output = invoke(env, "doctor")
    assert code == 2 and "\x1b" not in output and "\\x1b[2Jx" in output, output


def test_the_boundaries_of_the_ranges_are_accepted(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    for text in ("tick_interval = 0.05\npoll_interval = 3600\nstall_timeout = 1\n",
                 "tick_interval = 60\npoll_interval = 0.1\nrunaway_steps = 1000\n",
                 "[notify]\nwebhook = \"https://127.0.0.1:65535/h\"\n"):
        path.write_text(text)
        load_config({}, environ={}, config_path=path, opencode_config_dir=tmp_path)
    path.write_text("[notify]\nwebhook = \"https://127.0.0.1:0/h\"\n")
    with pytest.raises(ConfigError, match="notify.webhook must have a port from 1 to 65535"):
        load_config({}, environ={}, config_path=path, opencode_config_dir=tmp_path)
