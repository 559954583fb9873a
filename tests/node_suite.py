"""Runs the bridge's JavaScript tests (``tests/js/*.test.mjs``) with a given ``node``.

Shared by tests/test_protocol.py (the machine's node) and tests/test_node_versions.py (every
Node version README promises, npm-installed).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).parent.parent


def node_test_files() -> list[str]:
    """The JS test files, named one by one: ``node --test DIR`` means "run DIR/index.js" on Node
    21+ (a directory argument is no longer searched for tests); explicit file names mean the
    same on every version."""
    files = sorted(str(p.relative_to(REPO)) for p in (REPO / "tests" / "js").glob("*.test.mjs"))
    assert files, "no tests/js/*.test.mjs found"
    return files


def node_test_command(node: str, *, coverage: bool = False) -> list[str]:
    """README's form of the command. The TAP reporter is named: it is the default only up to
    Node 22 (23+ print the ``spec`` report even into a pipe), and ``failure`` reads TAP."""
    return [node, "--test", "--test-reporter=tap",
            *(["--experimental-test-coverage"] if coverage else []), *node_test_files()]


def run_node_tests(node: str, *, coverage: bool = False) -> subprocess.CompletedProcess[str]:
    return subprocess.run(node_test_command(node, coverage=coverage), cwd=REPO,
                          capture_output=True, text=True, timeout=300)


def failure(done: subprocess.CompletedProcess[str]) -> str | None:
    """Why the run failed (its output's tail), or None when every test ran and passed."""
    passed = re.search(r"^# pass ([0-9]+)$", done.stdout, re.M)
    failed = re.search(r"^# fail ([0-9]+)$", done.stdout, re.M)
    if done.returncode == 0 and passed and int(passed[1]) > 0 and failed and failed[1] == "0":
        return None
    return (f"exit status {done.returncode}, {passed[0] if passed else 'no pass count'}, "
            f"{failed[0] if failed else 'no fail count'}\n"
            f"--- stdout (tail)\n{done.stdout[-4000:]}\n--- stderr (tail)\n{done.stderr[-2000:]}")
