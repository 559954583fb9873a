"""Fault to decision while 20 sessions stream, against the same with no load (issue 21).

    .venv/bin/python bench/daemon_under_load.py [--faults 20] [--kinds blank,http400_disconnect]
        [--sessions 20] [--words 1500] [--rounds 2] [--no-bridge]

One daemon (default settings) and one OpenCode 1.18.33 with the bridge (default coalescing),
in one process and run. Phases alternate, ``--rounds`` times: *no load* (only the faults) and
*under load*: ``--sessions`` sessions stream non-repeating prose the whole time (one SSE chunk
per word every 20 ms each, ~1 000 deltas/s in all, as in ``daemon_footprint.py``; a stream that
ends is replaced at once by a new session), while the faults run in sessions of their own.
Faults are those of ``daemon_latency.py`` (``blank``, ``http400_disconnect``), the kinds taking
turns, one at a time, each started 0.5-1.5 s (seeded random) after the previous one's session
went idle; latency = ``decisions.at`` minus the moment the fake provider sent the faulty
response's last byte. Also reported per phase: the daemon's CPU (psutil, whole window), the
deltas OpenCode published per second, and that the streamed sessions got no decision.
Goal: p95 <= 50 ms under load.
"""

from __future__ import annotations

import argparse
import queue
import random
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field, replace
from pathlib import Path

from daemon_harness import (
    FaultTiming,
    OpenCodeServer,
    Rig,
    Sampler,
    TimedProvider,
    Usage,
    bridge_home,
    ensure_opencode,
    fault_latency,
    first_decision_ms,
    machine_note,
    plain_home,
    rig,
    start_opencode,
    start_streams,
    summary,
    wait_for,
    write_section,
)

GOAL_P95_MS = 50.0
NO_LOAD, LOAD = "no load", "under load"


class Streams:
    """Keeps ``sessions`` sessions streaming until ``stop``: each stream that ends is replaced
    by a new session's (prompted from a thread of its own, never from the provider's)."""

    def __init__(self, server: OpenCodeServer, provider: TimedProvider, sessions: int,
                 words: int) -> None:
        self.server, self.provider, self.words = server, provider, words
        self.sessions = sessions
        self.ids: list[str] = []
        self._ended: queue.Queue[object] = queue.Queue()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._replace, daemon=True)

    def start(self) -> Streams:
        self.provider.on_stream_end = lambda: self._ended.put(None)
        self.ids = start_streams(self.server, self.provider, self.sessions, self.words)
        self._thread.start()
        return self

    def _replace(self) -> None:
        while not self._stopping.is_set():
            try:
                self._ended.get(timeout=0.2)
            except queue.Empty:
                continue
            if self._stopping.is_set():
                return
            session = self.server.create_session()["id"]
            self.ids.append(session)
            self.server.prompt_async(session,
                                     f"Tell me a long story [[s:bench_stream:{self.words}]]")

    def stop(self) -> None:
        """No new streams; the running ones end on their own (their sessions are checked)."""
        self._stopping.set()
        self.provider.on_stream_end = None
        self._thread.join(timeout=30)


@dataclass
class Phase:
    timings: dict[str, list[FaultTiming]] = field(default_factory=lambda: defaultdict(list))
    usages: list[Usage] = field(default_factory=list)
    streamed_decided: int = 0  # streamed sessions the daemon decided about (must stay 0)
    streamed: int = 0


def faults_window(server: OpenCodeServer, bench: Rig, provider: TimedProvider, phase: Phase,
                  name: str, kinds: list[str], faults: int, jitter: random.Random) -> None:
    """``faults`` of each kind, the kinds taking turns; the daemon's CPU over the window."""
    daemon = bench.daemon
    assert daemon is not None and daemon.process is not None
    chunks0, published0 = provider.chunks, len(server.events.of_type("message.part.delta"))
    sampler = Sampler(daemon.process.pid).begin()
    for _ in range(faults):
        for kind in kinds:
            tag = f"{name.replace(' ', '')}{kind.replace('_', '')}{len(phase.timings[kind])}"
            phase.timings[kind].append(fault_latency(server, daemon, provider, kind, tag))
            time.sleep(0.5 + jitter.random())  # the next fault at another phase of the tick
    usage = sampler.end()
    published = len(server.events.of_type("message.part.delta")) - published0
    rate = (provider.chunks - chunks0) / usage.wall
    phase.usages.append(replace(usage, extra=f"{rate:.0f} chunks/s sent",
                                deltas_per_s=published / usage.wall))


def run(binary: Path, provider: TimedProvider, kinds: list[str], faults: int, sessions: int,
        words: int, rounds: int, bridge: bool = True) -> dict[str, Phase]:
    phases = {NO_LOAD: Phase(), LOAD: Phase()}
    jitter = random.Random(21)
    per_round = -(-faults // rounds)
    with rig("ar-load-", binary, provider, bridge_home if bridge else plain_home) as bench:
        bench.new_daemon().start()
        server = start_opencode(binary, bench, None, bridge)
        for done in range(0, faults, per_round):
            count = min(per_round, faults - done)
            faults_window(server, bench, provider, phases[NO_LOAD], NO_LOAD, kinds, count,
                          jitter)
            print(f"{NO_LOAD}: {phases[NO_LOAD].usages[-1]}", flush=True)
            streams = Streams(server, provider, sessions, words).start()
            try:
                faults_window(server, bench, provider, phases[LOAD], LOAD, kinds, count,
                              jitter)
            finally:
                streams.stop()
            print(f"{LOAD}: {phases[LOAD].usages[-1]}", flush=True)
            settle(server, bench, streams, phases[LOAD])
    return phases


def settle(server: OpenCodeServer, bench: Rig, streams: Streams, phase: Phase) -> None:
    """Waits for the streams to end (the next no-load window must be quiet) and counts the
    streamed sessions the daemon decided about: ordinary streams, so there must be none."""
    assert bench.daemon is not None
    def ended() -> bool:
        idle = {e["properties"].get("sessionID") for e in server.events.of_type("session.idle")}
        return idle.issuperset(streams.ids)

    wait_for(ended, streams.words * 0.1 + 60, "every streamed session ending", 0.5)
    phase.streamed += len(streams.ids)
    phase.streamed_decided += sum(first_decision_ms(bench.daemon, s) is not None
                                  for s in streams.ids)


def cpu_cell(usages: list[Usage]) -> str:
    wall = sum(u.wall for u in usages)
    cpu = sum(u.cpu for u in usages)
    deltas = sum(u.deltas_per_s * u.wall for u in usages)
    return f"{100 * cpu / wall:.2f} % at {deltas / wall:.0f} deltas/s ({wall:.0f} s)"


def split_cell(timings: list[FaultTiming]) -> str:
    """p50 / p95 of OpenCode's part (to its ``/event`` stream) and of the rest (bridge,
    socket, daemon), where the SSE arrival was seen."""
    seen = [t for t in timings if t.published is not None]
    if not seen:
        return ""
    opencode = summary([t.published for t in seen if t.published is not None])
    rest = summary([t.latency - t.published for t in seen if t.published is not None])
    return (f"{opencode['p50']:.0f} / {opencode['p95']:.0f} ms; "
            f"{rest['p50']:.0f} / {rest['p95']:.0f} ms")


def table(phases: dict[str, Phase], kinds: list[str], note: str) -> str:
    lines = [
        "| fault | phase | faults | p50 | p95 | max | p95 under load / no load | goal p95 "
        "| OpenCode's part; the rest: p50 / p95 | decision (most common) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for kind in kinds:
        base = summary([t.latency for t in phases[NO_LOAD].timings[kind]])
        for name, phase in phases.items():
            timings = phase.timings[kind]
            reasons = [t.reason for t in timings]
            s = summary([t.latency for t in timings])
            ratio = f"{s['p95'] / base['p95']:.2f}x" if name == LOAD and base["p95"] else ""
            goal = (f"<= {GOAL_P95_MS:.0f} ms {'met' if s['p95'] <= GOAL_P95_MS else '**missed**'}"
                    if name == LOAD else "baseline")
            common = max(set(reasons), key=reasons.count).split(" (")[0]
            lines.append(f"| `{kind}` | {name} | {s['n']} | {s['p50']:.0f} ms "
                         f"| {s['p95']:.0f} ms | {s['max']:.0f} ms | {ratio} | {goal} "
                         f"| {split_cell(timings)} | {common} |")
    load = phases[LOAD]
    return (
        "`.venv/bin/python bench/daemon_under_load.py` (real OpenCode 1.18.33 with the bridge, "
        f"daemon defaults; {note}). One daemon and one OpenCode for the whole run; *no load* "
        "and *under load* windows alternate. Under load, 20 sessions stream non-repeating prose "
        "(one SSE chunk per word every 20 ms each; a stream that ends is replaced by a new "
        "session at once) while the faults run one after the other in sessions of their own, "
        "the kinds taking turns, each 0.5-1.5 s after the previous one's session went idle. "
        "Latency = `decisions.at` minus the moment the fake provider sent the faulty response's "
        "last byte. *OpenCode's part*: until the turn's end (idle or error) arrived over "
        "OpenCode's `/event` stream in the bench process (the bridge gets the same event in "
        "OpenCode's process); *the rest*: from there to the decision (bridge, socket, daemon)."
        "\n\n" + "\n".join(lines)
        + f"\n\nDaemon CPU over the windows (faults included): no load "
        f"{cpu_cell(phases[NO_LOAD].usages)}, under load {cpu_cell(load.usages)}. Streamed "
        f"sessions the daemon decided about: {load.streamed_decided} of {load.streamed}."
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--faults", type=int, default=20, help="per fault kind and phase")
    parser.add_argument("--kinds", default="blank,http400_disconnect")
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--words", type=int, default=1500)
    parser.add_argument("--rounds", type=int, default=2,
                        help="no-load/under-load window pairs the faults are spread over")
    parser.add_argument("--no-bridge", action="store_true",
                        help="OpenCode without the plugin: the daemon decides from the DB "
                        "(skip: no live owner); shows OpenCode's part without the bridge's "
                        "work in its process (implies --no-readme)")
    parser.add_argument("--no-readme", action="store_true")
    args = parser.parse_args()
    note = machine_note()
    kinds = args.kinds.split(",")
    provider = TimedProvider().start()
    phases = run(ensure_opencode(), provider, kinds, args.faults, args.sessions, args.words,
                 args.rounds, not args.no_bridge)
    for kind in kinds:
        for name, phase in phases.items():
            print(f"{kind} {name} ms: " + ", ".join(
                f"{t.latency:.0f}" + ("" if t.published is None else f" ({t.published:.0f})")
                for t in phase.timings[kind]))
    text = table(phases, kinds, note)
    print(text)
    if not (args.no_readme or args.no_bridge):
        write_section("Fault to decision under load", text)


if __name__ == "__main__":
    main()
