"""Tests import their helper modules (daemon_fakes, standin, exhaustive_db, ...) through
pytest's ``pythonpath`` (pyproject.toml), never by editing ``sys.path`` themselves."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
_EDIT = re.compile(r"^\s*sys\.path\.(insert|append)\(", re.MULTILINE)


def test_no_test_file_edits_sys_path() -> None:
    edits = [str(p.relative_to(ROOT)) for p in sorted(TESTS.rglob("*.py"))
             if _EDIT.search(p.read_text())]
    assert edits == [], f"sys.path edited in {edits}: add the folder to pytest's pythonpath"


def test_every_helper_folder_is_on_pytests_pythonpath() -> None:
    options = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]
    on_path = {(ROOT / p).resolve() for p in options["ini_options"]["pythonpath"]}
    helpers = [p for p in TESTS.rglob("*.py")
               if not p.name.startswith("test_") and p.name != "conftest.py"]
    assert helpers, "no helper module found under tests/"
    missing = sorted({str(p.parent.relative_to(ROOT)) for p in helpers if p.parent not in on_path})
    assert missing == [], f"helper modules in {missing} are not on pytest's pythonpath"
