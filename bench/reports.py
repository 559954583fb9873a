"""Benchmark: the four reports vs the prior art's diagnostic SQL, on synthetic 1.18 DBs.

    .venv/bin/python bench/reports.py [--sizes 100000,1000000] [--repeat 3] [--check]
    flock /tmp/e2e.lock .venv/bin/python bench/reports.py --e2e [--sizes 1000000] [--check]

``--e2e`` (the headline, issue 21: bench/report_processes.py) times each command as a user
waits for it, a fresh ``autoretry`` process, on a typical and a heavy DB whose 30 days end
today; the in-process figures below are the breakdown.

Builds (once, cached under $BENCH_DIR or /tmp/autoretry-bench, never in the repo) a DB with
the pinned OpenCode 1.18.33 DDL holding N messages and 2 parts per message: sessions of ~200
messages, turns of a user message and 1-4 assistant steps (tool calls, then an answer) over
30 days, with ~1% failed steps (blank, forged length, think-only, tool-as-text, resets, 429,
500, timeouts, aborts, silent, runaway loops) and a continuation after a third of them. Then
times each report in-process (build + JSON) and, on the same DB, the prior art's queries
(``json_extract`` + ``LIKE`` full scans over ``message.data``, prior-art.md §b1).
``--check`` first compares ``diagnose``'s full JSON (0 and 7 days) with the same report built
on ``ExhaustiveDB`` (tests/diagnostics/exhaustive_db.py: every row parsed, no shortcut).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "diagnostics"))

import report_processes  # noqa: E402
from exhaustive_db import ExhaustiveDB, diagnose_report, reference_verdict  # noqa: E402
from opencode_rows import (  # noqa: E402
    BASE_MS,
    PROJECT_ID,
    SCHEMA,
    aborted_error,
    api_error,
    ascending_id,
    assistant_data,
    descending_id,
    dumps,
    marker_text,
    reasoning_part,
    step_finish,
    text_part,
    tokens,
    tool_part,
    user_data,
)

from opencode_autoretry.diagnostics.diagnose import build_diagnose, diagnose_json  # noqa: E402
from opencode_autoretry.diagnostics.errors import build_errors, errors_json  # noqa: E402
from opencode_autoretry.diagnostics.index.indexed_db import GroupMemo  # noqa: E402
from opencode_autoretry.diagnostics.index.report_index import prepare, save  # noqa: E402
from opencode_autoretry.diagnostics.records import DaemonRecords  # noqa: E402
from opencode_autoretry.diagnostics.timeline.report import build_timeline, timeline_json  # noqa: E402
from opencode_autoretry.diagnostics.trace.report import build_trace, trace_json  # noqa: E402
from opencode_autoretry.opencode.db import OpenCodeDB  # noqa: E402

SPAN_MS = 30 * 86_400_000
NOW = datetime.fromtimestamp((BASE_MS + SPAN_MS) / 1000, tz=UTC) + timedelta(minutes=30)
SESSION_SIZE = 200
FAILURE_RATE = 0.01
ANSWER = "Here is the change. " * 12
TOOL_ECHO = "listing the files of the project\n" * 8
FAILURES = (
    "blank",
    "forged_length",
    "think_only",
    "tool_as_text",
    "reset",
    "rate_limit",
    "server",
    "timeout",
    "abort",
    "silent",
    "runaway",
)


class Builder:
    """Generates rows in creation order and writes them with executemany."""

    def __init__(
        self, total: int, seed: int = 7, failure_rate: float = FAILURE_RATE, base_ms: int = BASE_MS
    ) -> None:
        self.total = total
        self.failure_rate = failure_rate
        self.base_ms = base_ms
        self.random = random.Random(seed)
        self.step_ms = max(1, SPAN_MS // total)
        self.clock = base_ms
        self.counter = 0
        self.messages: list[tuple] = []
        self.parts: list[tuple] = []
        self.sessions: list[tuple] = []

    def _id(self, prefix: str) -> str:
        self.counter += 1
        return ascending_id(prefix, self.clock, self.counter)

    def add(self, sid: str, data: dict, parts: list[dict]) -> str:
        self.clock += self.step_ms
        data["time"]["created"] = self.clock
        if "completed" in data["time"]:
            data["time"]["completed"] = self.clock + 1
        mid = self._id("msg")
        self.messages.append((mid, sid, self.clock, self.clock, dumps(data)))
        for part in parts:
            self.parts.append((self._id("prt"), mid, sid, self.clock, self.clock, dumps(part)))
        return mid

    def session(self) -> str:
        self.counter += 1
        sid = descending_id("ses", self.clock, self.counter)
        slug = f"bench-{self.counter}"
        self.sessions.append(
            (sid, PROJECT_ID, slug, "/work/project", "", "bench", "1.18.33", self.clock, self.clock)
        )
        return sid

    def step(self, sid: str, parent: str, kind: str) -> str:
        ms = self.clock
        done = ms + 1
        if kind == "tool":
            parts = [
                tool_part("bash", "completed", str(ms), ms, ms),
                step_finish("tool-calls", tokens(900, 40)),
            ]
            data = assistant_data(
                parent, ms, finish="tool-calls", toks=tokens(900, 40), completed_ms=done
            )
        elif kind == "answer":
            parts = [text_part(ANSWER, ms, ms), step_finish("stop", tokens(1200, 120))]
            data = assistant_data(
                parent, ms, finish="stop", toks=tokens(1200, 120), completed_ms=done
            )
        else:
            data, parts = self.failure(parent, kind, ms)
        return self.add(sid, data, parts)

    def failure(self, parent: str, kind: str, ms: int) -> tuple[dict, list[dict]]:
        done, zero = ms + 1, tokens(1200, 0)
        errors = {
            "reset": api_error("Connection reset by server", code="ECONNRESET"),
            "rate_limit": api_error(
                "Rate limit exceeded", status=429, headers={"retry-after": "2"}
            ),
            "server": api_error("Internal Server Error", status=500),
            "timeout": api_error("SSE read timed out", code="ProviderResponseStreamError"),
            "abort": aborted_error(),
        }
        if kind in errors:
            data = assistant_data(
                parent, ms, finish=None, toks=tokens(0, 0), error=errors[kind], completed_ms=done
            )
            return data, [text_part("", ms, ms), {"type": "step-start"}]
        finish, toks, content = {
            "blank": ("stop", zero, None),
            "forged_length": ("length", zero, None),
            "think_only": ("stop", tokens(1200, 0, reasoning=30), reasoning_part("Hmm.", ms, ms)),
            "tool_as_text": (
                "stop",
                tokens(1200, 30),
                text_part("<function_calls><invoke>", ms, ms),
            ),
            "silent": (None, tokens(0, 0), text_part("", ms, ms)),
            "runaway": ("unknown", tokens(0, 0), text_part("", ms, ms)),
        }[kind]
        start = {"type": "step-start"}
        parts = [content or start, step_finish(finish, toks) if finish else start]
        return assistant_data(parent, ms, finish=finish, toks=toks, completed_ms=done), parts

    def turn(self, sid: str) -> int:
        ms = self.clock
        user = self.add(
            sid,
            user_data(ms),
            [
                {"type": "text", "text": "Please continue the refactor."},
                {"type": "text", "text": "<system-reminder/>", "synthetic": True},
            ],
        )
        written = 1
        for _ in range(self.random.randint(0, 3)):
            self.step(sid, user, "tool")
            written += 1
        if self.random.random() < self.failure_rate * (written + 1):
            kind = self.random.choice(FAILURES)
            for _ in range(7 if kind == "runaway" else 1):
                self.step(sid, user, kind)
                written += 1
            if self.random.random() < 1 / 3:
                marker = marker_text("Continue.", self.counter, kind, self.counter)
                follow = self.add(
                    sid, user_data(self.clock), [marker, {"type": "text", "text": ""}]
                )
                self.step(sid, follow, "answer")
                written += 2
        else:
            self.step(sid, user, "answer")
            written += 1
        return written

    def build(self, path: Path) -> None:
        conn = sqlite3.connect(path)
        conn.executescript("PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF;")
        statements = [s.strip() for s in SCHEMA.read_text().split(";\n") if s.strip()]
        conn.executescript(";\n".join(s for s in statements if "INDEX" not in s) + ";")
        conn.execute(
            "INSERT INTO project (id, worktree, vcs, time_created, time_updated, sandboxes)"
            " VALUES (?, '/work/project', 'git', ?, ?, '[]')",
            (PROJECT_ID, self.base_ms, self.base_ms),
        )
        written = 0
        with conn:
            while written < self.total:
                sid, in_session = self.session(), 0
                while in_session < SESSION_SIZE and written < self.total:
                    count = self.turn(sid)
                    in_session += count
                    written += count
                if len(self.messages) > 200_000:
                    self.flush(conn)
            self.flush(conn)
        conn.executescript(";\n".join(s for s in statements if "INDEX" in s) + ";")
        conn.execute("PRAGMA journal_mode = WAL")  # as OpenCode leaves it
        conn.close()

    def flush(self, conn: sqlite3.Connection) -> None:
        conn.executemany(
            "INSERT INTO session (id, project_id, slug, directory, path, title, version, "
            "time_created, time_updated) VALUES (?,?,?,?,?,?,?,?,?)",
            self.sessions,
        )
        conn.executemany("INSERT INTO message VALUES (?,?,?,?,?)", self.messages)
        conn.executemany("INSERT INTO part VALUES (?,?,?,?,?,?)", self.parts)
        self.sessions, self.messages, self.parts = [], [], []


PRIOR_ART_DIAGNOSE = {
    "blank": """SELECT id, session_id, time_created, data FROM message WHERE time_created >= ?
        AND json_extract(data, '$.role') = 'assistant'
        AND json_extract(data, '$.finish') IN ('stop', 'length')
        AND COALESCE(json_extract(data, '$.tokens.output'), 0) = 0
        AND json_extract(data, '$.error') IS NULL ORDER BY time_created DESC LIMIT 20""",
    "fake_length": """SELECT id, session_id, time_created, data FROM message WHERE time_created >= ?
        AND json_extract(data, '$.role') = 'assistant' AND json_extract(data, '$.finish') = 'length'
        AND COALESCE(json_extract(data, '$.tokens.output'), 0) = 0
        AND COALESCE(json_extract(data, '$.tokens.input'), 0) > 0
        ORDER BY time_created DESC LIMIT 20""",
    "disconnect": """SELECT id, session_id, time_created, data FROM message WHERE time_created >= ?
        AND (data LIKE '%Connection failed%' OR data LIKE '%Server disconnected%'
        OR data LIKE '%ECONNRESET%' OR data LIKE '%fetch failed%' OR data LIKE '%socket%')
        ORDER BY time_created DESC LIMIT 20""",
    "silent": """SELECT id, session_id, time_created, data FROM message WHERE time_created >= ?
        AND json_extract(data, '$.role') = 'assistant' AND json_extract(data, '$.finish') IS NULL
        AND json_extract(data, '$.error') IS NULL
        AND COALESCE(json_extract(data, '$.tokens.output'), 0) = 0
        ORDER BY time_created DESC LIMIT 20""",
    "zero_token": """SELECT id, session_id, time_created, data FROM message WHERE time_created >= ?
        AND json_extract(data, '$.role') = 'assistant'
        AND COALESCE(json_extract(data, '$.tokens.input'), 0) = 0
        AND COALESCE(json_extract(data, '$.tokens.output'), 0) = 0
        ORDER BY time_created DESC LIMIT 20""",
    "triggers": """SELECT id, session_id, time_created, data FROM message WHERE time_created >= ?
        AND json_extract(data, '$.role') = 'user'
        AND (data LIKE '%继续！！！%' OR data LIKE '%"继续"%')
        ORDER BY time_created DESC LIMIT 20""",
}
PRIOR_ART_INFO = ("SELECT count(*) FROM message", "SELECT count(*) FROM session")


def prior_art_diagnose(path: Path, since_ms: int) -> int:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    for sql in PRIOR_ART_INFO:  # printDbInfo
        conn.execute(sql).fetchone()
    found = 0
    for sql in PRIOR_ART_DIAGNOSE.values():
        found += len(conn.execute(sql, (since_ms,)).fetchall())
    conn.close()
    return found


def timed(action: Callable[[], object], repeat: int) -> tuple[float, float, float]:
    """(first run, median run, median CPU time of the process) in seconds."""
    runs, cpu = [], []
    for _ in range(repeat):
        started, started_cpu = time.perf_counter(), time.process_time()
        action()
        runs.append(time.perf_counter() - started)
        cpu.append(time.process_time() - started_cpu)
    return runs[0], statistics.median(runs), statistics.median(cpu)


def busiest_session(path: Path) -> str:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    sid = conn.execute(
        "SELECT session_id FROM message WHERE rowid = (SELECT max(rowid) / 2 FROM message)"
    ).fetchone()[0]
    conn.close()
    return sid


def measure(path: Path, repeat: int) -> dict[str, tuple[float, float, float]]:
    records, bridge = DaemonRecords(), Path("/nonexistent/autoretry.js")
    sid = busiest_session(path)
    since7 = BASE_MS + SPAN_MS - 7 * 86_400_000

    def report(build: Callable[[OpenCodeDB], str]) -> Callable[[], object]:
        def run() -> object:
            db = OpenCodeDB.open(path)
            try:
                return build(db)
            finally:
                db.close()

        return run

    def diagnose(days: int) -> Callable[[OpenCodeDB], str]:
        return lambda db: diagnose_json(
            build_diagnose(db, records, now=NOW, days=days, bridge_path=bridge)
        )

    def timeline(db: OpenCodeDB) -> str:
        session = db.find_sessions(sid)[0]
        return timeline_json(build_timeline(db, session, records, now=NOW))

    return {
        "diagnose 0": timed(report(diagnose(0)), repeat),
        "diagnose 7": timed(report(diagnose(7)), repeat),
        "timeline (1 session)": timed(report(timeline), repeat),
        "errors": timed(report(lambda db: errors_json(build_errors(db, None, now=NOW))), repeat),
        "errors KEYWORD": timed(
            report(lambda db: errors_json(build_errors(db, "reset", now=NOW))), repeat
        ),
        "trace 7": timed(
            report(
                lambda db: trace_json(
                    build_trace(db, records, now=NOW, since=NOW - timedelta(days=7), days=7)
                )
            ),
            repeat,
        ),
        "trace 0": timed(report(lambda db: trace_json(build_trace(db, records, now=NOW))), repeat),
        "prior art diagnose 0 (6 checks)": timed(lambda: prior_art_diagnose(path, 0), repeat),
        "prior art diagnose 7 (6 checks)": timed(lambda: prior_art_diagnose(path, since7), repeat),
    }


def drop_caches() -> str:
    """Empty the page cache (root only) so the next run reads the DB from the disk."""
    try:
        os.sync()
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return "page cache dropped"
    except OSError as exc:
        return f"page cache NOT dropped ({exc}): the cold figures are warm"


def indexed(path: Path, state: Path, build: Callable[[OpenCodeDB, GroupMemo], str]) -> str:
    """One report run on the report index: sync it, build the report, keep the memo."""
    prepared = prepare(path, state)
    assert prepared is not None, "the report index could not be used"
    db = prepared.reader.open(path)
    try:
        return build(db, prepared.memo)
    finally:
        db.close()
        save(prepared)


def index_reports(limit: int = 20) -> dict[str, Callable[[OpenCodeDB, GroupMemo], str]]:
    """The timed reports (``--limit 20`` as the CLI's default and measure(); ``limit=0`` for
    the reference check, which compares every row)."""
    records, bridge = DaemonRecords(), Path("/nonexistent/autoretry.js")

    def diagnose(days: int) -> Callable[[OpenCodeDB, GroupMemo], str]:
        return lambda db, memo: diagnose_json(
            build_diagnose(db, records, now=NOW, days=days, bridge_path=bridge, memo=memo),
            limit=limit,
        )

    return {
        "diagnose 0": diagnose(0),
        "diagnose 7": diagnose(7),
        "trace 0": lambda db, memo: trace_json(
            build_trace(db, records, now=NOW, memo=memo, rendered=True)  # as `trace --json`
        ),
    }


def measure_index(path: Path, repeat: int, check: bool) -> dict[str, tuple[float, float, float]]:
    """Cold first runs (the seed's queries, then the index build) and the later runs."""
    state = Path(tempfile.mkdtemp(prefix="autoretry-index-"))
    print(drop_caches())
    results = {"prior art diagnose 0, cold": timed(lambda: prior_art_diagnose(path, 0), 1)}
    print(drop_caches())
    builds = index_reports()
    results["index: diagnose 0, first run (cold)"] = timed(
        lambda: indexed(path, state, builds["diagnose 0"]), 1
    )
    for name, build in builds.items():
        results[f"index: {name}, later runs"] = timed(
            lambda b=build: indexed(path, state, b), repeat
        )
    for name in ("diagnose 0", "diagnose 7"):  # as if OpenCode had just written: the sync counts
        results[f"index: {name}, DB just written"] = timed(
            lambda b=builds[name]: (os.utime(path), indexed(path, state, b))[1], repeat
        )
    if check:
        for name, build in index_reports(limit=0).items():
            ours = indexed(path, state, build)
            days = 0 if name != "diagnose 7" else 7
            theirs = (
                diagnose_report(ExhaustiveDB, path, now=NOW, days=days)
                if name.startswith("diagnose")
                else plain_trace(path)
            )
            print(f"index: {name} same as the reference: {ours == theirs}")
            if ours != theirs:
                sys.exit(1)
    shutil.rmtree(state, ignore_errors=True)
    return results


def plain_trace(path: Path) -> str:
    db = OpenCodeDB.open(path)
    try:
        return trace_json(build_trace(db, DaemonRecords(), now=NOW))
    finally:
        db.close()


def print_index_ratios(results: dict[str, tuple[float, float, float]]) -> None:
    cold = results["prior art diagnose 0, cold"][0]
    first = results["index: diagnose 0, first run (cold)"][0]
    print(f"index first run (cold) vs the seed's queries (cold): {cold / first:.1f}x")
    seed0 = results["prior art diagnose 0 (6 checks)"][1]
    for name, seed in (("diagnose 0", "0"), ("diagnose 7", "7"), ("trace 0", "0")):
        ours, art = (
            results[f"index: {name}, later runs"],
            results[f"prior art diagnose {seed} (6 checks)"],
        )
        print(
            f"index {name} later runs vs the seed's diagnose {seed}: {art[1] / ours[1]:.0f}x "
            f"(median wall), vs the seed's diagnose 0: {seed0 / ours[1]:.0f}x"
        )


def check_diagnose(path: Path) -> bool:
    """Whether the fast prefilters give the same reports (0 and 7 days) as parsing every row."""
    verdicts = [reference_verdict(path, now=NOW, days=days) for days in (0, 7)]
    print("\n".join(line for line, _ in verdicts))
    return all(same for _, same in verdicts)


def print_ratios(results: dict[str, tuple[float, float, float]]) -> None:
    for days in (0, 7):
        ours, art = results[f"diagnose {days}"], results[f"prior art diagnose {days} (6 checks)"]
        wall, cpu = art[1] / ours[1], art[2] / ours[2]
        print(f"diagnose {days} vs prior art: {wall:.1f}x (median wall), {cpu:.1f}x (CPU)")


def ensure_db(
    size: int, base: Path, failure_rate: float = FAILURE_RATE, base_ms: int = BASE_MS
) -> Path:
    """The cached DB of ``size`` messages (built first if missing): its 30 days start at
    ``base_ms`` (default: the fixed date the in-process figures use)."""
    rate = "" if failure_rate == FAILURE_RATE else f"-failing{failure_rate:g}"
    start = "" if base_ms == BASE_MS else f"-from{base_ms}"
    path = base / f"opencode-1.18.33-{size}{rate}{start}.db"
    if not path.exists():
        partial = path.with_suffix(".building")
        partial.unlink(missing_ok=True)
        started = time.perf_counter()
        Builder(size, failure_rate=failure_rate, base_ms=base_ms).build(partial)
        partial.rename(path)
        print(f"built {path} in {time.perf_counter() - started:.1f} s", flush=True)
    return path


def end_to_end(sizes: list[int], base: Path, repeat: int, check: bool, heavy_rate: float) -> None:
    """The end-to-end table of each size's typical and heavy DB (report_processes)."""
    tools = report_processes.SeedTools(prior_art_diagnose, drop_caches, busiest_session)
    start = report_processes.first_day_ms()
    report_processes.compile_package()
    same = True
    for size in sizes:
        for label, rate in (("typical", FAILURE_RATE), ("heavy", heavy_rate)):
            path = ensure_db(size, base, failure_rate=rate, base_ms=start)
            name = f"{size:,} messages, {label} failure rate ({rate:g} per turn step)"
            same &= report_processes.measure_db(path, name, tools, repeat, check)
    if not same:
        sys.exit(1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", help="default: 100000,1000000 (--e2e: 1000000)")
    parser.add_argument("--repeat", type=int, help="default: 3 (--e2e: 5)")
    parser.add_argument("--check", action="store_true", help="compare with the reference first")
    parser.add_argument(
        "--index",
        action="store_true",
        help="also time the report index: cold first run vs the seed's cold queries, later "
        "runs (with --check: the index's reports compared with the reference)",
    )
    parser.add_argument(
        "--e2e",
        action="store_true",
        help="end to end: each command as a fresh `autoretry` process (cold first run, later "
        "runs) beside the seed's queries, on a typical and a heavy DB (--sizes default: 1000000; "
        "with --check: --json with and without the index, and vs the exhaustive reference)",
    )
    parser.add_argument(
        "--heavy-rate", type=float, default=0.04, help="--e2e: the heavy DB's failure rate"
    )
    args = parser.parse_args()
    base = Path(os.environ.get("BENCH_DIR") or "/tmp/autoretry-bench")
    base.mkdir(parents=True, exist_ok=True)
    print(
        f"sqlite {sqlite3.sqlite_version}, python {sys.version.split()[0]}, {os.cpu_count()} CPUs"
    )
    default_sizes = "1000000" if args.e2e else "100000,1000000"
    sizes = [int(s) for s in (args.sizes or default_sizes).split(",")]
    if args.e2e:
        end_to_end(sizes, base, args.repeat or 5, args.check, args.heavy_rate)
        return
    for size in sizes:
        path = ensure_db(size, base)
        mb = path.stat().st_size / 2**20
        print(f"\n{size:,} messages, {mb:,.0f} MB ({path})")
        if args.check and not args.index and not check_diagnose(path):  # --index: below
            sys.exit(1)
        print(f"load average before: {os.getloadavg()[0]:.2f}")
        print(f"{'report':34} {'first':>9} {'median':>9} {'cpu':>9}")
        repeat = args.repeat or 3
        results = measure_index(path, repeat, args.check) if args.index else {}
        results |= measure(path, repeat)
        for name, (first, median, cpu) in results.items():
            print(f"{name:34} {first * 1000:7.0f}ms {median * 1000:7.0f}ms {cpu * 1000:7.0f}ms")
        print_ratios(results)
        if args.index:
            print_index_ratios(results)
        print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
