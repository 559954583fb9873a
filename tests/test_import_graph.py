"""No import cycles inside the package: modules form layers, each importing only below itself.

The graph is built from the source tree named in pyproject.toml (not from the installed link
tree, which misses a module added since the last install), from every import — including
``if TYPE_CHECKING:`` ones, since a type-only cycle is still a cycle in the design, and imports
inside functions, which only defer the same dependency to the first call.

The rooms form layers, and nothing imports upward, not even inside a function: the package's
own modules (pure core, configuration, store, OpenCode adapter, CLI context) at the bottom, then
the bridge's Python half, then the reports (``diagnostics``), then the daemon (which runs the
report index's keeper), and the CLI's composition root (``cli.main``) on top.
"""

from __future__ import annotations

import ast
import graphlib
import importlib.util
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def package_modules(root: Path) -> dict[str, Path]:
    """Every module of the packages pyproject.toml lists, by dotted name, to its source file."""
    setuptools = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    dirs: dict[str, Path] = {}
    for package in sorted(setuptools["packages"], key=lambda p: p.count(".")):
        mapped = setuptools.get("package-dir", {}).get(package)
        parent, _, leaf = package.rpartition(".")
        dirs[package] = root / mapped if mapped else dirs[parent] / leaf
    modules: dict[str, Path] = {}
    for package, folder in dirs.items():
        for file in sorted(folder.glob("*.py")):
            name = package if file.stem == "__init__" else f"{package}.{file.stem}"
            modules[name] = file
    return modules


class _Imports(ast.NodeVisitor):
    """Collects the modules named by every import of a module, inside functions too."""

    def __init__(self, module: str, is_package: bool) -> None:
        self.package = module if is_package else module.rpartition(".")[0]
        self.names: set[str] = set()

    def visit_Import(self, node: ast.Import) -> None:
        self.names.update(alias.name for alias in node.names)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        base = node.module or ""
        if node.level:
            anchor = self.package.rsplit(".", node.level - 1)[0] if node.level > 1 else self.package
            base = f"{anchor}.{base}" if base else anchor
        self.names.add(base)
        self.names.update(f"{base}.{alias.name}" for alias in node.names)


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the package modules it imports, anywhere in it (parents of a dotted name too:
    importing ``a.b.c`` runs ``a/__init__`` and ``a/b/__init__`` first)."""
    graph: dict[str, set[str]] = {}
    for name, file in modules.items():
        visitor = _Imports(name, file.stem == "__init__")
        visitor.visit(ast.parse(file.read_text(), filename=str(file)))
        targets = set()
        for imported in visitor.names:
            parts = imported.split(".")
            targets.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
        graph[name] = {t for t in targets if t in modules and t != name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    try:
        tuple(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as exc:
        return list(exc.args[1])
    return None


def test_the_package_has_no_import_cycle() -> None:
    modules = package_modules(ROOT)
    graph = import_graph(modules)
    assert len(modules) > 40, sorted(modules)  # the walk found the grafted packages
    assert "opencode_autoretry.daemon.control" in graph["opencode_autoretry.daemon.loop"]
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_every_source_module_is_installed() -> None:
    """The strict editable install links the files that existed when it ran: a module added
    since is missing at run time and to mypy until the install is re-run."""
    missing = [m for m in package_modules(ROOT) if importlib.util.find_spec(m) is None]
    assert missing == [], (
        f"not installed: {missing}; re-run "
        "`.venv/bin/pip install -e '.[dev]' --config-settings editable_mode=strict`"
    )


def _write(root: Path, files: dict[str, str]) -> None:
    (root / "pyproject.toml").write_text(
        '[tool.setuptools]\npackages = ["pkg", "pkg.sub"]\n'
        '[tool.setuptools.package-dir]\n"pkg" = "core"\n"pkg.sub" = "sub"\n'
    )
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)


@pytest.mark.parametrize(
    "b_source",
    [
        "from pkg.a import x\n",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import a\n",
        "from . import a\n",
    ],
)
def test_a_cycle_through_the_grafted_package_is_found(tmp_path: Path, b_source: str) -> None:
    _write(tmp_path, {
        "core/__init__.py": "", "core/a.py": "import pkg.sub.b\nx = 1\n",
        "sub/__init__.py": "", "sub/b.py": b_source.replace("from . import", "from .. import"),
    })
    cycle = find_cycle(import_graph(package_modules(tmp_path)))
    assert cycle is not None and set(cycle) >= {"pkg.a", "pkg.sub.b"}


def test_an_import_inside_a_function_is_a_cycle_too(tmp_path: Path) -> None:
    _write(tmp_path, {
        "core/__init__.py": "", "core/a.py": "import pkg.sub.b\n",
        "sub/__init__.py": "", "sub/b.py": "def run() -> None:\n    from pkg import a\n",
    })
    cycle = find_cycle(import_graph(package_modules(tmp_path)))
    assert cycle is not None and set(cycle) >= {"pkg.a", "pkg.sub.b"}


#: Bottom to top; a module belongs to the first room whose prefix it has (the package's own
#: modules, the bottom layer, have none of these).
LAYERS = (
    "opencode_autoretry.plugin_bridge",
    "opencode_autoretry.diagnostics",
    "opencode_autoretry.daemon",
    "opencode_autoretry.cli.main",
    "opencode_autoretry.cli.__main__",
)


def layer(module: str) -> int:
    for rank, prefix in enumerate(LAYERS, start=1):
        if module == prefix or module.startswith(prefix + "."):
            return rank
    return 0


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    return sorted(
        f"{module} -> {target}"
        for module, targets in graph.items()
        for target in targets
        if layer(target) > layer(module)
    )


def test_nothing_imports_upward() -> None:
    graph = import_graph(package_modules(ROOT))
    # The good direction is seen: the daemon runs the reports' index keeper, the CLI everything.
    keeper = "opencode_autoretry.diagnostics.index.keeper"
    assert keeper in graph["opencode_autoretry.daemon.commands"]
    assert "opencode_autoretry.daemon.commands" in graph["opencode_autoretry.cli.main"]
    assert upward_imports(graph) == []


def test_an_upward_import_inside_a_function_is_found() -> None:
    graph = {"opencode_autoretry.decisions.budget": {"opencode_autoretry.daemon.loop"}}
    assert upward_imports(graph) == [
        "opencode_autoretry.decisions.budget -> opencode_autoretry.daemon.loop"
    ]


def test_the_readme_layout_names_every_room() -> None:
    """The layout tree of docs/development.md (it was README's) has a line for each package
    folder (a new room is drawn)."""
    text = (ROOT / "docs" / "development.md").read_text(encoding="utf-8")
    tree = text.split("## Layout", 1)[1].split("```", 2)[1]
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    for package in setuptools["packages"]:
        leaf = package.rpartition(".")[2]
        if package == "opencode_autoretry":
            continue
        assert f"{leaf}/" in tree, f"docs/development.md's layout tree does not show {package}"
