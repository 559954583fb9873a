"""The report index's later runs: per-session digests, the untouched-files sync, local days,
trace's rendered continuations. Each gives what the plain scan gives."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta, tzinfo
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from opencode_rows import tokens
from seeded_reports import NOW, Seeded

from opencode_autoretry.diagnostics.diagnose import build_diagnose, diagnose_json
from opencode_autoretry.diagnostics.index.report_index import prepare, refresh, save
from opencode_autoretry.diagnostics.index.session_digest import (
    SESSION,
    LazyFindings,
    LightPart,
    Objects,
    decode_digest,
    encode_digest,
    fits,
    grouped,
)
from opencode_autoretry.diagnostics.index.sync import files_signature
from opencode_autoretry.diagnostics.local_days import LocalDays, exact_day
from opencode_autoretry.diagnostics.records import DaemonRecords, load_records
from opencode_autoretry.diagnostics.render import Style
from opencode_autoretry.diagnostics.trace.report import (
    TraceReport,
    build_trace,
    render_trace,
    trace_json,
)
from opencode_autoretry.diagnostics.trace.rows import PLACEHOLDER, Rendered, render_item, splice
from opencode_autoretry.opencode.db import OpenCodeDB

BRIDGE = Path("/nonexistent/autoretry.js")
LATER = NOW + timedelta(hours=1)  # every seeded step settled


def _plain(
    path: Path, records: DaemonRecords, days: int, limit: int, zone: tzinfo | None = None
) -> str:
    db = OpenCodeDB.open(path)
    try:
        report = build_diagnose(db, records, now=LATER, days=days, bridge_path=BRIDGE, zone=zone)
        return diagnose_json(report, limit)
    finally:
        db.close()


def _indexed(
    path: Path, state: Path, records: DaemonRecords, days: int, limit: int,
    zone: tzinfo | None = None,
) -> str:
    prepared = prepare(path, state)
    assert prepared is not None
    db = prepared.reader.open(path)
    try:
        report = build_diagnose(
            db, records, now=LATER, days=days, bridge_path=BRIDGE, memo=prepared.memo, zone=zone
        )
    finally:
        db.close()
    save(prepared)
    return diagnose_json(report, limit)  # printed after the DB is closed, as the CLI does


@pytest.mark.parametrize("with_records", [False, True], ids=["empty store", "seeded store"])
def test_digests_give_the_scans_report(
    fresh_seeded: Seeded, tmp_path: Path, with_records: bool
) -> None:
    records = load_records(fresh_seeded.store) if with_records else DaemonRecords()
    assert not with_records or records.decisions  # the sessions with decisions: built in full
    state = tmp_path / "state"
    for _ in range(3):  # the first run digests the sessions, the later ones read them
        for days, limit in ((0, 0), (0, 1), (7, 0), (7, 20)):
            ours = _indexed(fresh_seeded.db, state, records, days, limit)
            assert ours == _plain(fresh_seeded.db, records, days, limit), (days, limit)


@pytest.mark.parametrize("zone", [ZoneInfo("Asia/Kathmandu"), ZoneInfo("America/Santiago")],
                         ids=str)
def test_a_report_in_another_zone_recounts_the_days_of_the_digests(
    fresh_seeded: Seeded, tmp_path: Path, zone: ZoneInfo, monkeypatch: pytest.MonkeyPatch
) -> None:
    from opencode_autoretry.diagnostics.index import light_fold

    state = tmp_path / "state"
    made_in_utc = _indexed(fresh_seeded.db, state, DaemonRecords(), 0, 0, UTC)
    assert made_in_utc == _plain(fresh_seeded.db, DaemonRecords(), 0, 0, UTC)
    recounted: list[str] = []
    tally = light_fold.session_tally

    def counting(rows, child, days):  # type: ignore[no-untyped-def]
        recounted.append(rows[0][SESSION] if rows else "")
        return tally(rows, child=child, days=days)

    monkeypatch.setattr(light_fold, "session_tally", counting)
    assert _indexed(fresh_seeded.db, state, DaemonRecords(), 0, 0, UTC) == made_in_utc
    assert recounted == []  # the same zone: the digests' own tallies
    ours = _indexed(fresh_seeded.db, state, DaemonRecords(), 0, 0, zone)
    assert ours == _plain(fresh_seeded.db, DaemonRecords(), 0, 0, zone)
    assert recounted, "another zone's offsets: the sessions are counted from their rows"


def test_a_later_run_reads_the_digests_summed_once(
    fresh_seeded: Seeded, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from opencode_autoretry.diagnostics.index import light_fold

    state = tmp_path / "state"
    plain = _plain(fresh_seeded.db, DaemonRecords(), 0, 0, UTC)
    decoded: list[bytes] = []
    decode = light_fold.decode_head

    def counting(blob: bytes):  # type: ignore[no-untyped-def]
        decoded.append(blob)
        return decode(blob)

    monkeypatch.setattr(light_fold, "decode_head", counting)
    for _ in range(2):  # the first run digests the sessions, the second sums them
        assert _indexed(fresh_seeded.db, state, DaemonRecords(), 0, 0, UTC) == plain
    assert decoded, "the digests were summed from their heads once"
    decoded.clear()
    assert _indexed(fresh_seeded.db, state, DaemonRecords(), 0, 0, UTC) == plain
    assert decoded == []  # the kept sum: no head decoded
    assert _indexed(fresh_seeded.db, state, DaemonRecords(), 7, 0, UTC) == _plain(
        fresh_seeded.db, DaemonRecords(), 7, 0, UTC
    )
    assert decoded, "a dated window sums its own sessions"


def test_an_unreadable_kept_sum_is_summed_again(tmp_path: Path) -> None:
    from opencode_autoretry.diagnostics.index import light_fold

    days = LocalDays(UTC)
    for blob in (b"", b"\x00garbage", light_fold.marshal.dumps((b"other key", (), (), (), ()))):
        assert light_fold._recalled(blob, b"key", days) is None


def test_a_later_run_reads_the_digests_not_the_memo(fresh_seeded: Seeded, tmp_path: Path) -> None:
    state = tmp_path / "state"
    _indexed(fresh_seeded.db, state, DaemonRecords(), 0, 20)
    prepared = prepare(fresh_seeded.db, state)
    assert prepared is not None
    db = prepared.reader.open(fresh_seeded.db)
    try:
        build_diagnose(
            db, DaemonRecords(), now=LATER, days=0, bridge_path=BRIDGE, memo=prepared.memo
        )
    finally:
        db.close()
    assert (prepared.memo.hits, prepared.memo.misses) == (0, 0)  # no group was looked up


def test_a_new_row_voids_its_sessions_digest(fresh_seeded: Seeded, tmp_path: Path) -> None:
    state = tmp_path / "state"
    _indexed(fresh_seeded.db, state, DaemonRecords(), 0, 0)
    rows = fresh_seeded.rows  # type: ignore[attr-defined]
    session = fresh_seeded.sessions["main"]
    rows.assistant(session, rows.user(session), finish="length", toks=tokens(5, 0), text=None)
    rows.commit()
    for days in (0, 7):
        ours = _indexed(fresh_seeded.db, state, DaemonRecords(), days, 0)
        assert ours == _plain(fresh_seeded.db, DaemonRecords(), days, 0)


def test_a_digest_fits_a_window_only_when_all_of_the_session_is_inside() -> None:
    header = (100, 5_000, 300, 5_001)
    assert fits(header, 0, 0, 0)
    assert fits(header, 100, 300, 5_000)
    assert not fits(header, 101, 0, 0)  # a candidate below the window's first rowid
    assert not fits(header, 0, 301, 0)  # a markup part below it
    assert not fits(header, 0, 0, 5_001)  # a candidate older than the cut


def test_lazy_findings_build_only_what_is_read(seeded: Seeded, tmp_path: Path) -> None:
    db = OpenCodeDB.open(seeded.db)
    try:
        report = build_diagnose(db, DaemonRecords(), now=LATER, days=0, bridge_path=BRIDGE)
    finally:
        db.close()
    kind, listed = max(report.findings.items(), key=lambda kv: len(kv[1]))
    assert len(listed) >= 2
    items = [(item, False) for item in listed]
    blob, heavy, _ = encode_digest((0, 0, 0, 0), items)
    header, rows = decode_digest(blob)
    assert header == (0, 0, 0, 0) and len(rows) == len(items)
    table = grouped(rows)

    class FakeObjects(Objects):
        def __init__(self) -> None:
            self._decoded = {}
            self.reads: list[list[str]] = []

        def _read(self, sessions):  # type: ignore[no-untyped-def, override]
            self.reads.append(list(sessions))
            return {sid: heavy for sid in sessions}

        def in_order(self, kind, newest_first):  # type: ignore[no-untyped-def, override]
            ordered = sorted(
                ((extra, at, mid, rows[pos][SESSION], pos) for k, extra, at, mid, pos in table
                 if k == kind.value),
                reverse=newest_first,
            )
            return iter(ordered)

    objects = FakeObjects()
    sessions = frozenset(r[SESSION] for r in rows)
    light = LightPart(objects, sessions, {}, {kind.value: len(table)})
    full = [((9, 0, "z"), listed[0])]  # a full entry sorts after every light row
    lazy = LazyFindings(kind, full, light)
    assert len(lazy) == len(items) + 1 and not objects.reads  # counting builds nothing
    newest = lazy[-2:]
    assert [i.step.id for i in newest] == [items[-1][0].step.id, listed[0].step.id]
    assert len(objects.reads) == 1
    assert [i.step.id for i in lazy] == [i.step.id for i, _ in items] + [listed[0].step.id]
    assert [i.verdict.reason for i in lazy][:-1] == [i.verdict.reason for i, _ in items]


ZONES = [
    None,
    UTC,
    ZoneInfo("Europe/Berlin"),
    ZoneInfo("America/Santiago"),
    ZoneInfo("Australia/Lord_Howe"),
    ZoneInfo("Asia/Kathmandu"),
]


@pytest.mark.parametrize("zone", ZONES, ids=str)
def test_local_days_match_astimezone_across_transitions(zone: ZoneInfo | None) -> None:
    days = LocalDays(zone)
    start = int(datetime(2026, 1, 1, tzinfo=UTC).timestamp() * 1000)
    step = 37 * 60_000 + 13_001  # every ~37 minutes over the year: every transition
    for ms in range(start, start + 366 * 86_400_000, step):
        assert days.day(ms) == exact_day(ms, zone), ms


def _age(path: Path, seconds: float) -> None:
    """Make the DB's files look written ``seconds`` ago (no sleeping in the test)."""
    past = datetime.now(UTC).timestamp() - seconds
    for file in (path, path.with_name(path.name + "-wal")):
        if file.exists():
            os.utime(file, (past, past))


def test_an_untouched_quiet_db_is_not_counted_again_and_a_delete_is_seen(
    fresh_seeded: Seeded, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from opencode_autoretry.opencode.index_source import IndexSource

    rows = fresh_seeded.rows  # type: ignore[attr-defined]
    rows.close()
    _age(fresh_seeded.db, 10)
    _, built = refresh(fresh_seeded.db, tmp_path)
    assert built.rebuilt == "new index"
    _age(fresh_seeded.db, 10)  # reading created an empty WAL just now: let it age
    refresh(fresh_seeded.db, tmp_path)  # counts (the files changed), and sees them quiet
    with monkeypatch.context() as patched:
        patched.setattr(IndexSource, "count", lambda *_: pytest.fail("counted again"))
        _, again = refresh(fresh_seeded.db, tmp_path)
    assert again.rebuilt is None and (again.new_messages, again.new_parts) == (0, 0)
    signature = files_signature(fresh_seeded.db)
    conn = __import__("sqlite3").connect(fresh_seeded.db)
    conn.execute("DELETE FROM part WHERE session_id = ?", (fresh_seeded.sessions["main"],))
    conn.execute("DELETE FROM message WHERE session_id = ?", (fresh_seeded.sessions["main"],))
    conn.commit()
    conn.close()
    assert files_signature(fresh_seeded.db) != signature
    _, after = refresh(fresh_seeded.db, tmp_path)
    assert after.rebuilt is not None and "deleted" in after.rebuilt


def test_a_recent_write_is_never_trusted_unchanged(fresh_seeded: Seeded, tmp_path: Path) -> None:
    """Files written less than QUIET_NS before the last sync: the sync counts again."""
    refresh(fresh_seeded.db, tmp_path)  # the seed was just written: not quiet
    from opencode_autoretry.diagnostics.index.step_index import StepIndex, index_file

    index = StepIndex.open(index_file(tmp_path, fresh_seeded.db))
    try:
        meta = index.meta()
    finally:
        index.close()
    from opencode_autoretry.diagnostics.index.sync import untouched
    from opencode_autoretry.opencode.index_source import IndexSource

    source = IndexSource.open(fresh_seeded.db)
    try:
        assert not untouched(meta, source, files_signature(fresh_seeded.db))
        quiet = meta | {"files_at": str(int(meta["files_at"]) + 10**10)}
        assert untouched(quiet, source, files_signature(fresh_seeded.db))
        assert not untouched(quiet | {"version": "0"}, source, files_signature(fresh_seeded.db))
        assert not untouched(quiet, source, "0:0 -")  # another size or time
    finally:
        source.close()


def test_spliced_continuations_are_what_json_dumps_writes() -> None:
    items = [
        {"time": "t", "text": 'é\n"q" \u0000', "trigger": None, "nested": {"a": [1, {}], "b": []}},
        {"outcome": {"status": "pending", "detail": "…", "message_id": None}},
    ]
    for listed in (items, []):
        body = {"report": "trace", "continuations": listed, "declined": [], "x": {"y": [1]}}
        expected = json.dumps(body, ensure_ascii=False, indent=2)
        encoded = json.dumps(body | {"continuations": PLACEHOLDER}, ensure_ascii=False, indent=2)
        assert splice(encoded, [render_item(i) for i in listed]) == expected


def _plain_trace(path: Path, records: DaemonRecords) -> TraceReport:
    db = OpenCodeDB.open(path)
    try:
        return build_trace(db, records, now=LATER)
    finally:
        db.close()


def _indexed_trace(path: Path, state: Path, records: DaemonRecords) -> TraceReport:
    prepared = prepare(path, state)
    assert prepared is not None
    db = prepared.reader.open(path)
    try:
        report = build_trace(db, records, now=LATER, memo=prepared.memo, rendered=True)
    finally:
        db.close()
    save(prepared)
    return report


def test_trace_json_reuses_rendered_continuations(fresh_seeded: Seeded, tmp_path: Path) -> None:
    for records in (DaemonRecords(), load_records(fresh_seeded.store)):
        for _ in range(3):
            ours = _indexed_trace(fresh_seeded.db, tmp_path, records)
            assert trace_json(ours) == trace_json(_plain_trace(fresh_seeded.db, records))


@pytest.mark.parametrize("colour", [False, True], ids=["plain", "colour"])
@pytest.mark.parametrize("read_all_from", [None, 1], ids=["by key", "one range"])
def test_trace_text_reuses_the_kept_continuations(
    fresh_seeded: Seeded, tmp_path: Path, colour: bool, read_all_from: int | None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from opencode_autoretry.diagnostics.index import indexed_db

    if read_all_from is not None:  # as trace 0 reads ~12 700 of them at 1 M messages
        monkeypatch.setattr(indexed_db, "_READ_ALL_RENDERED", read_all_from)
    style = Style(colour=colour, zone=UTC)
    for records, reused in ((DaemonRecords(), True), (load_records(fresh_seeded.store), False)):
        for run in range(3):
            ours = _indexed_trace(fresh_seeded.db, tmp_path, records)
            plain = _plain_trace(fresh_seeded.db, records)
            assert render_trace(ours, style) == render_trace(plain, style)
            kept = sum(isinstance(c, Rendered) for c in ours.continuations)
            if run:  # the first run keeps them; the later ones read them
                assert (kept > 0) == reused, (run, kept)


def test_an_index_made_before_the_kept_sums_reads_none_until_written(tmp_path: Path) -> None:
    import sqlite3

    from opencode_autoretry.diagnostics.index.step_index import INDEX_VERSION, StepIndex

    path = tmp_path / "index.sqlite3"
    with sqlite3.connect(path) as conn:  # an index of this version from before the fold table
        conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        conn.execute("INSERT INTO meta VALUES ('version', ?)", (INDEX_VERSION,))
    reader = StepIndex.open(path, readonly=True)
    assert reader.kept_fold("flags") is None
    reader.close()
    writer = StepIndex.open(path)  # adds the table, keeps the rest
    writer.put_folds({"flags": b"summed"})
    writer.close()
    reader = StepIndex.open(path, readonly=True)
    assert reader.kept_fold("flags") == b"summed"
    assert reader.kept_fold("other flags") is None
    reader.close()
