"""Runs the real OpenCode for the e2e suite, isolated and on 127.0.0.1 only: the pinned
1.18.33, or the version ``$AUTORETRY_E2E_OPENCODE_VERSION`` names (e.g. ``1.17.11``).

- ``ensure_opencode()``: the binary, npm-installed into a cache dir outside the repository
  (``$AUTORETRY_E2E_CACHE``, default ``~/.cache/opencode-autoretry-e2e``) when missing;
  ``$AUTORETRY_E2E_OPENCODE`` names a binary explicitly.
- ``prepare_home(root, provider_url)``: HOME + XDG dirs, ``opencode.json`` pointing at the fake
  provider, the bridge installed with the real installer.
- ``OpenCodeServer.start(...)``: ``opencode serve --port 0 --hostname 127.0.0.1``; JSON helpers
  for sessions, prompts, commands, abort; ``events`` is an ``EventLog`` fed by ``/event``.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import platform
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opencode_autoretry.plugin_bridge import install

OPENCODE_VERSION = "1.18.33"  # the pinned latest; ``wanted_version()`` may ask for another
LISTENING = "opencode server listening on "


def cache_dir() -> Path:
    raw = os.environ.get("AUTORETRY_E2E_CACHE") or "~/.cache/opencode-autoretry-e2e"
    return Path(raw).expanduser()


def wanted_version() -> str:
    """``$AUTORETRY_E2E_OPENCODE_VERSION`` (e.g. ``1.17.11``), else the pinned latest."""
    return os.environ.get("AUTORETRY_E2E_OPENCODE_VERSION") or OPENCODE_VERSION


def platform_package() -> str:
    """npm's name for OpenCode's prebuilt binary on this machine (``opencode-linux-x64``)."""
    system = {"Linux": "linux", "Darwin": "darwin"}.get(platform.system(), "windows")
    machine = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64"}.get(
        platform.machine().lower(), platform.machine().lower()
    )
    return f"opencode-{system}-{machine}"


def _npm_install(prefix: Path, package: str) -> None:
    prefix.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["npm", "install", "--no-audit", "--no-fund", "--prefix", str(prefix), package],
        check=True,
        capture_output=True,
        timeout=600,
    )


def installed_binary(version: str) -> Path:
    """Where ``ensure_opencode`` keeps ``version``. The pinned one comes from ``opencode-ai``
    (its launcher + optional platform package); an older one from the platform package alone,
    in ``opencode-VERSION/`` of the cache: ``opencode-ai@1.17.20`` does not install here,
    because the registry lacks its optional platform packages (issue 11)."""
    if version == OPENCODE_VERSION:
        return cache_dir() / "node_modules" / ".bin" / "opencode"
    package = cache_dir() / f"opencode-{version}" / "node_modules" / platform_package()
    return package / "bin" / "opencode"


def install_opencode(version: str) -> Path:
    binary = installed_binary(version)
    # The suite runs on two pytest-xdist workers: on a fresh machine both would npm-install into
    # the same cache at once, so the first installs and the other waits for it.
    cache_dir().mkdir(parents=True, exist_ok=True)
    with open(cache_dir() / ".install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not binary.exists():
            if version == OPENCODE_VERSION:
                _npm_install(cache_dir(), f"opencode-ai@{version}")
            else:
                _npm_install(cache_dir() / f"opencode-{version}",
                             f"{platform_package()}@{version}")
    return binary


def binary_version(binary: Path) -> str:
    done = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=60)
    return done.stdout.strip()


def ensure_opencode(version: str | None = None) -> Path:
    """The binary of ``version`` (default ``wanted_version()``), installed when missing and
    version checked; ``$AUTORETRY_E2E_OPENCODE`` names one explicitly (checked only when a
    version is asked for by argument or ``$AUTORETRY_E2E_OPENCODE_VERSION``)."""
    explicit = os.environ.get("AUTORETRY_E2E_OPENCODE")
    asked = version or os.environ.get("AUTORETRY_E2E_OPENCODE_VERSION")
    if explicit and not asked:
        return Path(explicit)
    want = asked or OPENCODE_VERSION
    binary = Path(explicit) if explicit else install_opencode(want)
    found = binary_version(binary)
    if found != want:
        raise RuntimeError(f"{binary} is {found!r}, expected {want}")
    return binary


@dataclass(frozen=True)
class OpenCodeHome:
    root: Path
    project: Path

    @property
    def config_dir(self) -> Path:
        return self.root / "config" / "opencode"

    @property
    def data_dir(self) -> Path:
        return self.root / "data" / "opencode"

    def env(self, **extra: str) -> dict[str, str]:
        base = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("XDG_", "AUTORETRY_", "OPENCODE_"))
        }
        base.update(
            HOME=str(self.root / "home"),
            XDG_CONFIG_HOME=str(self.root / "config"),
            XDG_DATA_HOME=str(self.root / "data"),
            XDG_STATE_HOME=str(self.root / "state"),
            XDG_CACHE_HOME=str(self.root / "cache"),
            # `opencode run` works in $PWD, not in its cwd (daemon/headless/run.py): without
            # this, a test's headless run worked in the checkout the suite runs from, and
            # OpenCode snapshotted that tree at every step.
            PWD=str(self.project),
            OPENCODE_DISABLE_MODELS_FETCH="1",
            OPENCODE_DISABLE_AUTOUPDATE="1",
            OPENCODE_DISABLE_SHARE="1",
        )
        base.update(extra)
        return base


def opencode_config(provider_url: str) -> dict[str, Any]:
    models = {
        "fake-model": {"name": "Fake Model", "limit": {"context": 100000, "output": 4096}},
        "fake-small": {"name": "Fake Small", "limit": {"context": 100000, "output": 4096}},
        # a second model on the same fake provider: the model-fallback scenarios (issue 10)
        "fake-b": {"name": "Fake Model B", "limit": {"context": 100000, "output": 4096}},
    }
    short = {"chunkTimeout": 6000, "headerTimeout": 6000}
    return {
        "$schema": "https://opencode.ai/config.json",
        "autoupdate": False,
        "share": "disabled",
        "model": "fake/fake-model",
        "small_model": "fake/fake-small",
        "provider": {
            "fake": {
                "npm": "@ai-sdk/openai-compatible",
                "name": "Fake LLM",
                "options": {"baseURL": provider_url, "apiKey": "sk-fake"},
                "models": models,
            },
            "fakect": {
                "npm": "@ai-sdk/openai-compatible",
                "name": "Fake LLM, short timeouts",
                "options": {"baseURL": provider_url, "apiKey": "sk-fake", **short},
                "models": {"fake-model": models["fake-model"]},
            },
            # OpenCode's Anthropic provider package on the fake's Messages API (issue 20):
            # POST {baseURL}/messages, so the same /v1 base URL serves both.
            "fakeanthropic": {
                "npm": "@ai-sdk/anthropic",
                "name": "Fake Anthropic",
                "options": {"baseURL": provider_url, "apiKey": "sk-ant-fake"},
                "models": {"claude-fake": {"name": "Claude Fake", "reasoning": True,
                                           "limit": {"context": 200000, "output": 8192}}},
            },
        },
    }


def prepare_home(root: Path, provider_url: str) -> OpenCodeHome:
    home = OpenCodeHome(root=root, project=root / "project")
    for sub in ("home", "config/opencode", "data", "state", "cache", "project"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    (home.config_dir / "opencode.json").write_text(
        json.dumps(opencode_config(provider_url), indent=2)
    )
    install.install(home.config_dir)
    return home


PLUGIN_DEP = Path("node_modules") / "@opencode-ai" / "plugin"


#: What OpenCode's first start npm-installs into its config dir, kept for the next homes.
CONFIG_DEPS = ("node_modules", "package.json", "package-lock.json", ".gitignore")


def warm_home(binary: Path, root: Path, provider_url: str) -> OpenCodeHome:
    """``prepare_home`` + one start of ``binary``: OpenCode npm-installs ``@opencode-ai/plugin``
    into its config dir on first start (about 20 s); a copy of what an earlier home of the same
    binary installed (``CONFIG_DEPS``, in the cache dir) makes it a few seconds. Each version
    gets a home of its own (its own DB: an older OpenCode must not open a newer one's)."""
    home = prepare_home(root, provider_url)
    kept = _config_deps_cache(binary)
    if (kept / PLUGIN_DEP / "package.json").exists():
        _copy_config_deps(kept, home.config_dir)
    with OpenCodeServer.start(binary, home) as server:
        server.ok("GET", "/path")  # boots the project instance, which loads the plugins
        _wait_for_path(home.config_dir / PLUGIN_DEP / "package.json", 180)
    if not kept.exists():
        _keep_config_deps(home.config_dir, kept)
    return home


def _config_deps_cache(binary: Path) -> Path:
    """Keyed by the binary itself (path, size, mtime): another version installs other deps."""
    real = binary.resolve()
    stat = real.stat()
    key = hashlib.sha1(f"{real}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()[:16]
    return cache_dir() / "config-deps" / key


def _copy_config_deps(source: Path, config_dir: Path) -> None:
    for name in CONFIG_DEPS:
        if (source / name).is_dir():
            shutil.copytree(source / name, config_dir / name, symlinks=True, dirs_exist_ok=True)
        elif (source / name).exists():
            shutil.copy2(source / name, config_dir / name)


def _keep_config_deps(config_dir: Path, kept: Path) -> None:
    """Copied aside, then renamed into place: two workers warming at once keep one copy."""
    kept.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=kept.parent))
    _copy_config_deps(config_dir, staging)
    try:
        staging.rename(kept)
    except OSError:  # the other worker's copy is already there
        shutil.rmtree(staging, ignore_errors=True)


def _wait_for_path(path: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise AssertionError(f"{path} did not appear within {timeout}s")
        time.sleep(0.1)  # polling a file OpenCode writes; nothing to wait on instead


class EventLog:
    """Collects ``/event`` SSE payloads; ``wait_for`` polls with a deadline."""

    def __init__(self) -> None:
        self._events: list[dict[str, Any]] = []
        self._cond = threading.Condition()

    def add(self, event: dict[str, Any]) -> None:
        with self._cond:
            self._events.append(event)
            self._cond.notify_all()

    def all(self) -> list[dict[str, Any]]:
        with self._cond:
            return list(self._events)

    def of_type(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.all() if e.get("type") == kind]

    def count(self) -> int:
        """Events collected so far (a ``since`` for ``wait_for``)."""
        with self._cond:
            return len(self._events)

    def wait_for(
        self, predicate: Callable[[dict[str, Any]], bool], timeout: float, what: str,
        since: int = 0,
    ) -> dict[str, Any]:
        """The first event from index ``since`` on that ``predicate`` accepts."""
        deadline = time.monotonic() + timeout
        checked = since  # each event is tested once: long streams must not cost O(n^2)
        with self._cond:
            while True:
                for event in self._events[checked:]:
                    checked += 1
                    if predicate(event):
                        return event
                left = deadline - time.monotonic()
                if left <= 0:
                    seen = [_described(e) for e in self._events][-40:]
                    raise AssertionError(f"no event {what} within {timeout}s; last seen: {seen}")
                self._cond.wait(left)


def _described(event: dict[str, Any]) -> str:
    """An event's type, with a toast's message: what a failed toast wait is read from."""
    kind = str(event.get("type"))
    if kind == "tui.toast.show":
        return f"{kind}: {event.get('properties', {}).get('message', '')}"
    return kind


def _read_sse(response: Any, add: Callable[[dict[str, Any]], None]) -> None:
    try:
        for raw in response:
            line = raw.decode("utf-8", "replace").strip()
            if line.startswith("data:"):
                try:
                    add(json.loads(line[5:]))
                except json.JSONDecodeError:
                    continue
    except (OSError, ValueError):
        return


#: The bound of a fresh process's first turn: it loads the provider's SDK before its request
#: leaves (5 s on an idle machine for 1.17.11, far longer beside a second worker and a hog).
COLD_TURN = 60.0


class OpenCodeServer:
    """One ``opencode serve`` process; use as a context manager or call ``stop()``."""

    def __init__(
        self, process: subprocess.Popen[bytes], url: str, home: OpenCodeHome, started_in: float
    ) -> None:
        self.process = process
        self.url = url.rstrip("/")
        self.home = home
        self.started_in = started_in
        self.stdout: list[str] = []
        self.stderr_path: Path | None = None
        self.events = EventLog()
        self.shared = False  # a worker's OpenCode lent to one test at a time (SharedServer)

    @classmethod
    def start(
        cls,
        binary: Path,
        home: OpenCodeHome,
        env: dict[str, str] | None = None,
        timeout: float = 120.0,
    ) -> OpenCodeServer:
        began = time.monotonic()
        stderr_path = home.root / f"opencode-{time.time_ns()}.stderr"
        log_file = stderr_path.open("wb")
        process = subprocess.Popen(
            [str(binary), "serve", "--port", "0", "--hostname", "127.0.0.1"],
            cwd=home.project,
            env=home.env(**(env or {})),
            stdout=subprocess.PIPE,
            stderr=log_file,
            stdin=subprocess.DEVNULL,
        )
        stdout: list[str] = []
        url = _await_url(process, timeout, stdout)
        server = cls(process, url, home, time.monotonic() - began)
        server.stdout, server.stderr_path = stdout, stderr_path
        server._follow_events()
        return server

    def _follow_events(self) -> None:
        response = urllib.request.urlopen(f"{self.url}/event", timeout=3600)
        # Through ``self``: a shared server gets a fresh ``events`` for each test.
        threading.Thread(target=_read_sse, args=(response, lambda e: self.events.add(e)),
                         daemon=True).start()
        self.events.wait_for(lambda e: e.get("type") == "server.connected", 30, "server.connected")

    def output(self) -> str:
        """Everything the process printed so far (stdout lines + stderr)."""
        err = self.stderr_path.read_text(errors="replace") if self.stderr_path else ""
        return "\n".join(self.stdout) + "\n" + err

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=15)

    def __enter__(self) -> OpenCodeServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---------------------------------------------------------------- HTTP helpers

    def request(
        self, method: str, path: str, body: object = None, timeout: float = 30.0
    ) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(
            f"{self.url}{path}",
            data=data,
            method=method,
            headers={"content-type": "application/json"},
        )
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                raw = resp.read()
                status = resp.status
        except urllib.error.HTTPError as err:
            raw, status = err.read(), err.code
        return status, (json.loads(raw) if raw.strip() else None)

    def ok(self, method: str, path: str, body: object = None) -> Any:
        status, payload = self.request(method, path, body)
        assert 200 <= status < 300, f"{method} {path} -> {status}: {payload}"
        return payload

    def create_session(
        self, parent_id: str | None = None, title: str | None = None
    ) -> dict[str, Any]:
        body: dict[str, Any] = {}
        if parent_id:
            body["parentID"] = parent_id
        if title:
            body["title"] = title
        return self.ok("POST", "/session", body)

    def prompt_async(self, session_id: str, text: str, **extra: Any) -> None:
        self.ok(
            "POST",
            f"/session/{session_id}/prompt_async",
            {"parts": [{"type": "text", "text": text}], **extra},
        )

    def command(self, session_id: str, name: str, arguments: str) -> tuple[int, Any]:
        return self.request(
            "POST", f"/session/{session_id}/command", {"command": name, "arguments": arguments}
        )

    def messages(self, session_id: str) -> list[dict[str, Any]]:
        return self.ok("GET", f"/session/{session_id}/message")

    def session(self, session_id: str) -> dict[str, Any]:
        return self.ok("GET", f"/session/{session_id}")

    def abort(self, session_id: str) -> Any:
        return self.ok("POST", f"/session/{session_id}/abort")

    def finished_ok(self, session_id: str) -> bool:
        """The session's last message is an assistant reply that stopped without an error."""
        messages = self.messages(session_id)  # empty until prompt_async's message is written
        if not messages:
            return False
        last = messages[-1]["info"]
        return last["role"] == "assistant" and last.get("finish") == "stop" and not last.get(
            "error")

    def warm_up(self, timeout: float = COLD_TURN) -> None:
        """One plain turn in a session of its own, so a fresh process's slow first step is
        not timed by a scenario's bounds (nor seen by a daemon with a short stall timeout)."""
        session = self.create_session()["id"]
        self.prompt_async(session, "Say hello")
        self.wait_idle(session, timeout)
        assert self.finished_ok(session), f"the warm-up turn: {self.messages(session)[-1:]}"

    def wait_idle(self, session_id: str, timeout: float) -> dict[str, Any]:
        return self.events.wait_for(
            lambda e: (
                e.get("type") == "session.idle" and e["properties"].get("sessionID") == session_id
            ),
            timeout,
            f"session.idle for {session_id}",
        )


def _await_url(process: subprocess.Popen[bytes], timeout: float, lines: list[str]) -> str:
    """The URL ``serve`` prints; every stdout line is kept in ``lines`` (tests check it)."""
    found: list[str] = []
    done = threading.Event()

    def scan() -> None:
        assert process.stdout is not None
        for raw in process.stdout:
            line = raw.decode("utf-8", "replace").strip()
            lines.append(line)
            if LISTENING in line and not found:
                found.append(line.split(LISTENING, 1)[1].strip())
                done.set()
        done.set()

    threading.Thread(target=scan, daemon=True).start()
    if not done.wait(timeout) or not found:
        process.kill()
        raise AssertionError(
            f"opencode serve printed no URL within {timeout}s (exit {process.poll()})"
        )
    return found[0]


#: How long a shared server's sessions of one test may take to stop after their abort.
SETTLE_TIMEOUT = 30.0


class SharedServer:
    """A worker's warm OpenCode, lent to one test at a time (``tests/e2e/conftest.py``).

    Between two tests: the sessions the test made are aborted, waited for and deleted (their
    ``session.deleted`` makes the bridge forget them, so the next test's daemon never finds
    them owned), and the next test gets an empty event log."""

    def __init__(self, server: OpenCodeServer) -> None:
        self.server = server
        server.shared = True
        self._before: set[str] = set()

    @classmethod
    def launch(cls, binary: Path, home: OpenCodeHome, socket: Path,
               warmed: Callable[[], None]) -> SharedServer:
        """Started on ``socket`` with a bridge that retries it every 250 ms (each test's new
        daemon is found at once), warmed by one turn (``warmed`` then runs: the fake provider
        forgets it), and with no session left over."""
        server = OpenCodeServer.start(binary, home, {
            "AUTORETRY_SOCKET": str(socket), "AUTORETRY_BRIDGE_RECONNECT_MAX_MS": "250"})
        server.warm_up()
        warmed()
        shared = cls(server)
        shared.forget_all()
        return shared

    def _session_ids(self) -> set[str]:
        return {str(s["id"]) for s in self.server.ok("GET", "/session")}

    def begin_test(self) -> None:
        assert self.server.process.poll() is None, (
            f"the shared OpenCode exited ({self.server.process.returncode}): "
            f"{self.server.output()[-2000:]}")
        self._before = self._session_ids()
        self.server.events = EventLog()

    def end_test(self) -> None:
        if self.server.process.poll() is not None:
            return  # begin_test of the next test says so
        self._forget(self._session_ids() - self._before)

    def forget_all(self) -> None:
        """Also the warm-up turn's session: a hello names every session its bridge knows."""
        self._forget(self._session_ids())

    def _forget(self, made: set[str]) -> None:
        for session in made:
            self.server.request("POST", f"/session/{session}/abort")
        deadline = time.monotonic() + SETTLE_TIMEOUT
        while made & set(self.server.ok("GET", "/session/status")):
            assert time.monotonic() < deadline, f"sessions still busy after their abort: {made}"
            time.sleep(0.1)  # OpenCode's status has no event to wait on for a set of sessions
        for session in made:
            self.server.request("DELETE", f"/session/{session}")
