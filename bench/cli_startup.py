"""How long ``autoretry --help`` and the report commands take to start (issues 12 and 21).

    flock /tmp/autoretry-e2e.lock .venv/bin/python bench/cli_startup.py [--runs 10]
    flock /tmp/autoretry-e2e.lock .venv/bin/python bench/cli_startup.py --runs 5 \
        --db /tmp/autoretry-bench/opencode-1.18.33-1000000.db [--before /tmp/main-copy]

Wall time of each command line (a fresh process each run, median and min of ``--runs``), and
``python -X importtime -c "import opencode_autoretry.cli.main"``: the sum of every module's own
import time (median over the runs; importtime itself adds overhead, so compare it with
itself) and which heavy libraries the import pulls in. Goal: ``autoretry --help`` < 150 ms.

With ``--db`` (a DB bench/reports.py built), also each report command, text and ``--json``
(``diagnose``, ``diagnose 0``, ``trace``, ``errors``, ``timeline`` of the newest session), on a
warm report index (one ``diagnose 0`` builds it first, in a throwaway home): wall time, median
of ``--runs`` fresh processes, and ``-X importtime``'s module count and total (the least of 3
runs). With
``--before DIR`` (another checkout with its own ``.venv``, e.g. main from ``git archive``) the
same commands run from there too, interleaved with this tree's, so both see the same load.
Then text ``diagnose`` again with a stand-in daemon's heartbeat (a live process; doctor's line
recorded as the daemon records it, where the tree does).
Goal (issue 21): each report < 250 ms on a warm index at 1 M messages.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
HEAVY = ("apscheduler", "sqlite_utils", "watchdog", "psutil", "opencode_autoretry.daemon.loop")
COMMANDS = (["--help"], ["status", "--help"], ["diagnose", "--help"])


def wall_ms(argv: list[str], env: dict[str, str] | None = None) -> float:
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, cwd=ROOT, env=env)
    return (time.perf_counter() - start) * 1000


def importtime(module: str) -> tuple[float, list[str]]:
    """Sum of the self times (ms) and the top-level names of every module imported."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", f"import {module}"],
        check=True, capture_output=True, text=True, cwd=ROOT,
    )
    total_us, names = 0, []
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        self_us, _cumulative, name = line.removeprefix("import time:").split("|")
        total_us += int(self_us)
        names.append(name.strip())
    return total_us / 1000, names


def newest_session(db: Path) -> str:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        row = conn.execute("SELECT id FROM session ORDER BY time_updated DESC LIMIT 1").fetchone()
    finally:
        conn.close()
    return str(row[0])


def throwaway_env(home: Path, db: Path) -> dict[str, str]:
    """A home of its own (config, state, the report index) reading ``db``; no colour."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AUTORETRY_", "OPENCODE"))}
    env.update(HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"),
               XDG_DATA_HOME=str(home / ".local/share"), AUTORETRY_HOME=str(home / "state"),
               OPENCODE_DB=str(db), NO_COLOR="1")
    return env


def report_importtime(tree: Path, argv: list[str], env: dict[str, str]) -> tuple[int, float]:
    """Modules imported and the sum of their own import times (ms) for one report run."""
    done = subprocess.run(
        [str(tree / ".venv/bin/python"), "-X", "importtime", "-m", "opencode_autoretry.cli",
         *argv], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        cwd=ROOT, env=env,
    )
    total_us, count = 0, 0
    for line in done.stderr.splitlines():
        if line.startswith("import time:") and "self [us]" not in line:
            total_us += int(line.removeprefix("import time:").split("|")[0])
            count += 1
    return count, total_us / 1000


#: Run with a tree's own python in its throwaway home: a heartbeat of the live process
#: ``argv[1]`` (a stand-in daemon), carrying doctor's line as the daemon records it (issue 21;
#: a tree from before has no such record, and its diagnose runs the checks).
STAND_IN_DAEMON = """
import os, sys
from datetime import UTC, datetime
from opencode_autoretry.cli.context import AppContext
from opencode_autoretry.store.database import Store
os.umask(0o077)
app = AppContext({"opencode_db": None, "store": None}, None)
store, pid, now = app.settings().store, int(sys.argv[1]), datetime.now(tz=UTC)
info = {"started": now.isoformat(), "stopping": False, "bridges": [], "lines": {}}
def beat(extra):
    writer = Store.open(store)
    try:
        writer.beat(now, pid, {**info, **extra})
    finally:
        writer.close()
beat({})
try:
    from opencode_autoretry.diagnostics.doctor.report import summary_record
except ImportError:
    sys.exit(0)
beat({"doctor": summary_record(app.copy(), now)})
"""


def bench_live_daemon(
    trees: dict[str, Path], envs: dict[str, dict[str, str]], runs: int
) -> None:
    """Text ``diagnose`` with a (stand-in) daemon running: doctor's line recorded, or checked
    against the live process (the process table)."""
    stand_in = subprocess.Popen(["sleep", "3600"])
    try:
        print(f"\nWith a daemon running (a stand-in's heartbeat, doctor's line recorded where "
              f"the tree records it):\n\n| command | {' | '.join(trees)} |\n"
              f"|---|{'---|' * len(trees)}")
        for argv in (["diagnose"], ["diagnose", "0"]):
            times: dict[str, list[float]] = {name: [] for name in trees}
            for _ in range(runs):
                for name, tree in trees.items():  # the record is fresh for 45 s: anew each run
                    subprocess.run([str(tree / ".venv/bin/python"), "-c", STAND_IN_DAEMON,
                                    str(stand_in.pid)], check=True, env=envs[name], cwd=ROOT)
                    times[name].append(
                        wall_ms([str(tree / ".venv/bin/autoretry"), *argv], envs[name]))
            cells = [f"{statistics.median(t):.0f}, {min(t):.0f}" for t in times.values()]
            print(f"| `{' '.join(['autoretry', *argv])}` | {' | '.join(cells)} |")
    finally:
        stand_in.kill()
        stand_in.wait()


def index_ready(tree: Path, env: dict[str, str], limit_s: float = 1200) -> float:
    """Seconds until ``diagnose 0`` reads a finished report index: the first run scans and
    builds it in the background, and says so on stderr until it is done."""
    start = time.monotonic()
    while True:
        done = subprocess.run([str(tree / ".venv/bin/autoretry"), "diagnose", "0"], check=True,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                              cwd=ROOT, env=env)
        if "report index" not in done.stderr:
            return time.monotonic() - start
        if time.monotonic() - start > limit_s:
            raise SystemExit(f"the report index of {tree} was not ready in {limit_s:.0f} s")
        time.sleep(2)


def bench_reports(db: Path, runs: int, before: Path | None) -> None:
    session = newest_session(db)
    trees = {"after": ROOT, **({"before": before} if before else {})}
    homes = {name: Path(tempfile.mkdtemp(prefix=f"cli-startup-{name}-")) for name in trees}
    envs = {name: throwaway_env(homes[name], db) for name in trees}
    try:
        _bench_reports(db, runs, trees, envs, session)
    finally:  # each home holds a report index of the whole DB
        for home in homes.values():
            shutil.rmtree(home, ignore_errors=True)


def _bench_reports(db: Path, runs: int, trees: dict[str, Path],
                   envs: dict[str, dict[str, str]], session: str) -> None:
    for name, tree in trees.items():  # the runs below read the report index warm
        print(f"{name}: report index ready after {index_ready(tree, envs[name]):.0f} s")
    commands = [["diagnose"], ["diagnose", "0"], ["trace"], ["errors"], ["timeline", session]]
    heads = " | ".join(f"{n}: median ms, min | {n}: modules, importtime ms" for n in trees)
    print(f"\n| command | {heads} |\n|---|{'---|---|' * len(trees)}")
    for command in commands:
        for extra in ([], ["--json"]):
            argv = [*command, *extra]
            cells = []
            for name, tree in trees.items():
                wall_ms([str(tree / ".venv/bin/autoretry"), *argv], envs[name])  # warm-up
            times: dict[str, list[float]] = {name: [] for name in trees}
            for _ in range(runs):  # interleaved: both trees see the same load
                for name, tree in trees.items():
                    times[name].append(
                        wall_ms([str(tree / ".venv/bin/autoretry"), *argv], envs[name]))
            for name, tree in trees.items():  # importtime: the least of 3 (a loaded machine)
                count, total = min(report_importtime(tree, argv, envs[name]) for _ in range(3))
                cells.append(f"{statistics.median(times[name]):.0f}, {min(times[name]):.0f} | "
                             f"{count}, {total:.0f}")
            label = " ".join(["autoretry", *argv]).replace(session, "SESSION")
            print(f"| `{label}` | {' | '.join(cells)} |")
    bench_live_daemon(trees, envs, runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--db", type=Path, help="time the report commands on this DB too")
    parser.add_argument("--before", type=Path, help="a checkout to compare with (its .venv)")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    print(f"{os.cpu_count()} vCPUs, load average {load:.1f}; {args.runs} runs each\n")
    print("| command | median ms | min ms |\n|---|---|---|")
    for extra in COMMANDS:
        wall_ms([str(BIN / "autoretry"), *extra])  # warm the page cache and .pyc files
        times = [wall_ms([str(BIN / "autoretry"), *extra]) for _ in range(args.runs)]
        label = " ".join(["autoretry", *extra])
        print(f"| `{label}` | {statistics.median(times):.0f} | {min(times):.0f} |")
    totals: list[float] = []
    names: list[str] = []
    for _ in range(args.runs):
        total, names = importtime("opencode_autoretry.cli.main")
        totals.append(total)
    pulled = [h for h in HEAVY if any(n == h or n.startswith(h + ".") for n in names)]
    print(f"\n`import opencode_autoretry.cli.main`: {len(names)} modules, importtime total "
          f"{statistics.median(totals):.0f} ms (median); heavy libraries pulled in: "
          f"{', '.join(pulled) or 'none'}")
    if args.db is not None:
        print()
        bench_reports(args.db, args.runs, args.before)


if __name__ == "__main__":
    main()
