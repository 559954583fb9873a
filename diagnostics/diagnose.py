"""``autoretry diagnose [DAYS]``: health of the set-up and every abnormal step in the window.

Candidates come from two scans: the message rows created since the cut (found by a binary
search over rowids, so ``diagnose 7`` never reads older rows) and the parts (tool calls
written as text). Cheap raw-text tests clear most rows and JSON is parsed only for the rest,
so the findings do not depend on OpenCode's key order (``dbtypes``); only candidates are
loaded with their parts and classified (see ``steps.py``). The scans and the health counts
run in worker threads on their own read-only connections (each scan hands back one row, so
it never waits for the GIL) while this thread classifies the batches already read.

``--json`` shape (stable; ``version`` bumps on incompatible change)::

    {"report": "diagnose", "version": 1, "days": 7, "since": ISO|null, "now": ISO,
     "health": {"db": path, "db_bytes": int, "sessions": int, "messages": int, "parts": int,
                "versions": [str], "daemon": {"heartbeat": ISO|null, "pid": int|null,
                "age_seconds": float|null}, "bridge": {"installed": bool, "path": str}},
     "kinds": {"<kind>": {"count": int, "rows": [{"time": ISO, "session_id", "message_id",
               "finish": str|null, "tokens": {input, output, reasoning, cache_read,
               cache_write}, "error": str|null, "reason": str}]}},   # every abnormal kind
     "injections": {"count": int, "by_state": {"<state>": int}},
     "ownerless_sessions": [session_id],   # sessions of the summary's no_owner turns
     "repetition_stops": {"count": int, "rows": [{"time": ISO, "session_id",
        "message_id": str|null, "turn_id": str|null, "decision_id": int, "action",
        "taken": "reminded"|"replanned"|"stopped"|"skipped", "reason": str,  # the detector's
        "trimmed": bool, "keep_chars": int|null}]},   # added in issue 6; oldest first
     "summary": {...}}   # added in issue 12: what autoretry did (see summary_view.py)

``rows`` hold the newest ``--limit`` findings of each kind and repetition stops (all with
``--limit 0``); ``count`` is always the full number. Times are UTC ISO 8601.
"""

from __future__ import annotations

import gc
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, tzinfo
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

from opencode_autoretry.cli.process_end import leave
from opencode_autoretry.diagnostics.index.session_digest import Key, LazyFindings, LightPart
from opencode_autoretry.diagnostics.records import DaemonRecords
from opencode_autoretry.diagnostics.render import (
    OK,
    RULE,
    WARN,
    Style,
    dump_json,
    iso,
    session_ref,
    short_id,
    tokens_json,
    tokens_text,
)
from opencode_autoretry.diagnostics.repetition_view import (
    RepetitionStop,
    repetition_stops,
    stop_json,
    stop_line,
)
from opencode_autoretry.diagnostics.steps import (
    ABNORMAL_KINDS,
    ClassifiedStep,
    StepMemo,
    classify_rows,
    classify_streamed,
    relabel_daemon_aborts,
)
from opencode_autoretry.diagnostics.summary.tally import Summary, build_summary
from opencode_autoretry.diagnostics.window import window_start
from opencode_autoretry.models import Kind
from opencode_autoretry.opencode.db import MessageRow, OpenCodeDB

if TYPE_CHECKING:
    from concurrent.futures import Future


@dataclass(frozen=True)
class Health:
    """diagnose's health lines: OpenCode's DB, its rows and versions, the daemon, the bridge."""

    db_path: Path
    db_bytes: int
    sessions: int
    messages: int
    parts: int
    versions: tuple[str, ...]
    heartbeat: datetime | None
    daemon_pid: int | None
    bridge_path: Path
    bridge_installed: bool


@dataclass(frozen=True)
class DiagnoseReport:
    """What diagnose found in its window, drawn as text or ``--json``."""

    days: int
    since: datetime | None
    now: datetime
    health: Health
    findings: Mapping[Kind, Sequence[ClassifiedStep]]  # a LazyFindings on the index
    injections: Mapping[str, int]
    ownerless: tuple[str, ...]
    repetition: tuple[RepetitionStop, ...] = ()
    summary: Summary | None = None  # issue 12


def read_health(db: OpenCodeDB, records: DaemonRecords, bridge_path: Path) -> Health:
    beat = records.heartbeat
    return Health(
        db_path=db.path,
        db_bytes=db.size_bytes(),
        sessions=db.count("session"),
        messages=db.count("message"),
        parts=db.count("part"),
        versions=tuple(db.versions()),
        heartbeat=beat.at if beat else None,
        daemon_pid=beat.pid if beat else None,
        bridge_path=bridge_path,
        bridge_installed=bridge_path.is_file(),
    )


Tagged = TypeVar("Tagged")


def _group(
    found: Iterable[tuple[Tagged, ClassifiedStep]],
) -> dict[Kind, list[tuple[Tagged, ClassifiedStep]]]:
    """The abnormal findings by kind, in their order; a runaway loop once, at its first
    step's place, shown by its newest step. Each keeps its tag (diagnose's key, or None)."""
    by_kind: dict[Kind, list[tuple[Tagged, ClassifiedStep]]] = {k: [] for k in ABNORMAL_KINDS}
    looping: dict[tuple[str, str], int] = {}
    for tag, item in found:
        kind = item.verdict.kind
        if kind not in by_kind:
            continue
        if kind is Kind.RUNAWAY:  # one row per loop: its newest step
            key = (item.step.session_id, item.turn.id)
            if key in looping:
                place = looping[key]
                by_kind[kind][place] = (by_kind[kind][place][0], item)
                continue
            looping[key] = len(by_kind[kind])
        by_kind[kind].append((tag, item))
    return by_kind


#: Rows per message-scan batch: classification overlaps the reading of the next batches.
SCAN_BATCH_ROWS = 50_000
#: Rows per part-scan chunk (read after the message batches, while this thread classifies).
PART_BATCH_ROWS = 250_000
#: Worker threads for the scans. With this thread classifying, 3 threads share the CPUs;
#: a third worker made it slower on 2 CPUs (more CPU time in contention, ~1.1 s vs ~0.95 s).
SCAN_WORKERS = 2


def _step_candidates(
    reader: type[OpenCodeDB], path: Path, since: datetime | None, rowids: tuple[int, int]
) -> list[MessageRow]:
    db = reader.open(path)
    try:
        return db.step_candidates(since, rowids)
    finally:
        db.close()


def _markup_candidates(
    reader: type[OpenCodeDB], path: Path, since: datetime | None, rowids: tuple[int, int]
) -> list[MessageRow]:
    db = reader.open(path)
    try:
        return db.tool_markup_candidates(since, rowids)
    finally:
        db.close()


def _from_digests(
    db: OpenCodeDB,
    memo: StepMemo,
    records: DaemonRecords,
    since: datetime | None,
    now: datetime,
    runaway_steps: int,
    zone: tzinfo | None,
) -> tuple[list[tuple[Key, ClassifiedStep]], LightPart] | None:
    """diagnose's findings from the report index's session digests (None: not on the index)."""
    # Imported here: a report that is not on the index never loads the index's modules.
    from opencode_autoretry.diagnostics.index.digest_findings import digest_findings
    from opencode_autoretry.diagnostics.index.indexed_db import GroupMemo, IndexedDB

    if not (isinstance(memo, GroupMemo) and isinstance(db, IndexedDB) and memo.reads_digests):
        return None
    return digest_findings(
        db, memo, records, since=since, now=now, runaway_steps=runaway_steps, zone=zone
    )


def _read_health(
    reader: type[OpenCodeDB], path: Path, records: DaemonRecords, bridge_path: Path
) -> Health:
    db = reader.open(path)
    try:
        return read_health(db, records, bridge_path)
    finally:
        db.close()


@contextmanager
def paused_gc() -> Iterator[None]:
    """Parsing thousands of rows allocates many acyclic dicts; the cyclic collector would
    re-scan them over and over (measured: half of diagnose's classification time). On the
    way out they move to the oldest generation (freeze, then unfreeze), so the first young
    collection does not walk them all at once (measured: 70 ms at 1 M messages)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        gc.unfreeze()
        if was_enabled:
            gc.enable()


#: Told how many of the scan's batches have been read: ``progress(done, total)``.
Progress = Callable[[int, int], None]


def _results(
    futures: list[Future[list[MessageRow]]], progress: Progress | None
) -> Iterator[list[MessageRow]]:
    """The batches in order, each reported to ``progress`` once read."""
    for done, future in enumerate(futures, 1):
        rows = future.result()
        if progress is not None:
            progress(done, len(futures))
        yield rows


def build_diagnose(
    db: OpenCodeDB,
    records: DaemonRecords,
    *,
    now: datetime,
    days: int,
    bridge_path: Path,
    runaway_steps: int = 6,
    zone: tzinfo | None = None,
    progress: Progress | None = None,
    memo: StepMemo | None = None,
) -> DiagnoseReport:
    """``zone``: the one the summary's days are counted in (None: the machine's);
    ``progress(done, total)`` is called as each scan batch is read; ``memo`` remembers
    classifications (the report index: ``indexed_db.py``; the same findings, sooner)."""
    since = window_start(now, days)
    if memo is not None:
        with paused_gc():  # ~10 000 light rows and fates: tuples the collector would walk
            fast = _from_digests(db, memo, records, since, now, runaway_steps, zone)
            if fast is not None:
                keyed, light = fast
                health_now = read_health(db, records, bridge_path)
                return _report(db, records, days, since, now, health_now, keyed, light, zone)
    # The scans are pure SQL (SQLite releases the GIL), so they run on their own read-only
    # connections in worker threads while this thread classifies the batches already read.
    # (Imported here: a report from the index never needs them; concurrent.futures brings
    # logging, ~8 ms.)
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=SCAN_WORKERS) as pool, paused_gc():
        reader = type(db)  # the worker connections read the same way (a subclass too)
        # Order of the queue: the message batches first, so the classification (the longest
        # single-threaded part) starts at once and ends with them; the part chunks then keep
        # the workers busy while it catches up, and only their few rows wait for the end.
        health = pool.submit(_read_health, reader, db.path, records, bridge_path)
        ranges = db.rowid_ranges("message", since, SCAN_BATCH_ROWS)
        batches = [pool.submit(_step_candidates, reader, db.path, since, r) for r in ranges]
        chunks = db.rowid_ranges("part", since, PART_BATCH_ROWS)
        markup = [pool.submit(_markup_candidates, reader, db.path, since, r) for r in chunks]
        results = _results([*batches, *markup], progress)
        found = classify_streamed(
            db,
            (next(results) for _ in batches),
            now=now,
            runaway_steps=runaway_steps,
            lean=True,
            memo=memo,
        )
        seen = {c.step.id for c in found}
        # A step's parts may straddle two chunks: one row per step.
        extra = {r.id: r for chunk in results for r in chunk if r.id not in seen}
        found += classify_rows(
            db, list(extra.values()), now=now, runaway_steps=runaway_steps, lean=True, memo=memo
        )
    # The scanned rows (the futures hold them) and every step classified, the normal ones
    # too: a report's process ends without freeing them (cli/process_end.py: ~0.25 s here).
    leave(batches, markup, found, extra, seen)
    found = relabel_daemon_aborts(found, records)
    with paused_gc():  # the summary allocates per failed step; the heap holds all of them
        return _report(
            db, records, days, since, now, health.result(), ((None, i) for i in found), None,
            zone,
        )


def _report(
    db: OpenCodeDB,
    records: DaemonRecords,
    days: int,
    since: datetime | None,
    now: datetime,
    health: Health,
    found: Iterable[tuple[Key | None, ClassifiedStep]],
    light: LightPart | None,
    zone: tzinfo | None,
) -> DiagnoseReport:
    """``found`` in diagnose's order, with their keys when ``light`` adds the digests' rows."""
    injections = [i for i in records.injections if since is None or i.created >= since]
    grouped = _group(found)
    findings: dict[Kind, Sequence[ClassifiedStep]] = {
        kind: (
            LazyFindings(kind, cast(list[tuple[Key, ClassifiedStep]], items), light)
            if light is not None
            else tuple(item for _, item in items)
        )
        for kind, items in grouped.items()
    }
    stops = tuple(s for s in repetition_stops(records) if since is None or s.decision.at >= since)
    summary = build_summary(
        db, findings, records.since(since), stops, since=since, now=now, zone=zone,
        tallied=light.folds if light is not None else (),
    )
    return DiagnoseReport(
        days=days,
        since=since,
        now=now,
        health=health,
        findings=findings,
        injections=dict(Counter(i.state for i in injections)),
        ownerless=summary.ownerless_sessions,  # the summary's count, session by session
        repetition=stops,
        summary=summary,
    )


def _row_json(item: ClassifiedStep) -> dict[str, Any]:
    step = item.step
    return {
        "time": iso(step.time_created),
        "session_id": step.session_id,
        "message_id": step.id,
        "finish": step.finish,
        "tokens": tokens_json(step.tokens),
        "error": step.error.name if step.error else None,
        "reason": item.verdict.reason,
    }


Row = TypeVar("Row")


def _newest(items: Sequence[Row], limit: int) -> Sequence[Row]:
    return items if limit <= 0 else items[-limit:]


def diagnose_json(report: DiagnoseReport, limit: int = 20) -> str:
    health = report.health
    age = (report.now - health.heartbeat).total_seconds() if health.heartbeat else None
    body: dict[str, Any] = {
        "days": report.days,
        "since": iso(report.since),
        "now": iso(report.now),
        "health": {
            "db": str(health.db_path),
            "db_bytes": health.db_bytes,
            "sessions": health.sessions,
            "messages": health.messages,
            "parts": health.parts,
            "versions": list(health.versions),
            "daemon": {
                "heartbeat": iso(health.heartbeat),
                "pid": health.daemon_pid,
                "age_seconds": age,
            },
            "bridge": {"installed": health.bridge_installed, "path": str(health.bridge_path)},
        },
        "kinds": {
            str(kind): {"count": len(items), "rows": [_row_json(i) for i in _newest(items, limit)]}
            for kind, items in report.findings.items()
        },
        "injections": {
            "count": sum(report.injections.values()),
            "by_state": dict(sorted(report.injections.items())),
        },
        "ownerless_sessions": list(report.ownerless),
        "repetition_stops": {
            "count": len(report.repetition),
            "rows": [stop_json(s) for s in _newest(report.repetition, limit)],
        },
    }
    if report.summary is not None:
        from opencode_autoretry.diagnostics.summary.view import summary_json

        body["summary"] = summary_json(report.summary)
    return dump_json("diagnose", body)


def _size(value: int) -> str:
    amount = float(value)
    for unit in ("B", "KB", "MB", "GB"):
        if amount < 1024 or unit == "GB":
            return f"{amount:.0f} {unit}" if unit == "B" else f"{amount:.1f} {unit}"
        amount /= 1024
    return f"{value} B"


def _title_lines(report: DiagnoseReport, style: Style) -> list[str]:
    window = "all time" if report.since is None else f"last {report.days} days"
    lines = [style.head(f"autoretry diagnose — {window}"), RULE]
    if report.summary is not None:
        from opencode_autoretry.diagnostics.summary.view import render_summary

        lines += [render_summary(report.summary, style), RULE]
    return lines


def _health_lines(report: DiagnoseReport, style: Style) -> list[str]:
    health = report.health
    if health.heartbeat is None:
        daemon = style.warn("no heartbeat (the daemon has not run)")
    else:
        age = int((report.now - health.heartbeat).total_seconds())
        when = style.local(health.heartbeat)
        text = f"last heartbeat {when} ({age}s ago, pid {health.daemon_pid})"
        daemon = style.good(text) if age < 120 else style.warn(text + " — stale")
    bridge = style.good("installed") if health.bridge_installed else style.warn("not installed")
    return [
        f"DB:        {health.db_path} ({_size(health.db_bytes)})",
        f"Rows:      sessions={health.sessions} messages={health.messages} parts={health.parts}",
        f"OpenCode:  {', '.join(health.versions) or '-'}",
        f"Daemon:    {daemon}",
        f"Bridge:    {bridge} ({health.bridge_path})",
        RULE,
    ]


def _section(kind: Kind, items: Sequence[ClassifiedStep], style: Style, limit: int) -> list[str]:
    if not items:
        return [f"{kind}: {style.good(OK + ' none')}"]
    lines = [f"{kind}: {style.warn(f'{WARN} {len(items)}')}"]
    for item in _newest(items, limit):
        step = item.step
        lines.append(
            f"  [{style.local(step.time_created)}] ses={session_ref(step.session_id)} "
            f"msg={short_id(step.id)} finish={step.finish or '-'} {tokens_text(step.tokens)}"
        )
        lines.append(f"      {style.dim(item.verdict.reason)}")
    if 0 < limit < len(items):
        lines.append(style.dim(f"  … {len(items) - limit} older (use --limit 0 for all)"))
    return lines


def render_diagnose(report: DiagnoseReport, style: Style, limit: int = 20) -> str:
    lines = _title_lines(report, style) + _health_lines(report, style)
    for kind, items in report.findings.items():
        lines.extend(_section(kind, items, style, limit))
    lines.append(RULE)
    states = ", ".join(f"{k}={v}" for k, v in sorted(report.injections.items()))
    count = sum(report.injections.values())
    lines.append(f"Injections by the daemon: {count}" + (f" ({states})" if states else ""))
    if report.ownerless:
        lines.append(style.warn(f"Sessions with no live owner: {len(report.ownerless)}"))
        lines.extend(f"  {session_ref(sid)}" for sid in report.ownerless)
        if report.summary is not None:  # the same turns the summary's "no live owner N" counts
            turns = report.summary.left_alone["no_owner"]
            lines.append(style.dim(f"  {turns} failed turn{'s' * (turns != 1)} left alone in them"))
    else:
        lines.append(f"Sessions with no live owner: {style.good(OK + ' none')}")
    lines.extend(_repetition_lines(report.repetition, style, limit))
    return "\n".join(lines)


def _repetition_lines(stops: tuple[RepetitionStop, ...], style: Style, limit: int) -> list[str]:
    if not stops:
        return [f"Repetition stops: {style.good(OK + ' none')}"]
    lines = [f"Repetition stops: {style.warn(f'{WARN} {len(stops)}')}"]
    for stop in _newest(stops, limit):
        lines.append(stop_line(stop, style))
        lines.append(f"      {style.dim(stop.detector_reason)}")
    if 0 < limit < len(stops):
        lines.append(style.dim(f"  … {len(stops) - limit} older (use --limit 0 for all)"))
    return lines
