"""Cost of one DB-tailer tick on a 1 M-message DB vs a 10 k one (issue 5: must be flat).

    .venv/bin/python bench/daemon_tail.py [--sizes 10000,1000000] [--repeat 300] [--new 5]

Uses the synthetic OpenCode 1.18.33 DBs that bench/reports.py caches in ``$BENCH_DIR`` or
/tmp/autoretry-bench (built with its functions when missing; read-only here, never written).
Times the daemon's own code, ``daemon.sources.DbTailer.read_new()`` (messages after an id,
with their parts) on one read-only ``OpenCodeDB``:
- nothing new: the tailer primed at the end of the DB;
- ``--new`` new messages: a tailer whose cursor starts that many messages before the end
  (the reader reports an earlier maximum), so it reads exactly those rows and their parts,
  as after OpenCode appended them; the DB is never written;
- the tick's re-read of ``--new`` unfinished steps of unowned sessions
  (``UnownedWatch.recheck``, one primary-key read each).
Times are per call, wall (``perf_counter``) on a warm page cache; medians and p95.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import queue
import sqlite3
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from daemon_harness import machine_note, percentile, write_section
from reports import ensure_db

from opencode_autoretry.daemon.inbox import DbRows
from opencode_autoretry.daemon.intake.sources import DbTailer, UnownedWatch
from opencode_autoretry.models import Message, Role
from opencode_autoretry.opencode.db import OpenCodeDB


class RewoundReader:
    """An ``OpenCodeDB`` whose reported end is ``new`` messages earlier."""

    def __init__(self, db: OpenCodeDB, message_cursor: str | None) -> None:
        self._db = db
        self._message_cursor = message_cursor

    def max_message_id(self) -> str | None:
        return self._message_cursor

    def messages_after(self, message_id: str | None, limit: int) -> Sequence[Message]:
        return self._db.messages_after(message_id, limit)


def cursors(path: Path, new: int) -> tuple[str | None, list[str]]:
    """The message id ``new`` rows before the end, and the last ``new`` ids."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        ids = [r[0] for r in conn.execute(
            "SELECT id FROM message ORDER BY id DESC LIMIT ?", (new + 1,))]
    finally:
        conn.close()
    return ids[-1], list(reversed(ids[:-1]))


def timed(action: Callable[[], object], setup: Callable[[], Any] | None, repeat: int
          ) -> list[float]:
    """Milliseconds per call of ``action(setup())``-style runs; setup is not timed."""
    times: list[float] = []
    for _ in range(repeat):
        prepared = setup() if setup is not None else None
        began = time.perf_counter()
        action() if prepared is None else prepared()
        times.append((time.perf_counter() - began) * 1000)
    return times


def measure(path: Path, repeat: int, new: int) -> dict[str, list[float]]:
    db = OpenCodeDB.open(path)
    inbox: queue.Queue[object] = queue.Queue()
    message_cursor, last_ids = cursors(path, new)
    results: dict[str, list[float]] = {}

    cold = DbTailer(lambda: db, inbox, 60.0)
    cold.prime()
    began = time.perf_counter()
    cold.read_new()
    results["first tick on a fresh connection, nothing new"] = [
        (time.perf_counter() - began) * 1000]

    idle = DbTailer(lambda: db, inbox, 60.0)
    idle.prime()
    results["tick, nothing new"] = timed(idle.read_new, None, repeat)

    def rewound() -> Callable[[], object]:
        reader = RewoundReader(db, message_cursor)
        tailer = DbTailer(lambda: reader, inbox, 60.0)
        tailer.prime()
        return tailer.read_new

    results[f"tick, {new} new messages (with parts)"] = timed(lambda: None, rewound, repeat)
    latest = db.messages_by_id(last_ids)
    read = [m for m in latest if m.role is Role.ASSISTANT] or latest
    unfinished = tuple(dataclasses.replace(m, role=Role.ASSISTANT, time_completed=None,
                                           error=None) for m in read)

    def watch() -> Callable[[], object]:
        tracked = UnownedWatch()
        tracked.on_rows(DbRows(messages=unfinished), lambda _sid: False)
        return lambda: tracked.recheck(db, lambda _sid: False)

    results[f"tick's re-read of {len(unfinished)} unfinished steps"] = timed(
        lambda: None, watch, repeat)
    while not inbox.empty():
        inbox.get_nowait()
    db.close()
    return results


def table(by_size: dict[int, dict[str, list[float]]], note: str, args: argparse.Namespace) -> str:
    sizes = sorted(by_size)
    small, large = sizes[0], sizes[-1]
    head = " | ".join(f"{size:,} msgs: median, p95" for size in sizes)
    lines = [f"| tick | {head} | ratio {large:,}/{small:,} (median) |",
             "|---|" + "---|" * (len(sizes) + 1)]
    for name in by_size[small]:
        cells = []
        for size in sizes:
            values = by_size[size][name]
            if len(values) == 1:
                cells.append(f"{values[0]:.2f} ms (once)")
            else:
                cells.append(f"{statistics.median(values):.3f} ms, "
                             f"{percentile(values, 0.95):.3f} ms")
        ratio = statistics.median(by_size[large][name]) / statistics.median(by_size[small][name])
        lines.append(f"| {name} | {' | '.join(cells)} | {ratio:.2f}x |")
    return (
        f"`.venv/bin/python bench/daemon_tail.py` (synthetic DBs of bench/reports.py, "
        f"{args.repeat} calls each, wall time per call, warm page cache; {note}). The tailer "
        "reads `event` by rowid and `message` by id (`id > cursor ORDER BY id LIMIT 500`, "
        "then the parts through `part(message_id, id)`), so a tick is a few index seeks. The "
        "synthetic DBs have no `event` rows (OpenCode 1.18 leaves that table empty for v1 "
        "sessions); the event query is a rowid range seek of the same shape.\n\n"
        + "\n".join(lines)
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,1000000")
    parser.add_argument("--repeat", type=int, default=300)
    parser.add_argument("--new", type=int, default=5)
    parser.add_argument("--no-readme", action="store_true")
    args = parser.parse_args()
    note = machine_note()
    base = Path(os.environ.get("BENCH_DIR") or "/tmp/autoretry-bench")
    base.mkdir(parents=True, exist_ok=True)
    by_size = {}
    for size in (int(s) for s in args.sizes.split(",")):
        by_size[size] = measure(ensure_db(size, base), args.repeat, args.new)
        print(f"{size}: " + ", ".join(
            f"{k}: {statistics.median(v):.3f} ms" for k, v in by_size[size].items()), flush=True)
    text = table(by_size, note, args)
    print(text)
    if not args.no_readme:
        write_section("DB tail per tick", text)


if __name__ == "__main__":
    main()
