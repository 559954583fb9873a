"""RSS and CPU of the resident daemon, idle and with 20 sessions streaming (issue 5).

    .venv/bin/python bench/daemon_footprint.py [--idle 60] [--sessions 20] [--words 1500]
                                              [--pairs 1] [--window MS]

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
import time
from dataclasses import replace
from pathlib import Path

from daemon_harness import (
    TURN_S,
    DefaultDaemon,
    OpenCodeServer,
    Sampler,
    TimedProvider,
    Usage,
    ensure_opencode,
    first_decision_ms,
    machine_note,
    rig,
    start_opencode,
    start_streams,
    write_section,
)


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
    ids = start_streams(server, provider, sessions, words)
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
    return replace(usage, deltas_per_s=published, extra=(
                 f"{rate:.0f} chunks/s sent by the provider, {published:.0f} "
                 f"`message.part.delta`/s published by OpenCode, ~{line_rate:.0f} bridge "
                 f"lines/s read by the daemon; decisions: {decided}; "
                 f"bridge drop reports: {len(dropped)}"))


def print_profile(path: Path) -> None:
    """The decision loop's (main thread's) hottest functions over the whole run."""
    if path.exists():
        pstats.Stats(str(path)).sort_stats("tottime").print_stats(20)


def run(binary: Path, provider: TimedProvider, idle_s: float, sessions: int, words: int,
        profile: bool = False, pairs: int = 1, spy: Path | None = None,
        window: int | None = None) -> dict[str, Usage]:
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
                for name, coalesce in (("streaming, uncoalesced", 0), ("streaming", window)):
                    server.stop()
                    server = start_opencode(binary, bench, coalesce)
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
    parser.add_argument("--window", type=int, default=None, metavar="MS",
                        help="the coalesced runs' window (AUTORETRY_BRIDGE_COALESCE_MS; default: "
                        "the bridge's own, 50 ms): what a wider one would save")
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
                  args.profile, args.pairs, args.py_spy, args.window)
    text = table(results, args, note)
    print(text)
    if not (args.no_readme or args.profile or args.py_spy):
        write_section("Footprint", text)


if __name__ == "__main__":
    main()
