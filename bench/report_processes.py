"""End to end (issue 21): each report as a user waits for it, a fresh ``autoretry`` process.

``bench/reports.py --e2e`` calls ``measure_db`` for each DB. Every run is the venv's console
script with its own throwaway HOME, XDG dirs and AUTORETRY_HOME, ``OPENCODE_DB`` set and stdout
going to a file (not a terminal); wall time is ``perf_counter`` around ``subprocess.run``, CPU
the ``RUSAGE_CHILDREN`` delta (the process and what it waited for). The first run starts
from an empty state dir and a dropped page cache, beside the seed's queries (also cold, then
warm). Work the first run leaves running in the background is waited for, by any process
whose command line or environment names the throwaway state dir, before the later runs.
"""

from __future__ import annotations

import compileall
import json
import os
import resource
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psutil
from exhaustive_db import ExhaustiveDB, diagnose_report

import opencode_autoretry

CLI = Path(sys.executable).with_name("autoretry")
GOAL_S = 0.25  # later runs, end to end
HELP_GOAL_S = 0.1
BACKGROUND_TIMEOUT_S = 900.0
#: The later runs, each in text and with --json ({session}: the timeline's session).
LATER = (
    "diagnose", "diagnose 0", "trace", "trace 0", "errors", "errors reset", "timeline {session}"
)
#: Run right after ``os.utime`` on the DB, as if OpenCode had just written it (the index's
#: sync then counts rows instead of trusting an untouched file).
JUST_WRITTEN = ("diagnose 0 --json", "diagnose --json")
#: Commands with ``--no-index``: ``--check`` compares their ``--json`` with and without it.
INDEXED = ("diagnose", "diagnose 0", "trace", "trace 0")
#: The reports' top-level fields that legitimately differ between two runs a few seconds
#: apart: the clock and the window's start derived from it.
VARYING = frozenset({"now", "since"})
#: Environment variables that could point a run at the real user's files.
INHERITED_PREFIXES = ("AUTORETRY_", "OPENCODE_", "XDG_")
#: Left out of the runs' environment: a user's install has compiled bytecode (pip compiles a
#: wheel's modules when it installs them); with this set, as on some CI machines, every
#: process would compile the modules it imports from source again (~30-60 ms here).
NOT_INHERITED = frozenset({"PYTHONDONTWRITEBYTECODE"})


@dataclass(frozen=True)
class SeedTools:
    """What ``reports.py`` lends (it imports this module, so nothing is imported back)."""

    queries: Callable[[Path, int], int]  # the seed's six diagnose queries since a time (ms)
    drop_caches: Callable[[], str]
    session_of: Callable[[Path], str]  # the session the timeline shows


@dataclass(frozen=True)
class Run:
    wall: float
    cpu: float
    stdout: str


@dataclass
class Timing:
    runs: list[Run] = field(default_factory=list)

    @property
    def first(self) -> float:
        return self.runs[0].wall

    @property
    def median(self) -> float:
        return statistics.median(r.wall for r in self.runs)

    @property
    def least(self) -> float:
        return min(r.wall for r in self.runs)

    @property
    def cpu(self) -> float:
        return statistics.median(r.cpu for r in self.runs)


@dataclass(frozen=True)
class Background:
    wall: float
    cpu: float  # the processes' own CPU time at their last sighting (a lower bound)
    processes: int


def first_day_ms(today: datetime | None = None) -> int:
    """UTC midnight 30 days before today: the synthetic DB's 30 days end today (the CLI reads
    the real clock), and the cached DB is reused all day."""
    now = today or datetime.now(UTC)
    midnight = now.replace(hour=0, minute=0, second=0, microsecond=0)
    return int((midnight - timedelta(days=30)).timestamp() * 1000)


class Sandbox:
    """A throwaway HOME, XDG dirs and state dir for the runs on one DB."""

    def __init__(self, db: Path) -> None:
        self.db = db
        self.root = Path(tempfile.mkdtemp(prefix="autoretry-e2e-"))
        self.state = self.root / "state"
        dirs = {"HOME": "home", "XDG_CONFIG_HOME": "config", "XDG_DATA_HOME": "data"}
        for name in dirs.values():
            (self.root / name).mkdir()
        inherited = {
            k: v for k, v in os.environ.items()
            if not k.startswith(INHERITED_PREFIXES) and k not in NOT_INHERITED
        }
        self.env = inherited | {k: str(self.root / v) for k, v in dirs.items()}
        self.env |= {"AUTORETRY_HOME": str(self.state), "OPENCODE_DB": str(db)}

    @property
    def bridge(self) -> Path:
        """Where the CLI looks for the bridge plugin (``diagnose``'s health names it)."""
        return self.root / "config" / "opencode" / "plugins" / "autoretry.js"

    def run(self, args: list[str]) -> Run:
        """One ``autoretry`` process; stdout to a file, so it ends when the process does even
        if something it started keeps running."""
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            started = time.perf_counter()
            done = subprocess.run([str(CLI), *args], stdout=out, stderr=err, env=self.env)
            wall = time.perf_counter() - started
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            out.seek(0)
            err.seek(0)
            if done.returncode != 0:
                sys.exit(f"autoretry {' '.join(args)} exited {done.returncode}: "
                         f"{err.read().decode(errors='replace')[-2000:]}")
            cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
            return Run(wall, cpu, out.read().decode())

    def lingering(self) -> list[psutil.Process]:
        """Processes still working for this sandbox (started by a run, not waited for)."""
        mine, found = str(self.state), []
        for proc in psutil.process_iter():
            try:
                if any(mine in arg for arg in proc.cmdline()) or (
                    proc.environ().get("AUTORETRY_HOME") == mine
                ):
                    found.append(proc)
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
        return found

    def wait_background(self) -> Background | None:
        """None if nothing is left running; else wait until it has all ended."""
        started, cpu, seen = time.perf_counter(), dict[int, float](), set[int]()
        while procs := self.lingering():
            if time.perf_counter() - started > BACKGROUND_TIMEOUT_S:
                names = ", ".join(f"{p.pid} {' '.join(p.cmdline())[:80]}" for p in procs)
                sys.exit(f"background work still running after {BACKGROUND_TIMEOUT_S:.0f} s: "
                         f"{names}")
            for proc in procs:
                seen.add(proc.pid)
                try:
                    times = proc.cpu_times()
                    cpu[proc.pid] = times.user + times.system
                except psutil.Error:
                    continue
            time.sleep(0.05)
        if not seen:
            return None
        return Background(time.perf_counter() - started, sum(cpu.values()), len(seen))

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def seed_runs(tools: SeedTools, db: Path, since_ms: int, repeat: int) -> Timing:
    """The seed's queries in this process (no interpreter start: in the seed's favour)."""
    timing = Timing()
    for _ in range(repeat):
        started, started_cpu = time.perf_counter(), time.process_time()
        tools.queries(db, since_ms)
        timing.runs.append(
            Run(time.perf_counter() - started, time.process_time() - started_cpu, "")
        )
    return timing


@dataclass
class Results:
    """One DB's figures, in the order they were taken."""

    seed_cold: Timing
    first: Timing
    background: Background | None
    seed0: Timing
    seed7: Timing
    later: dict[str, Timing] = field(default_factory=dict)
    waits: dict[str, Background] = field(default_factory=dict)  # background after later runs


def timed_later(sandbox: Sandbox, results: Results, command: str, repeat: int,
                variant: str = "", before: Callable[[], object] = lambda: None) -> None:
    timing, name = Timing(), command + variant
    for _ in range(repeat):
        before()
        timing.runs.append(sandbox.run(command.split()))
        if waited := sandbox.wait_background():  # nothing may run beside the next run
            results.waits[name] = waited
    results.later[name] = timing


def just_written(db: Path) -> Callable[[], object]:
    return lambda: os.utime(db)


def measure(sandbox: Sandbox, tools: SeedTools, repeat: int) -> Results:
    db = sandbox.db
    print(tools.drop_caches())
    seed_cold = seed_runs(tools, db, 0, 1)
    print(tools.drop_caches())
    first = Timing([sandbox.run(["diagnose", "0"])])
    background = sandbox.wait_background()
    since7 = int((datetime.now(UTC) - timedelta(days=7)).timestamp() * 1000)
    results = Results(
        seed_cold, first, background, seed_runs(tools, db, 0, repeat),
        seed_runs(tools, db, since7, repeat),
    )
    session = tools.session_of(db)
    for command in LATER:
        for suffix in ("", " --json"):
            timed_later(sandbox, results, command.format(session=session) + suffix, repeat)
    timed_later(sandbox, results, "--help", repeat)
    stat = db.stat()
    try:
        for command in JUST_WRITTEN:
            timed_later(sandbox, results, command, repeat, ", DB just written", just_written(db))
    finally:  # the DB's contents never change; give it back its own times too
        os.utime(db, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    return results


def ms(seconds: float) -> str:
    return f"{seconds * 1000:,.0f}".replace(",", " ") + " ms"


def ratio(seed: float, ours: float) -> str:
    return f"{seed / ours:.1f}x" if ours else "-"


def table(results: Results) -> list[str]:
    """The Markdown table: command, first, median, min, CPU, goal, the seed's time divided by
    this one (cold by cold; the warm seed's ``diagnose 0`` or ``diagnose 7`` for ``diagnose``)."""
    lines = [
        "| command | first | median | min | CPU (median) | goal | the seed's time ÷ this |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    seed_cold, first = results.seed_cold.first, results.first.first
    lines.append(f"| seed's `diagnose 0` queries, cold | {ms(seed_cold)} | | | "
                 f"{ms(results.seed_cold.cpu)} | | |")
    met = "met" if first <= seed_cold else "**not met**"
    twice = "met" if 2 * first <= seed_cold else "not met"
    lines.append(f"| `diagnose 0`, first run (cold, empty state dir) | **{ms(first)}** | | | "
                 f"{ms(results.first.cpu)} | ≤ seed: {met}; 2x: {twice} | "
                 f"{ratio(seed_cold, first)} (cold) |")
    if results.background:
        bg = results.background
        lines.append(f"| background work after the first run ({bg.processes} processes) | "
                     f"{ms(bg.wall)} | | | ≥ {ms(bg.cpu)} | | |")
    for name, seed in (("`diagnose 0`", results.seed0), ("`diagnose 7`", results.seed7)):
        lines.append(f"| seed's {name} queries, warm | {ms(seed.first)} | {ms(seed.median)} | "
                     f"{ms(seed.least)} | {ms(seed.cpu)} | | |")
    for command, timing in results.later.items():
        goal = HELP_GOAL_S if command == "--help" else GOAL_S
        verdict = "met" if timing.median < goal else "**not met**"
        seed = (results.seed0 if command.startswith("diagnose 0")
                else results.seed7 if command.startswith("diagnose") else None)
        versus = f"{ratio(seed.median, timing.median)} (warm)" if seed else ""
        lines.append(
            f"| `{command}` | {ms(timing.first)} | **{ms(timing.median)}** | "
            f"{ms(timing.least)} | {ms(timing.cpu)} | < {goal * 1000:.0f} ms: {verdict} | "
            f"{versus} |"
        )
    for command, waited in results.waits.items():
        lines.append(f"| background work after `{command}` | {ms(waited.wall)} | | | "
                     f"≥ {ms(waited.cpu)} | | |")
    return lines


def assistant_steps(db: Path) -> int:
    """Messages that are not the user's (a prefix test: the synthetic rows start with the role
    of a user message)."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return int(conn.execute(
            "SELECT count(*) FROM message WHERE data NOT LIKE '{\"role\":\"user\"%'"
        ).fetchone()[0])
    finally:
        conn.close()


def describe(db: Path, diagnose0_json: str, steps: int) -> str:
    report = json.loads(diagnose0_json)
    health, failed = report["health"], report["summary"]["failed"]["steps"]
    return (
        f"{db.name}: {db.stat().st_size / 2**20:,.0f} MB, {health['sessions']:,} sessions, "
        f"{health['messages']:,} messages, {failed:,} failed steps of {steps:,} assistant "
        f"steps ({failed / steps:.1%})"
    )


def without_varying(report: dict[str, object]) -> dict[str, object]:
    return {k: v for k, v in report.items() if k not in VARYING}


def differences(ours: object, theirs: object, where: str = "") -> list[str]:
    """Where two JSON values differ (paths, the first few)."""
    if isinstance(ours, dict) and isinstance(theirs, dict):
        found = []
        for key in sorted(set(ours) | set(theirs)):
            found += differences(ours.get(key), theirs.get(key), f"{where}.{key}")
        return found[:10]
    if isinstance(ours, list) and isinstance(theirs, list) and len(ours) == len(theirs):
        found = []
        for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
            found += differences(a, b, f"{where}[{i}]")
        return found[:10]
    return [] if ours == theirs else [where or "."]


def same_without_index(sandbox: Sandbox, command: str) -> bool:
    """``command --json`` on the warm index vs ``--no-index``, but for ``VARYING``. A window
    of days moves with the clock between the two runs: one retry before calling it a
    difference."""
    for attempt in (1, 2):
        indexed = json.loads(sandbox.run([*command.split(), "--json"]).stdout)
        scanned = json.loads(sandbox.run([*command.split(), "--json", "--no-index"]).stdout)
        diff = differences(without_varying(indexed), without_varying(scanned))
        if not diff:
            return True
        print(f"  `{command} --json`: index and --no-index differ at {', '.join(diff)}"
              f" (attempt {attempt})")
    return False


def check(sandbox: Sandbox) -> bool:
    """Each indexed report's --json equals --no-index; ``diagnose 0 --json --limit 0`` equals
    the exhaustive reference built at the same ``now`` (byte for byte)."""
    verdicts = {}
    for command in INDEXED:
        verdicts[f"`{command} --json` = `--no-index`"] = same_without_index(sandbox, command)
    ours = sandbox.run(["diagnose", "0", "--json", "--limit", "0"]).stdout
    now = datetime.fromisoformat(json.loads(ours)["now"])
    reference = diagnose_report(ExhaustiveDB, sandbox.db, now=now, days=0, bridge=sandbox.bridge)
    verdicts["`diagnose 0 --json --limit 0` = exhaustive reference"] = (
        ours.rstrip("\n") == reference
    )
    for name, same in verdicts.items():
        print(f"check: {name}: {'same' if same else 'DIFFERENT'}")
    print(f"check: ignored between two runs: {', '.join(sorted(VARYING))}")
    return all(verdicts.values())


def compile_package() -> None:
    """Compile the package's modules once, as pip does when it installs the wheel, so the
    runs read bytecode as a user's install does (an editable install has none until a
    process writes it)."""
    for root in opencode_autoretry.__path__:
        compileall.compile_dir(root, quiet=1)


def cpu_reference() -> float:
    """The best of 3 runs of a fixed pure-Python workload, in seconds: this VM's CPU speed
    drifts by up to 2x over minutes, so each table says how fast the machine was."""
    def work() -> float:
        started = time.perf_counter()
        total = 0
        for i in range(1_000_000):
            total += i % 7
        json.loads(json.dumps([{"n": n, "s": str(n)} for n in range(20_000)]))
        return time.perf_counter() - started

    return min(work() for _ in range(3))


def machine_line(when: str) -> str:
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    return f"{when}: load average {load}, CPU reference {ms(cpu_reference())}"


def measure_db(db: Path, label: str, tools: SeedTools, repeat: int, with_check: bool) -> bool:
    """Time one DB end to end and print its table; False if ``--check`` found a difference."""
    print(f"\n### {label}\n")
    steps = assistant_steps(db)
    print(machine_line("before"))
    sandbox = Sandbox(db)
    try:
        results = measure(sandbox, tools, repeat)
        print(machine_line("after"))
        print(describe(db, results.later["diagnose 0 --json"].runs[0].stdout, steps))
        if results.background:
            print(f"background work after the first run: {ms(results.background.wall)}")
        print("\n" + "\n".join(table(results)) + "\n")
        return check(sandbox) if with_check else True
    finally:
        sandbox.close()
