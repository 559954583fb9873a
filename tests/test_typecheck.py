"""The bridge's JavaScript type-checks: ``tsc --noEmit --checkJs`` over its JSDoc types.

TypeScript is a dev tool only (the bridge ships as plain JS): the exact versions pinned in
``tools/typecheck/package.json`` are npm-installed once into a cache dir outside the repository
(``$AUTORETRY_TYPECHECK_CACHE``, default ``~/.cache/opencode-autoretry-typecheck/<pins>``), as
the e2e suite does for OpenCode. By hand, the same check is::

    npm install --no-audit --no-fund --prefix DIR typescript@5.9.3 @types/node@18.19.130
    DIR/node_modules/.bin/tsc -p plugin_bridge/tsconfig.json --typeRoots DIR/node_modules/@types
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).parent.parent
PINS = REPO / "tools" / "typecheck" / "package.json"


def pinned_packages() -> list[str]:
    pins = json.loads(PINS.read_text())["devDependencies"]
    return [f"{name}@{version}" for name, version in sorted(pins.items())]


def cache_dir() -> Path:
    raw = os.environ.get("AUTORETRY_TYPECHECK_CACHE") or "~/.cache/opencode-autoretry-typecheck"
    key = hashlib.sha256(" ".join(pinned_packages()).encode()).hexdigest()[:12]
    return Path(raw).expanduser() / key  # new pins, new dir: never a stale TypeScript


def install_typescript(npm: str) -> Path:
    """The pinned tsc, installed on first use; xdist workers wait for one install."""
    prefix = cache_dir()
    tsc = prefix / "node_modules" / ".bin" / "tsc"
    prefix.mkdir(parents=True, exist_ok=True)
    with open(prefix.parent / f".{prefix.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not tsc.exists():
            subprocess.run(
                [npm, "install", "--no-audit", "--no-fund", "--prefix", str(prefix),
                 *pinned_packages()],
                check=True, capture_output=True, text=True, timeout=600,
            )
    return tsc


def test_pins_are_exact_versions():
    for package in pinned_packages():
        version = package.rsplit("@", 1)[1]
        assert all(part.isdigit() for part in version.split(".")), package


def test_bridge_javascript_type_checks():
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip("npm is not installed: the bridge's type check needs it (CI installs it)")
    tsc = install_typescript(npm)
    types = tsc.parent.parent / "@types"
    out = subprocess.run(
        [str(tsc), "-p", "plugin_bridge/tsconfig.json", "--typeRoots", str(types)],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )
    assert out.returncode == 0, f"tsc found type errors:\n{out.stdout}{out.stderr}"


def test_every_bridge_file_is_type_checked():
    for js in [REPO / "plugin_bridge" / "autoretry.js",
               *(REPO / "plugin_bridge" / "autoretry").glob("*.js")]:
        assert "// @ts-check" in js.read_text(), f"{js.name} has no // @ts-check"
