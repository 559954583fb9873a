"""A report run as the ``autoretry`` console script ends without tearing its heap down
(cli/process_end.py, issue 21), and prints and exits exactly as it did before.

The console script runs in a fresh interpreter with an ``atexit`` hook that writes a marker
to stderr: the hook runs in a normal teardown and not after ``os._exit``. So each report must
print what ``main`` prints (the same JSON), exit with the same code, and leave the marker out;
every other command, a usage error and click's test runner still end as usual.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from seeded_reports import Seeded, closed_seed, process_env

from opencode_autoretry.cli import process_end

TORN_DOWN = "autoretry-test: torn down"
#: The console script (``entry``: console) or click's group as a caller would run it (main),
#: with the hook that says whether the interpreter's teardown ran.
PROBE = f"""
import atexit, sys
atexit.register(lambda: print({TORN_DOWN!r}, file=sys.stderr))
from opencode_autoretry.cli.main import console, main
sys.argv[0] = "autoretry"
entry = sys.argv.pop(1)
if entry == "console":
    console()
else:
    sys.exit(main())
"""


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Seeded:
    """The seeded DB closed (the shared fixture keeps its writer open)."""
    return closed_seed(tmp_path_factory.mktemp("oc"))


def _run(
    seeded: Seeded, home: Path, entry: str, args: Sequence[str]
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", PROBE, entry, "--db", str(seeded.db), "--store", str(seeded.store),
         *args],
        capture_output=True, text=True, timeout=120, env=process_env(home), check=False,
    )


def _without_clock(out: str) -> dict[str, Any]:
    """The report less what the clock moves between two runs a moment apart."""
    report: dict[str, Any] = json.loads(out)
    for moving in ("now", "since"):
        report.pop(moving, None)
    report.get("health", {}).get("daemon", {}).pop("age_seconds", None)
    return report


@pytest.mark.parametrize(
    "args",
    [["diagnose", "0", "--json", "--no-index"], ["diagnose", "--json"], ["trace", "--json"],
     ["errors", "--json"], ["timeline", "brave-otter", "--json"]],
    ids=lambda args: " ".join(args[:2]),
)
def test_a_report_prints_the_same_and_skips_the_teardown(
    seeded: Seeded, tmp_path: Path, args: list[str]
) -> None:
    usual = _run(seeded, tmp_path, "main", args)
    assert usual.returncode == 0, usual.stderr[-2000:]
    assert TORN_DOWN in usual.stderr, "the probe's hook does not show a teardown"
    ended = _run(seeded, tmp_path, "console", args)
    assert ended.returncode == 0, ended.stderr[-2000:]
    assert _without_clock(ended.stdout) == _without_clock(usual.stdout)
    assert ended.stdout.endswith("\n"), "the output was not flushed to its end"
    assert TORN_DOWN not in ended.stderr, f"{args}: the interpreter tore its heap down"


def test_a_failing_report_keeps_its_exit_code_and_message(seeded: Seeded, tmp_path: Path) -> None:
    ended = _run(seeded, tmp_path, "console", ["timeline", "no-such-session"])
    assert ended.returncode == 1
    assert "Error: no session 'no-such-session'" in ended.stderr
    assert TORN_DOWN not in ended.stderr


@pytest.mark.parametrize(
    ("args", "code"),
    [(["diagnose", "often"], 2), (["config", "path"], 0), (["--version"], 0)],
    ids=["usage error", "another command", "version"],
)
def test_anything_else_ends_as_usual(
    seeded: Seeded, tmp_path: Path, args: list[str], code: int
) -> None:
    """A usage error never reaches the report's body; other commands keep their teardown."""
    ended = _run(seeded, tmp_path, "console", args)
    assert ended.returncode == code, ended.stderr[-2000:]
    assert TORN_DOWN in ended.stderr


@pytest.fixture()
def fresh(monkeypatch: pytest.MonkeyPatch) -> process_end._Ending:
    state = process_end._Ending()
    monkeypatch.setattr(process_end, "_ENDING", state)
    return state


def test_outside_the_console_script_nothing_is_kept(fresh: process_end._Ending) -> None:
    """Click's test runner and the daemon's keeper call the reports in a process that goes on."""
    process_end.end_without_teardown()
    process_end.leave("a report")
    assert not process_end.ending_without_teardown()
    assert fresh.kept == []
    process_end.console_started()
    process_end.end_without_teardown()
    process_end.leave("a report", "its rows")
    assert process_end.ending_without_teardown()
    assert fresh.kept == [("a report", "its rows")]


class _Ended(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


class _Gone(io.StringIO):
    def flush(self) -> None:
        raise BrokenPipeError(32, "Broken pipe")


def _exit(status: int) -> None:
    raise _Ended(status)


@pytest.mark.parametrize(
    ("code", "status", "printed"),
    [(None, 0, ""), (0, 0, ""), (2, 2, ""), ("bad config", 1, "bad config\n")],
)
def test_the_exit_status_is_the_one_python_would_give(
    monkeypatch: pytest.MonkeyPatch, code: object, status: int, printed: str
) -> None:
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    monkeypatch.setattr(os, "_exit", _exit)
    with pytest.raises(_Ended) as ended:
        process_end.end_now(code)
    assert ended.value.status == status
    assert err.getvalue() == printed


def test_output_that_cannot_be_flushed_is_not_a_success(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdout", _Gone())
    monkeypatch.setattr(os, "_exit", _exit)
    with pytest.raises(_Ended) as ended:
        process_end.end_now(0)
    assert ended.value.status == 1
    with pytest.raises(_Ended) as failed:
        process_end.end_now(2)
    assert failed.value.status == 2
