"""The "the user has the session" gate is written once (issue 18): core/decisions/gates.py.

Every path that would send, abort or switch a model asks it, and no other product module reads
the three live facts it is made of.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from opencode_autoretry.causes import Cause
from opencode_autoretry.decisions.gates import waiting_on_user
from opencode_autoretry.models import LiveFacts

ROOT = Path(__file__).resolve().parent.parent
GATE_FACTS = {"permission_pending", "question_pending", "child_busy"}
GATE = ROOT / "core" / "decisions" / "gates.py"


@pytest.mark.parametrize(
    ("live", "cause"),
    [
        (LiveFacts(permission_pending=True, question_pending=True), Cause.WAITING_PERMISSION),
        (LiveFacts(question_pending=True, child_busy=True), Cause.WAITING_QUESTION),
        (LiveFacts(child_busy=True), Cause.WAITING_CHILD),
        (LiveFacts(retrying=True, busy=True), None),
        (LiveFacts(), None),
    ],
)
def test_the_gate_names_what_the_session_waits_on(live, cause):
    assert waiting_on_user(live) is cause


def readers_of_the_gate_facts() -> list[str]:
    found = []
    for folder in ("core", "daemon", "diagnostics", "plugin_bridge"):
        for file in sorted((ROOT / folder).rglob("*.py")):
            if file == GATE:
                continue
            tree = ast.parse(file.read_text(encoding="utf-8"))
            # A call (``sessions.child_busy(sid)``) makes the fact; only reading one decides.
            calls = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
            for node in ast.walk(tree):
                if isinstance(node, ast.Attribute) and node.attr in GATE_FACTS \
                        and id(node) not in calls:
                    found.append(f"{file.relative_to(ROOT)}:{node.lineno}: .{node.attr}")
    return found


def test_no_other_module_reads_the_gates_facts():
    assert GATE.exists() and "permission_pending" in GATE.read_text()  # the scan sees the gate
    assert readers_of_the_gate_facts() == []
