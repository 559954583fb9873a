"""How far a looping stream gets before the daemon stops it, with and without the bridge's
delta coalescing (issue 12: coalescing must not move the repetition guard's catch distance).

    .venv/bin/python bench/daemon_catch.py [--loops 12] [--no-readme]

Real OpenCode 1.18.33 with the bridge, ``autoretry run`` with default settings, the e2e fake
provider's ``loop`` behaviour (the fake sentence streamed one word per chunk, 4 ms apart: ~5x
a fast real model, the worst case for a 50 ms window). For each loop: a new session, one
prompt; the provider logs how many words it had sent when OpenCode hung up (the daemon's abort).
Both modes run back to back on the same machine: ``uncoalesced`` starts OpenCode with
``AUTORETRY_BRIDGE_COALESCE_MS=0`` (every delta its own line), ``coalesced`` with the default.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from daemon_harness import (
    OpenCodeServer,
    TimedProvider,
    ensure_opencode,
    machine_note,
    rig,
    write_section,
)
from fake_loops import LoopLog, install

TURN_S = 60.0
MODES = {"uncoalesced": "0", "coalesced": None}


def run_mode(binary: Path, provider: TimedProvider, log: LoopLog, window: str | None,
             loops: int) -> list[tuple[int, int]]:
    with rig("ar-catch-", binary, provider) as bench:
        server = bench.server = OpenCodeServer.start(binary, bench.home, bench.opencode_env(window))
        server.ok("GET", "/path")
        daemon = bench.new_daemon().start()
        daemon.wait_log("connected: pid", TURN_S)
        log.clear()
        caught: list[tuple[int, int]] = []
        for index in range(loops):
            session = server.create_session()["id"]
            server.prompt_async(session, "Say it again and again [[s:loop:400]]")
            streamed = log.wait_for(index + 1, TURN_S)[index]
            assert not streamed.completed, f"loop {index} was never stopped: {streamed}"
            caught.append((streamed.words, streamed.chars))
            server.wait_idle(session, TURN_S)
        return caught


def table(results: dict[str, list[tuple[int, int]]], note: str) -> str:
    lines = ["| mode | loops | words before the stop: median, max | chars: median, max |",
             "|---|---|---|---|"]
    for mode, caught in results.items():
        words, chars = [w for w, _ in caught], [c for _, c in caught]
        lines.append(f"| {mode} | {len(caught)} | {statistics.median(words):.0f}, {max(words)} "
                     f"| {statistics.median(chars):.0f}, {max(chars)} |")
    return (
        f"`.venv/bin/python bench/daemon_catch.py` (real OpenCode 1.18.33 with the bridge, "
        f"daemon defaults, the fake provider's `loop` at one word per 4 ms; {note}). Words the "
        "provider had sent when OpenCode hung up on the daemon's abort, per looping stream; "
        "both modes back to back.\n\n" + "\n".join(lines)
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loops", type=int, default=12)
    parser.add_argument("--no-readme", action="store_true")
    args = parser.parse_args()
    note = machine_note()
    binary = ensure_opencode()
    provider = TimedProvider().start()
    log = install(provider.provider)
    results = {mode: run_mode(binary, provider, log, window, args.loops)
               for mode, window in MODES.items()}
    text = table(results, note)
    print(text)
    if not args.no_readme:
        write_section("Catch distance with coalescing", text)


if __name__ == "__main__":
    main()
