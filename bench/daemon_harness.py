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

import psutil

ROOT = Path(__file__).resolve().parents[1]
E2E = ROOT / "tests" / "e2e"
README = ROOT / "bench" / "README.md"
SECTION = "## Daemon"
sys.path[:0] = [str(E2E), str(ROOT / "tests")]  # the fake provider's server: tests/

from daemon_process import DaemonProcess, wait_until  # noqa: E402
from fake_provider import RESPONDERS, FakeProvider, _chunk, _usage  # noqa: E402
from opencode import (  # noqa: E402
    EventLog,
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
        #: Called (in the provider's handler thread) when a ``bench_stream`` response ended.
        self.on_stream_end: Callable[[], None] | None = None
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
        if self.on_stream_end is not None:
            self.on_stream_end()

    def wait_sent(self, tag: str, timeout: float) -> float:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if tag in self.sent:
                    return self.sent[tag]
            time.sleep(0.01)  # the provider runs in threads of this process; cheap poll
        raise AssertionError(f"the provider never finished the fault tagged {tag!r}")


class TimedEventLog(EventLog):
    """OpenCode's ``/event`` stream as the bench process receives it, with the arrival time
    (``time.time()``) of each event: when OpenCode published what ended a turn, give or take
    the SSE hop, which splits a fault's latency into OpenCode's part and the daemon's."""

    def __init__(self) -> None:
        super().__init__()
        self.arrived: list[float] = []

    def add(self, event: dict[str, Any]) -> None:
        with self._cond:
            self.arrived.append(time.time())
            self._events.append(event)
            self._cond.notify_all()

    def first_end(self, session_id: str, since: int) -> float | None:
        """Arrival time of the first event from index ``since`` on that ends the session's
        turn (idle, in either shape, or an error)."""
        with self._cond:
            for index in range(since, len(self._events)):
                event = self._events[index]
                props = event.get("properties") or {}
                if props.get("sessionID") != session_id:
                    continue
                kind = event.get("type")
                status = props.get("status") if kind == "session.status" else None
                if kind in ("session.idle", "session.error") or (
                        isinstance(status, dict) and status.get("type") == "idle"):
                    return self.arrived[index]
        return None


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


MB = 1024 * 1024
TURN_S = 60.0


@dataclass(frozen=True)
class Usage:
    wall: float
    cpu: float  # seconds of CPU (user + system) in the window
    rss_max: float  # MB
    rss_end: float  # MB
    loop_cpu: float = 0.0  # seconds of the main thread (the decision loop) within ``cpu``
    extra: str = ""
    deltas_per_s: float = 0.0  # ``message.part.delta`` published by OpenCode in the window
    #: CPU seconds per native thread id in the window (the busiest first); ``--py-spy``'s
    #: folded stacks name the ids (``thread (TID): NAME``)
    threads: tuple[tuple[int, float], ...] = ()

    @property
    def us_per_delta(self) -> float:
        return 1e6 * self.cpu / (self.deltas_per_s * self.wall) if self.deltas_per_s else 0.0

    @property
    def core_share(self) -> float:
        return 100.0 * self.cpu / self.wall


class Sampler:
    """Samples the daemon's RSS every 0.5 s between ``begin`` and ``end``."""

    def __init__(self, pid: int) -> None:
        self.process = psutil.Process(pid)
        self._rss: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._cpu0 = 0.0
        self._loop0 = 0.0
        self._t0 = 0.0
        self._threads0: dict[int, float] = {}

    def _cpu(self) -> float:
        times = self.process.cpu_times()
        return times.user + times.system

    def _per_thread(self) -> dict[int, float]:
        return {t.id: t.user_time + t.system_time for t in self.process.threads()}

    def _loop_cpu(self) -> float:
        """The main thread's CPU: ``serve`` runs the decision loop there (its tid is the pid);
        the bridge readers, the DB tailer, the watcher and the timers are the other threads."""
        main = [t for t in self.process.threads() if t.id == self.process.pid]
        return main[0].user_time + main[0].system_time if main else 0.0

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            self._rss.append(self.process.memory_info().rss)

    def begin(self) -> Sampler:
        self._t0, self._cpu0, self._loop0 = time.monotonic(), self._cpu(), self._loop_cpu()
        self._threads0 = self._per_thread()
        self._rss.append(self.process.memory_info().rss)
        self._thread.start()
        return self

    def end(self, extra: str = "") -> Usage:
        cpu, wall = self._cpu() - self._cpu0, time.monotonic() - self._t0
        loop = self._loop_cpu() - self._loop0
        threads = sorted(((tid, used - self._threads0.get(tid, 0.0))
                          for tid, used in self._per_thread().items()),
                         key=lambda item: -item[1])
        self._stop.set()
        self._thread.join(timeout=2)
        rss = self.process.memory_info().rss
        return Usage(wall, cpu, max([*self._rss, rss]) / MB, rss / MB, loop, extra,
                     threads=tuple(item for item in threads if item[1] > 0))


def start_opencode(binary: Path, bench: Rig, coalesce_ms: int | None,
                   bridge: bool = True) -> OpenCodeServer:
    """OpenCode with the bridge, once its hello reached the rig's (started) daemon;
    ``coalesce_ms`` 0 turns the bridge's delta coalescing off (every delta its own line, as
    before issue 12). ``bridge`` False: a home without the plugin (nothing to wait for)."""
    assert bench.daemon is not None
    env = bench.opencode_env(None if coalesce_ms is None else str(coalesce_ms))
    seen = len(bench.daemon.lines())
    server = bench.server = OpenCodeServer.start(binary, bench.home, env)
    server.events = TimedEventLog()  # the SSE reader adds to whatever ``events`` is now
    server.ok("GET", "/path")
    warm = server.create_session()["id"]
    server.prompt_async(warm, "hello")
    server.wait_idle(warm, TURN_S)
    if bridge:
        bench.daemon.wait_log("connected: pid", TURN_S, after=seen)
    return server


def start_streams(server: OpenCodeServer, provider: TimedProvider, sessions: int, words: int
                  ) -> list[str]:
    """``sessions`` new sessions prompted at once, each answered by ``words`` words of
    non-repeating prose (``bench_stream``); returns once every stream is flowing."""
    ids = [server.create_session()["id"] for _ in range(sessions)]
    before = len(provider.provider.requests())
    for session in ids:
        server.prompt_async(session, f"Tell me a long story [[s:bench_stream:{words}]]")
    provider.provider.wait_for_requests(before + sessions, TURN_S)
    wait_for(lambda: provider.chunks >= sessions * 3, TURN_S, "all streams flowing", 0.05)
    return ids


@dataclass(frozen=True)
class FaultTiming:
    latency: float  # ms from the provider's last byte to the daemon's first decision
    reason: str  # that decision's reason
    #: ms from the provider's last byte to the turn's end arriving over OpenCode's ``/event``
    #: stream in this process (None without a ``TimedEventLog``): OpenCode's part
    published: float | None = None


def fault_latency(server: OpenCodeServer, daemon: DaemonProcess, provider: TimedProvider,
                  fault: str, tag: str) -> FaultTiming:
    """One fault in a new session, timed. Returns when the session went idle, so its
    trailing writes do not overlap the next fault."""
    session = server.create_session()["id"]
    seen = server.events.count()
    server.prompt_async(session, f"Answer this [[s:bench_fault:{fault}.{tag}]]")
    sent_at = provider.wait_sent(tag, TURN_S)
    at_ms, reason = wait_for(lambda: first_decision_ms(daemon, session), TURN_S,
                             f"a decision for fault {tag}")
    server.events.wait_for(
        lambda e: e.get("type") == "session.idle" and e["properties"].get("sessionID") == session,
        TURN_S, f"session.idle for {session}", since=seen)
    events = server.events
    ended = events.first_end(session, seen) if isinstance(events, TimedEventLog) else None
    return FaultTiming(at_ms - sent_at * 1000, reason,
                       None if ended is None else (ended - sent_at) * 1000)


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
    "DefaultDaemon", "FaultTiming", "OpenCodeServer", "Rig", "Sampler", "StoreView",
    "TimedEventLog", "TimedProvider", "Usage", "bridge_home", "ensure_opencode", "fault_latency",
    "first_decision_ms", "machine_note", "percentile", "plain_home", "remove", "rig", "scratch",
    "start_opencode", "start_streams", "summary", "wait_for", "warm_up", "write_section",
]
