"""RSS and CPU of the resident daemon, idle and with 20 sessions streaming (issue 5).

    .venv/bin/python bench/daemon_footprint.py [--idle 60] [--sessions 20] [--words 1500]
                                              [--pairs 1]

Real OpenCode 1.18.33 with the bridge plugin, ``autoretry run`` with default settings.
- idle: one bridge connected, nothing happening, ``--idle`` seconds.
- streaming: ``--sessions`` sessions prompted at once, each answered by a long stream of
  non-repeating words (one chunk every 20 ms, ~50 tokens/s each), so every delta flows through
  the bridge into the daemon (the repetition guard reads them). Measured from the moment all
  streams run until the first one ends.
CPU = psutil ``cpu_times`` (user + system) delta of the daemon's pid / wall time; RSS is
sampled every 0.5 s (max reported). Goals: idle <= 0.5 % of a core, streaming <= 2 %
(issue 12; 5 % in issue 5), RSS <= 60 MB. ``--pairs N`` runs N uncoalesced/coalesced pairs.
"""

from __future__ import annotations

import argparse
import os
import pstats
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
from daemon_harness import (
    DefaultDaemon,
    OpenCodeServer,
    Rig,
    TimedProvider,
    ensure_opencode,
    first_decision_ms,
    machine_note,
    rig,
    wait_for,
    write_section,
)

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

    def _cpu(self) -> float:
        times = self.process.cpu_times()
        return times.user + times.system

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
        self._rss.append(self.process.memory_info().rss)
        self._thread.start()
        return self

    def end(self, extra: str = "") -> Usage:
        cpu, wall = self._cpu() - self._cpu0, time.monotonic() - self._t0
        loop = self._loop_cpu() - self._loop0
        self._stop.set()
        self._thread.join(timeout=2)
        rss = self.process.memory_info().rss
        return Usage(wall, cpu, max([*self._rss, rss]) / MB, rss / MB, loop, extra)


def idle(daemon: DefaultDaemon, seconds: float) -> Usage:
    sampler = Sampler(daemon.process.pid).begin()  # type: ignore[union-attr]
    time.sleep(seconds)  # the measurement window itself
    return sampler.end()


class SpySampler:
    """``py-spy record`` on the daemon over one window (``--py-spy DIR``): folded stacks per
    thread of what ran on a CPU (idle threads are not sampled), so the reader threads' cost
    shows up too, which cProfile (main thread only) cannot see."""

    def __init__(self, out: Path | None, pid: int, name: str) -> None:
        self._proc: subprocess.Popen[bytes] | None = None
        if out is None:
            return
        spy = Path(os.environ.get("PY_SPY", Path(sys.prefix) / "bin" / "py-spy"))
        target = out / (name.replace(", ", "-").replace(" ", "") + ".txt")
        self._proc = subprocess.Popen(
            [str(spy), "record", "--pid", str(pid), "--threads", "--format", "raw",
             "--rate", "250", "--nonblocking", "-o", str(target)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def stop(self) -> None:
        if self._proc is not None:
            self._proc.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
            self._proc.wait(timeout=30)


def lines_read(daemon: DefaultDaemon, after: float = 0.0) -> tuple[float, int]:
    """(heartbeat time, bridge lines the daemon had read then), from the first heartbeat
    written after ``after`` (epoch s; the daemon beats every 5 s)."""
    deadline = time.monotonic() + 8.0
    while True:
        view = daemon.store()
        try:
            beat = view.heartbeat()
        finally:
            view.close()
        if beat is not None and (beat.at.timestamp() > after or time.monotonic() > deadline):
            return beat.at.timestamp(), int(beat.info.get("lines", {}).get("lines", 0))
        time.sleep(0.5)  # polls the store file, not the daemon: nothing else to wait on


def streaming(server: OpenCodeServer, daemon: DefaultDaemon, provider: TimedProvider,
              sessions: int, words: int, spy: Path | None = None, name: str = "") -> Usage:
    ids = [server.create_session()["id"] for _ in range(sessions)]
    before = len(provider.provider.requests())
    for session in ids:
        server.prompt_async(session, f"Tell me a long story [[s:bench_stream:{words}]]")
    provider.provider.wait_for_requests(before + sessions, TURN_S)
    wait_for(lambda: provider.chunks >= sessions * 3, TURN_S, "all streams flowing", 0.05)
    chunks0 = provider.chunks
    published0 = len(server.events.of_type("message.part.delta"))
    beat0 = lines_read(daemon)
    sampler = Sampler(daemon.process.pid).begin()  # type: ignore[union-attr]
    profiler = SpySampler(spy, daemon.process.pid, name)  # type: ignore[union-attr]
    first_idle = server.events.wait_for(
        lambda e: e.get("type") == "session.idle" and e["properties"].get("sessionID") in ids,
        words * 0.1 + TURN_S, "a streamed session finishing",
    )
    usage = sampler.end()
    profiler.stop()
    beat1 = lines_read(daemon, after=time.time())  # streams still run: the others go on
    line_rate = (beat1[1] - beat0[1]) / max(beat1[0] - beat0[0], 1e-9)
    rate = (provider.chunks - chunks0) / usage.wall
    published = (len(server.events.of_type("message.part.delta")) - published0) / usage.wall
    for session in ids:
        server.wait_idle(session, TURN_S)
    assert first_idle
    # Ordinary streams: the daemon must have decided nothing (no loop, no failure) about them.
    decided = sum(first_decision_ms(daemon, session) is not None for session in ids)
    dropped = [line for line in daemon.lines() if "dropped" in line]
    return Usage(usage.wall, usage.cpu, usage.rss_max, usage.rss_end, usage.loop_cpu,
                 f"{rate:.0f} chunks/s sent by the provider, {published:.0f} "
                 f"`message.part.delta`/s published by OpenCode, ~{line_rate:.0f} bridge "
                 f"lines/s read by the daemon; decisions: {decided}; "
                 f"bridge drop reports: {len(dropped)}", published)


def print_profile(path: Path) -> None:
    """The decision loop's (main thread's) hottest functions over the whole run."""
    if path.exists():
        pstats.Stats(str(path)).sort_stats("tottime").print_stats(20)


def start_opencode(binary: Path, bench: Rig, coalesce_ms: int | None) -> OpenCodeServer:
    """OpenCode with the bridge, once its hello reached the rig's daemon; ``coalesce_ms`` 0
    turns the bridge's delta coalescing off (every delta its own line, as before issue 12)."""
    assert bench.daemon is not None
    env = bench.opencode_env(None if coalesce_ms is None else str(coalesce_ms))
    seen = len(bench.daemon.lines())
    server = bench.server = OpenCodeServer.start(binary, bench.home, env)
    server.ok("GET", "/path")
    warm = server.create_session()["id"]
    server.prompt_async(warm, "hello")
    server.wait_idle(warm, TURN_S)
    bench.daemon.wait_log("connected: pid", TURN_S, after=seen)
    return server


def run(binary: Path, provider: TimedProvider, idle_s: float, sessions: int, words: int,
        profile: bool = False, pairs: int = 1, spy: Path | None = None) -> dict[str, Usage]:
    """Idle once, then ``pairs`` x (streaming with every delta its own line, streaming with
    the bridge's coalescing): the same daemon, machine and load, back to back."""
    with rig("ar-foot-", binary, provider) as bench:
        try:
            daemon = bench.new_daemon()
            if profile:  # cProfile sees the main thread only: the decision loop
                daemon.interpreter_args = ("-m", "cProfile", "-o", str(bench.root / "daemon.prof"))
            daemon.start()
            server = start_opencode(binary, bench, None)
            time.sleep(5)  # start-up (rebuild, adopt, first beats) is not idle time
            results = {"idle": idle(daemon, idle_s)}
            print(f"idle: {results['idle']}", flush=True)
            for pair in range(pairs):
                for name, window in (("streaming, uncoalesced", 0), ("streaming", None)):
                    server.stop()
                    server = start_opencode(binary, bench, window)
                    key = name if pairs == 1 else f"{name} #{pair + 1}"
                    usage = streaming(server, daemon, provider, sessions, words, spy, key)
                    results[key] = usage
                    print(f"{key}: {usage}", flush=True)
            return results
        finally:
            bench.stop()  # the profile is written when the daemon exits
            if profile:
                print_profile(bench.root / "daemon.prof")


GOALS = {"idle": 0.5, "streaming": 2.0}  # % of a core (issue 5: idle; issue 12: streaming)


def table(results: dict[str, Usage], args: argparse.Namespace, note: str) -> str:
    lines = [
        "| phase | window | daemon CPU (loop thread) | % of a core | CPU per delta | goal "
        "| RSS max / end | goal | traffic |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, usage in results.items():
        label = "idle, 1 bridge" if name == "idle" else f"{args.sessions} sessions {name}"
        goal = GOALS.get(name.split(" #")[0])
        cpu = "baseline" if goal is None else (
            f"<= {goal} % {'met' if usage.core_share <= goal else '**missed**'}")
        per_delta = f"{usage.us_per_delta:.0f} us" if usage.deltas_per_s else ""
        rss_ok = usage.rss_max <= 60
        lines.append(
            f"| {label} | {usage.wall:.1f} s | {usage.cpu * 1000:.0f} ms "
            f"({usage.loop_cpu * 1000:.0f} ms) | {usage.core_share:.2f} % | {per_delta} | {cpu} "
            f"| {usage.rss_max:.1f} / {usage.rss_end:.1f} MB "
            f"| <= 60 MB {'met' if rss_ok else '**missed**'} | {usage.extra} |"
        )
    return (
        f"`.venv/bin/python bench/daemon_footprint.py` (real OpenCode 1.18.33 with the bridge, "
        f"daemon defaults; {note}). CPU = psutil `cpu_times` (user + system) delta of the "
        f"daemon's pid over the window; RSS sampled every 0.5 s. Streaming: {args.sessions} "
        f"sessions prompted at once, each answered with {args.words} words of non-repeating "
        "prose, one SSE chunk per word every 20 ms; the window runs from all streams flowing "
        "to the first one finishing. *uncoalesced* is the same daemon and load with the "
        "bridge's delta coalescing off (`AUTORETRY_BRIDGE_COALESCE_MS=0`: every delta its own "
        "line, as before issue 12), run back to back as the baseline. In brackets: the main "
        "thread alone, which runs the decision loop (per delta: dispatch, session bookkeeping, "
        "the repetition guard's feed); the rest is mostly the bridge reader threads (per line: "
        "JSON decode into a protocol dataclass, clock, inbox put). `--profile` runs the daemon "
        "under cProfile and prints the loop's hot spots.\n\n" + "\n".join(lines)
        + ratio_line(results)
    )


def ratio_line(results: dict[str, Usage]) -> str:
    pairs = [(results[k], results[k.replace("streaming", "streaming, uncoalesced", 1)])
             for k in results if k.startswith("streaming") and "uncoalesced" not in k]
    if not pairs:
        return ""
    ratios = ", ".join(f"{base.us_per_delta / new.us_per_delta:.1f}x"
                       for new, base in pairs if new.us_per_delta)
    return f"\n\nCPU per delta, uncoalesced / coalesced: {ratios}."


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--idle", type=float, default=60.0)
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--words", type=int, default=1500)
    parser.add_argument("--pairs", type=int, default=1,
                        help="uncoalesced/coalesced streaming pairs to run back to back")
    parser.add_argument("--no-readme", action="store_true")
    parser.add_argument("--profile", action="store_true",
                        help="run the daemon under cProfile and print its loop's hot spots "
                        "(profiling inflates the CPU figures: implies --no-readme)")
    parser.add_argument("--py-spy", type=Path, default=None, metavar="DIR",
                        help="sample the daemon with py-spy in each streaming window; folded "
                        "stacks per thread go to DIR (implies --no-readme)")
    args = parser.parse_args()
    if args.py_spy is not None:
        args.py_spy.mkdir(parents=True, exist_ok=True)
    note = machine_note()
    provider = TimedProvider().start()
    results = run(ensure_opencode(), provider, args.idle, args.sessions, args.words,
                  args.profile, args.pairs, args.py_spy)
    text = table(results, args, note)
    print(text)
    if not (args.no_readme or args.profile or args.py_spy):
        write_section("Footprint", text)


if __name__ == "__main__":
    main()
