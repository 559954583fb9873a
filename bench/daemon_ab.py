"""Daemon CPU with 20 sessions streaming: two checkouts (daemon and bridge) A/B, alternating.

    .venv/bin/python bench/daemon_ab.py --before DIR [--after DIR] [--rounds 4]
                                        [--sessions 20] [--words 1500]

The machine's speed drifts by up to 2x over minutes, so a figure from another run says little:
this runs both versions in one rig (one OpenCode home, one fake provider), window after window,
the order swapped every round (before, after; after, before; ...). ``DIR`` is a checkout with
its own venv (``DIR/.venv``, the strict editable install), e.g. ``git worktree add`` or a
``git archive`` of the commit to compare; ``--after`` defaults to this checkout. For each
window: that version's bridge files are copied into the home's plugin dir, that version's
daemon is started (``DIR/.venv/bin/python -m opencode_autoretry.cli run``, defaults), OpenCode
1.18.33 is started (default coalescing), ``--sessions`` streams are prompted (as
``daemon_footprint.py``) and the daemon's CPU (psutil, user + system) is taken from all
streams flowing to the first one ending. Prints each window and the medians; writes nothing.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import threading
import time
from pathlib import Path

from daemon_footprint import lines_read
from daemon_harness import (
    TURN_S,
    DefaultDaemon,
    Rig,
    Sampler,
    TimedProvider,
    Usage,
    ensure_opencode,
    first_decision_ms,
    rig,
    start_opencode,
    start_streams,
)

HERE = Path(__file__).resolve().parent.parent


class CheckoutDaemon(DefaultDaemon):
    """``autoretry run`` from another checkout's venv (bytecode allowed, as a user's install)."""

    checkout: Path = HERE

    def start(self, timeout: float = 30.0) -> CheckoutDaemon:
        env = {
            **{k: v for k, v in os.environ.items()
               if not k.startswith(("AUTORETRY_", "XDG_")) and k != "PYTHONDONTWRITEBYTECODE"},
            "AUTORETRY_HOME": str(self.home),
            "AUTORETRY_SOCKET": str(self.socket),
            "AUTORETRY_CONFIG": str(self.config),
            "OPENCODE_DB": str(self.opencode_db),
        }
        self.process = subprocess.Popen(
            [str(self.checkout / ".venv" / "bin" / "python"), "-m", "opencode_autoretry.cli",
             "run", "--foreground"],
            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, text=True,
        )
        started = len(self._lines)
        threading.Thread(target=self._follow, args=(self.process,), daemon=True).start()
        self.wait_log("autoretry daemon", timeout, after=started)
        return self


def install_bridge(checkout: Path, config_dir: Path) -> None:
    """That checkout's bridge files over the installed ones (same names, see install.py)."""
    source = checkout / "plugin_bridge"
    shutil.copy(source / "autoretry.js", config_dir / "plugins" / "autoretry.js")
    for helper in (source / "autoretry").glob("*.js"):
        shutil.copy(helper, config_dir / "plugins" / "autoretry" / helper.name)


def window(bench: Rig, binary: Path, provider: TimedProvider, checkout: Path, sessions: int,
           words: int) -> tuple[str, float]:
    """One streaming window of ``checkout``: its line for the log, and its % of a core."""
    install_bridge(checkout, bench.home.config_dir)
    daemon = CheckoutDaemon(bench.root / "home", bench.socket, bench.home.data_dir / "opencode.db")
    daemon.checkout = checkout
    bench.daemon = daemon
    daemon.start()
    server = start_opencode(binary, bench, None)
    time.sleep(3)  # start-up (rebuild, adopt, first beats) is not streaming
    ids = start_streams(server, provider, sessions, words)
    published0 = len(server.events.of_type("message.part.delta"))
    beat0 = lines_read(daemon)
    pid = daemon.process.pid  # type: ignore[union-attr]
    sampler = Sampler(pid).begin()
    server.events.wait_for(
        lambda e: e.get("type") == "session.idle" and e["properties"].get("sessionID") in ids,
        words * 0.1 + TURN_S, "a streamed session finishing")
    usage = sampler.end()
    beat1 = lines_read(daemon, after=time.time())
    lines = (beat1[1] - beat0[1]) / max(beat1[0] - beat0[0], 1e-9)
    published = (len(server.events.of_type("message.part.delta")) - published0) / usage.wall
    for session in ids:
        server.wait_idle(session, TURN_S)
    decided = sum(first_decision_ms(daemon, session) is not None for session in ids)
    server.stop()
    bench.server = None
    daemon.stop()
    bench.daemon = None
    return (f"{usage.core_share:.2f} % ({usage.cpu * 1000:.0f} ms in {usage.wall:.1f} s, loop "
            f"thread {usage.loop_cpu * 1000:.0f} ms, other threads {other_threads(usage, pid)}"
            f"), ~{lines:.0f} bridge lines/s, {published:.0f} deltas/s, decisions {decided}"
            ), usage.core_share


def other_threads(usage: Usage, pid: int) -> str:
    """The CPU of every thread but the loop's (the busiest first, ms; unnamed: the bridge
    reader is the busiest, then the DB tailer and, before issue 21's inotify, watchdog's
    three threads), and how many threads ran at all in the window."""
    others = [used for tid, used in usage.threads if tid != pid]
    listed = "/".join(f"{used * 1000:.0f}" for used in others)
    return f"{listed} ms ({len(others)} threads)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=True)
    parser.add_argument("--after", type=Path, default=HERE)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--words", type=int, default=1500)
    args = parser.parse_args()
    versions = {"before": args.before.resolve(), "after": args.after.resolve()}
    provider = TimedProvider().start()
    binary = ensure_opencode()
    shares: dict[str, list[float]] = {name: [] for name in versions}
    with rig("ar-ab-", binary, provider) as bench:
        for index in range(args.rounds):
            order = list(versions) if index % 2 == 0 else list(reversed(versions))
            for name in order:
                load = os.getloadavg()[0]
                text, share = window(bench, binary, provider, versions[name], args.sessions,
                                     args.words)
                shares[name].append(share)
                print(f"round {index + 1} {name}: {text}; load {load:.1f}", flush=True)
    for name, values in shares.items():
        listed = ", ".join(f"{value:.2f}" for value in values)
        print(f"{name}: median {statistics.median(values):.2f} % ({listed})")


if __name__ == "__main__":
    main()
