"""Shared pieces of the daemon benchmarks (issue 5): the e2e harness, set up outside pytest.

Reuses tests/e2e (real OpenCode 1.18.33, the fake provider, ``DaemonProcess``) by sys.path
insertion. Differences from the test fixtures, on purpose:
- the daemon runs with its *default* settings (the e2e launcher shortens the tick to 0.2 s);
- the fake provider gets timed behaviours (``bench_fault:NAME.TAG``, ``bench_stream:N``) that
  record when the response was fully sent, since the request log only has the arrival time;
- OpenCode can run with or without the bridge plugin (a home with no plugin installed).
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
E2E = ROOT / "tests" / "e2e"
README = ROOT / "bench" / "README.md"
SECTION = "## Daemon"
sys.path.insert(0, str(E2E))

from daemon_process import DaemonProcess, wait_until  # noqa: E402
from fake_provider import RESPONDERS, FakeProvider, _chunk, _usage  # noqa: E402
from opencode import (  # noqa: E402
    OpenCodeHome,
    OpenCodeServer,
    ensure_opencode,
    opencode_config,
    prepare_home,
)

from opencode_autoretry.store.database import StoreView  # noqa: E402

PLUGIN_DEP = Path("node_modules") / "@opencode-ai" / "plugin"
WORDS = (
    "alpha", "beta", "gamma", "delta", "kernel", "socket", "buffer", "parser", "module",
    "vector", "cache", "index", "table", "thread", "signal", "queue", "stream", "token", "layer",
    "router", "branch", "commit", "patch", "merge", "review", "error", "value", "result",
    "option", "config", "server", "client", "request", "answer", "record", "field", "schema",
    "column", "file", "path", "folder", "handle", "reader", "writer", "worker", "timer", "clock",
    "event", "budget", "policy", "session", "retry", "backoff", "limit", "window", "frame",
    "packet", "header", "footer", "string", "number", "integer", "float",
)


class TimedProvider:
    """The fake provider plus behaviours that log when their response was completely sent."""

    def __init__(self) -> None:
        self.provider = FakeProvider()
        self.sent: dict[str, float] = {}  # tag -> time.time() after the last byte
        self.chunks = 0  # stream chunks sent so far (all bench_stream responses)
        self._lock = threading.Lock()
        self.provider.responders.update({"bench_fault": self._fault, "bench_stream": self._stream})

    def start(self) -> TimedProvider:
        self.provider.start()
        return self

    @property
    def url(self) -> str:
        return self.provider.url

    def _fault(self, handler: Any, arg: str, release: threading.Event) -> None:
        """``bench_fault:blank.7``: the built-in ``blank`` behaviour, tagged ``7`` (the marker regex
        allows only [a-z0-9_.] in the argument)."""
        name, _, tag = arg.partition(".")
        RESPONDERS[name](handler, "", release)
        with self._lock:
            self.sent[tag] = time.time()

    def _stream(self, handler: Any, arg: str, release: threading.Event) -> None:
        """``bench_stream:400``: 400 words of non-repeating prose, one chunk each, 20 ms apart
        (about 50 tokens/s, a fast real model), so the repetition guard sees ordinary text."""
        count = int(arg or 400)
        rng = random.Random(count + threading.get_ident())
        handler._stream_head()
        handler._send(_chunk({"role": "assistant", "content": ""}))
        for index in range(count):
            word = rng.choice(WORDS) + ("." if index % 11 == 10 else "") + " "
            handler._send(_chunk({"content": word}))
            with self._lock:
                self.chunks += 1
            if release.wait(0.02):
                break
        handler._finish("stop", _usage(count))

    def wait_sent(self, tag: str, timeout: float) -> float:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if tag in self.sent:
                    return self.sent[tag]
            time.sleep(0.01)  # the provider runs in threads of this process; cheap poll
        raise AssertionError(f"the provider never finished the fault tagged {tag!r}")


def plain_home(root: Path, provider_url: str) -> OpenCodeHome:
    """Like ``prepare_home`` but without the bridge plugin (OpenCode alone, DB only)."""
    home = OpenCodeHome(root=root, project=root / "project")
    for sub in ("home", "config/opencode", "data", "state", "cache", "project"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    (home.config_dir / "opencode.json").write_text(json.dumps(opencode_config(provider_url)))
    return home


def bridge_home(root: Path, provider_url: str) -> OpenCodeHome:
    return prepare_home(root, provider_url)


def warm_up(binary: Path, home: OpenCodeHome) -> None:
    """The first start npm-installs ``@opencode-ai/plugin`` into the config dir (once)."""
    with OpenCodeServer.start(binary, home, {"AUTORETRY_SOCKET": "/nonexistent"}) as server:
        server.ok("GET", "/path")
        deadline = time.monotonic() + 180
        while not (home.config_dir / PLUGIN_DEP / "package.json").exists():
            if time.monotonic() > deadline:
                break  # a home without plugins may never install it; not an error
            time.sleep(0.2)


class DefaultDaemon(DaemonProcess):
    """``autoretry run`` with the daemon's default settings (no shortened tick).
    ``interpreter_args`` go before ``-m``, e.g. ``["-m", "cProfile", "-o", PATH]``."""

    interpreter_args: tuple[str, ...] = ()

    def start(self, timeout: float = 30.0) -> DefaultDaemon:
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("AUTORETRY_", "XDG_"))},
            "AUTORETRY_HOME": str(self.home),
            "AUTORETRY_SOCKET": str(self.socket),
            "AUTORETRY_CONFIG": str(self.config),
            "OPENCODE_DB": str(self.opencode_db),
        }
        self.process = subprocess.Popen(
            [sys.executable, *self.interpreter_args, "-m", "opencode_autoretry.cli", "run",
             "--foreground"],
            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, text=True,
        )
        started = len(self._lines)
        threading.Thread(target=self._follow, args=(self.process,), daemon=True).start()
        self.wait_log("autoretry daemon", timeout, after=started)
        return self


@dataclass
class Rig:
    """One bench run's scratch directory: OpenCode's home (warmed up) and the daemon's socket,
    plus the OpenCode server and daemon the run started (``stop`` ends both)."""

    root: Path
    home: OpenCodeHome
    socket: Path
    server: OpenCodeServer | None = None
    daemon: DefaultDaemon | None = None

    def opencode_env(self, coalesce_ms: str | None = None) -> dict[str, str]:
        """OpenCode's env pointing the bridge at the daemon; ``coalesce_ms`` "0" turns the
        bridge's delta coalescing off (every delta its own line, as before issue 12)."""
        env = {"AUTORETRY_SOCKET": str(self.socket)}
        if coalesce_ms is not None:
            env["AUTORETRY_BRIDGE_COALESCE_MS"] = coalesce_ms
        return env

    def new_daemon(self) -> DefaultDaemon:
        """The daemon (not started yet) on this rig's socket and OpenCode DB."""
        self.daemon = DefaultDaemon(self.root / "home", self.socket,
                                    self.home.data_dir / "opencode.db")
        return self.daemon

    def stop(self) -> None:
        """Stops OpenCode first (so its bridge does not outlive the daemon), then the daemon."""
        if self.server is not None:
            self.server.stop()
        if self.daemon is not None:
            self.daemon.stop()


@contextmanager
def rig(prefix: str, binary: Path, provider: TimedProvider,
        make_home: Callable[[Path, str], OpenCodeHome] = bridge_home) -> Iterator[Rig]:
    """A warmed-up OpenCode home in a fresh scratch directory; whatever the run started is
    stopped and the directory removed when the ``with`` ends, however it ends."""
    root = scratch(prefix)
    bench: Rig | None = None
    try:
        home = make_home(root / "oc", provider.url)
        warm_up(binary, home)
        bench = Rig(root, home, root / "d.sock")
        yield bench
    finally:
        if bench is not None:
            bench.stop()
        remove(root)


def first_decision_ms(daemon: DaemonProcess, session_id: str) -> tuple[int, str] | None:
    """(decisions.at in epoch ms, reason) of the session's first decision, if any."""
    view = daemon.store()
    try:
        records = view.decisions(session_id)
    finally:
        view.close()
    if not records:
        return None
    first = min(records, key=lambda record: record.id)
    return round(first.at.timestamp() * 1000), first.reason


wait_for = wait_until  # the e2e suite's poller, with the bench's names


def percentile(values: list[float], share: float) -> float:
    """Nearest-rank percentile (p95 of 20 values is the 19th smallest)."""
    ordered = sorted(values)
    rank = max(1, -(-int(share * 100) * len(ordered) // 100))
    return ordered[min(rank, len(ordered)) - 1]


def summary(values: list[float]) -> dict[str, float]:
    return {
        "n": len(values), "p50": statistics.median(values), "p95": percentile(values, 0.95),
        "min": min(values), "max": max(values),
    }


def scratch(prefix: str) -> Path:
    """A short private directory (unix socket paths are limited to ~107 bytes)."""
    return Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))


def remove(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


def machine_note() -> str:
    load = os.getloadavg()
    return f"{os.cpu_count()} vCPUs, load average {load[0]:.1f} when it started"


def write_section(title: str, body: str) -> None:
    """Replace (or append) the ``### title`` subsection of the README's ``## Daemon`` section;
    every other section of the README is left byte for byte."""
    text = README.read_text() if README.exists() else "# Benchmarks\n"
    block = f"### {title}\n\n{body.strip()}\n"
    start = text.find(f"\n{SECTION}\n")
    if start < 0:
        README.write_text(text.rstrip("\n") + f"\n\n{SECTION}\n\n{block}")
        return
    head_end = start + len(SECTION) + 2
    nxt = re.search(r"^## ", text[head_end:], flags=re.M)
    end = head_end + nxt.start() if nxt else len(text)
    section = text[head_end:end]
    parts = re.split(r"(?m)^(?=### )", section)
    kept = [p for p in parts if not p.startswith(f"### {title}\n")]
    replaced = len(kept) != len(parts)
    blocks = [p if p.endswith("\n\n") or not p.strip() else p.rstrip("\n") + "\n\n" for p in kept]
    if replaced:
        index = next(i for i, p in enumerate(parts) if p.startswith(f"### {title}\n"))
        blocks.insert(index, block + "\n")
    else:
        blocks.append(block + "\n")
    new_section = "".join(blocks)
    tail = text[end:]
    README.write_text(text[:head_end] + new_section.rstrip("\n") + ("\n\n" if tail else "\n")
                      + tail)


__all__ = [
    "DefaultDaemon", "OpenCodeServer", "Rig", "TimedProvider", "bridge_home", "ensure_opencode",
    "first_decision_ms", "machine_note", "percentile", "plain_home", "remove", "rig", "scratch",
    "summary", "wait_for", "warm_up", "write_section", "StoreView",
]
