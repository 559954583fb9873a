"""Fuzzing every CLI command's arguments (``run`` excepted: it starts the daemon) through click's
CliRunner, in an isolated HOME with a real OpenCode DB and store: the only outcomes are exit 0,
1 (unknown session, doctor's problems) and 2 (bad input), never a traceback."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from fuzzing import FUZZ, report, tried
from hypothesis import given, settings
from hypothesis import strategies as st
from opencode_rows import OpenCodeRows

from opencode_autoretry.cli.main import main

COMMANDS = [["diagnose"], ["timeline"], ["errors"], ["trace"], ["on"], ["off"], ["status"],
            ["bridge", "install"], ["bridge", "uninstall"], ["bridge", "status"], ["bridge"],
            ["doctor"], []]
OPTIONS = ["--json", "--limit", "--session", "--force", "--opencode-config", "--db", "--store",
           "--config", "--help", "--version", "-h", "--verbose", "--", "-", "--limit=-1",
           "--json=1", "--nope"]
WORDS = ["0", "-1", "7", "999999999999999999999999", "1e3", "nan", "", " ", "ses_", "ses_x",
         "swift", "all", "\udcff\udcfe", "\x7f", "../../etc", "a" * 5000, "/dev/null", "."]
TOKENS = st.one_of(st.sampled_from(OPTIONS), st.sampled_from(WORDS),
                   st.text(max_size=10).filter(lambda t: "\x00" not in t))


@pytest.fixture(scope="module", autouse=True)
def _tally() -> Iterator[None]:
    yield
    report("cli")


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("cli")
    rows = OpenCodeRows(root / "opencode.db")
    sid = rows.session("swift-planet")
    rows.assistant(sid, rows.user(sid), finish=None, text="", error={"name": "APIError"})
    rows.commit()
    rows.close()
    (root / "bin").mkdir()
    saved = dict(os.environ)
    os.environ.update({
        "HOME": str(root), "XDG_CONFIG_HOME": str(root / "config"),
        "XDG_DATA_HOME": str(root / "data"), "AUTORETRY_HOME": str(root / "state"),
        "AUTORETRY_SOCKET": str(root / "run" / "d.sock"), "OPENCODE_DB": str(root / "opencode.db"),
        "AUTORETRY_CONFIG": str(root / "config.toml"), "PATH": str(root / "bin"),
        "NO_COLOR": "1",
    })
    yield root
    os.environ.clear()
    os.environ.update(saved)


def invoke(home: Path, argv: list[str]) -> int:
    tried("cli")
    # A fresh working dir: relative paths in the arguments land there, never in the checkout.
    with tempfile.TemporaryDirectory(dir=home) as cwd, contextlib.chdir(cwd):
        result = CliRunner().invoke(main, argv, catch_exceptions=True)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"autoretry {argv!r} crashed") from result.exception
    assert result.exit_code in (0, 1, 2), (argv, result.exit_code, result.output[-500:])
    assert "Traceback" not in result.output
    tried(f"outcome:exit {result.exit_code}")
    return result.exit_code


@settings(FUZZ, max_examples=300)
@given(st.sampled_from(COMMANDS), st.lists(TOKENS, max_size=4))
def test_random_arguments(home: Path, command: list[str], tokens: list[str]) -> None:
    invoke(home, [*command, *tokens])


@settings(FUZZ, max_examples=60)
@given(st.sampled_from(["--db", "--store", "--config"]), st.sampled_from(WORDS + ["x.db"]),
       st.sampled_from(COMMANDS[:7] + [["doctor"]]))
def test_random_global_paths(home: Path, option: str, value: str, command: list[str]) -> None:
    invoke(home, [option, value, *command])


# -- regressions found by fuzzing ------------------------------------------------------------

LONG = "a" * 5000


@pytest.mark.parametrize(("argv", "code"), [
    (["timeline", "\udcff\udcfe"], 2),  # raw non-UTF-8 bytes from the shell
    (["errors", "\udcff"], 2),
    (["trace", "\udcff"], 2),
    (["on", "--session", "\udcff"], 2),
    (["diagnose", "999999999999999999999999"], 2),  # overflowed timedelta
    (["trace", "99999999999"], 2),
    (["trace", "\u00b2"], 1),  # "²".isdigit() is True, int("²") raised: now a session ref
    (["--store", "", "on"], 2),  # the store cannot be opened: one line, not a traceback
    (["--store", "", "status"], 2),
    (["--db", LONG, "diagnose"], 2),  # ENAMETOOLONG
    (["--db", "\udcff\udcfe", "diagnose"], 2),  # the index's key hashed a non-UTF-8 path
    (["--db", "\udcff\udcfe", "doctor"], 1),  # doctor printed the path it could not open
    (["--config", LONG, "status"], 2),
    (["--store", LONG, "trace"], 2),
])
def test_regression_bad_arguments_exit_cleanly(home: Path, argv: list[str], code: int) -> None:
    assert invoke(home, argv) == code
