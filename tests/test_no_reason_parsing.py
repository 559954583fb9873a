"""No product module reads a decision's reason text back (issue 18): code reads ``cause`` and
``facts``; the reason is only rendered for people. The one exception is the mapping of rows
written by older releases (``store/legacy_reasons.py``, used by migration 5)."""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PRODUCT = ("core", "daemon", "diagnostics", "plugin_bridge")
#: The only module allowed to read reason text: it types the rows of older releases, once.
ALLOWED = {"core/store/legacy_reasons.py"}
#: Lines that compare a ``reason`` that is not a decision's (file, the line's code).
NOT_DECISIONS = {
    ("daemon/intake/bridges.py", 'exc.reason == "too_long"'),  # a protocol error's code
}
#: The grep of issue 18, as a regex over each source line.
PATTERN = re.compile(
    r"reason\.(replace|startswith|endswith|split)|in [a-z_.]*\.reason\b"
    r"|\.(search|match)\([a-z_.]*reason"
)
_TEXT_METHODS = {"replace", "startswith", "endswith", "split", "partition", "rpartition",
                 "find", "index", "count", "rsplit", "strip"}
_REGEX_METHODS = {"search", "match", "fullmatch", "findall", "finditer", "sub", "split"}


def _product_files() -> list[Path]:
    return sorted(p for top in PRODUCT for p in (ROOT / top).rglob("*.py"))


def _names_reason(node: ast.AST) -> bool:
    """``x.reason`` or a plain ``reason``/``*_reason`` variable."""
    if isinstance(node, ast.Attribute):
        return node.attr == "reason"
    return isinstance(node, ast.Name) and (node.id == "reason" or node.id.endswith("_reason"))


def _reads_reason(node: ast.AST) -> bool:
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        method = node.func.attr
        if method in _TEXT_METHODS and _names_reason(node.func.value):
            return True  # reason.replace(...), decision.reason.startswith(...)
        if method in _REGEX_METHODS and any(_names_reason(a) for a in node.args):
            return True  # PATTERN.search(decision.reason)
    if isinstance(node, ast.Compare):
        sides = [node.left, *node.comparators]
        ops = node.ops
        for op, right in zip(ops, sides[1:], strict=True):
            if isinstance(op, ast.In | ast.NotIn) and _names_reason(right):
                return True  # "usage limit" in verdict.reason
        if any(isinstance(op, ast.Eq | ast.NotEq) for op in ops) and any(
                isinstance(s, ast.Attribute) and s.attr == "reason" for s in sides) and any(
                isinstance(s, ast.Constant | ast.Name) and not _names_reason(s) for s in sides):
            return True  # decision.reason == TERMINAL_SKIP_REASON
    return False


def offences(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    name = str(path.relative_to(ROOT))
    numbers = {n.lineno for n in ast.walk(ast.parse(text, filename=str(path))) if _reads_reason(n)}
    numbers |= {i for i, line in enumerate(lines, start=1) if PATTERN.search(line)}
    return [f"{name}:{i}: {lines[i - 1].strip()}" for i in sorted(numbers)
            if not any(f == name and code in lines[i - 1] for f, code in NOT_DECISIONS)]


def test_no_product_module_parses_a_reason() -> None:
    files = _product_files()
    assert len(files) > 100, "the scan must see the product's modules"
    found = [o for p in files if str(p.relative_to(ROOT)) not in ALLOWED for o in offences(p)]
    assert found == [], f"reason text parsed (read cause/facts instead): {found}"


def test_the_scan_catches_what_the_old_code_did(tmp_path: Path) -> None:
    """The patterns removed in issue 18 are caught (the scan can fail)."""
    samples = {
        "a.py": 'x = d.reason.replace("abort_then_inject", "inject")\n',
        "b.py": 'ok = any(r in decision.reason for r in ("no live owner",))\n',
        "c.py": 'ok = NO_OWNER.search(d.reason)\n',
        "d.py": 'ok = decision.reason == TERMINAL_SKIP_REASON\n',
        "e.py": 'ok = "usage limit" in verdict.reason\n',
        "f.py": 'found = _SWITCH.search(decision_reason)\n',
    }
    for name, text in samples.items():
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        assert _offences_anywhere(path), name
    legacy = ROOT / "core/store/legacy_reasons.py"
    assert offences(legacy), "the allowed exception does read reasons (else drop it from ALLOWED)"


def _offences_anywhere(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [str(n.lineno) for n in ast.walk(tree) if _reads_reason(n)] + [
        line for line in path.read_text(encoding="utf-8").splitlines() if PATTERN.search(line)]


def test_the_issue_grep_prints_nothing_but_the_migration_mapping() -> None:
    result = subprocess.run(
        ["git", "grep", "-n", "-E",
         r"reason\.(replace|startswith|endswith|split)|in [a-z_.]*\.reason\b"
         r"|\.(search|match)\([a-z_.]*reason", "--", "*.py", ":!tests"],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )
    files = {line.split(":", 1)[0] for line in result.stdout.splitlines()}
    assert files <= ALLOWED, result.stdout
