"""The report index through the CLI and the daemon's keeper: same output, self-repairing."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from click.testing import Result
from seeded_reports import NOW, Seeded

from opencode_autoretry.diagnostics.diagnose import build_diagnose
from opencode_autoretry.diagnostics.index.keeper import IndexKeeper
from opencode_autoretry.diagnostics.index.report_index import prepare
from opencode_autoretry.diagnostics.index.step_index import index_file
from opencode_autoretry.diagnostics.records import DaemonRecords
from opencode_autoretry.diagnostics.trace.report import build_trace

REPORTS = (
    ("diagnose", "0", "--json", "--limit", "0"),
    ("diagnose", "--json"),
    ("diagnose", "0"),  # the text too
    ("trace", "0", "--json"),
    ("trace", "0"),
)


def _same_without_index(run: Callable[..., Result], *args: str) -> str:
    ours, scanned = run(*args), run(*args, "--no-index")
    assert ours.exit_code == 0, ours.output
    assert scanned.exit_code == 0, scanned.output
    assert ours.stdout == scanned.stdout
    return ours.stdout


def test_reports_on_the_index_equal_the_scan_and_rebuild_on_request(
    run_on: Callable[..., Result], fresh_seeded: Seeded
) -> None:
    def run(*args: str) -> Result:
        return run_on(fresh_seeded.db, fresh_seeded.store, *args)

    for args in REPORTS:
        first = _same_without_index(run, *args)
        assert _same_without_index(run, *args) == first  # the second run reads the memo
        rebuilt = run(*args, "--rebuild-index")
        assert rebuilt.exit_code == 0 and rebuilt.stdout == first
    assert index_file(fresh_seeded.store.parent, fresh_seeded.db).is_file()


def test_an_unusable_index_falls_back_to_the_scan(
    run_on: Callable[..., Result], fresh_seeded: Seeded, tmp_path: Path
) -> None:
    blocked = tmp_path / "not-a-dir"
    blocked.write_text("")
    store = blocked / "autoretry.db"  # the state dir is a file: the index cannot be created
    ours = run_on(fresh_seeded.db, store, "diagnose", "0", "--json")
    scanned = run_on(fresh_seeded.db, store, "diagnose", "0", "--json", "--no-index")
    assert ours.exit_code == 0, ours.output
    assert "report index not used" in ours.stderr
    assert json.loads(ours.stdout) == json.loads(scanned.stdout)


def test_a_corrupt_index_file_is_built_again(
    run_on: Callable[..., Result], fresh_seeded: Seeded
) -> None:
    target = index_file(fresh_seeded.store.parent, fresh_seeded.db)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(b"this is not a database" * 100)
    ours = run_on(fresh_seeded.db, fresh_seeded.store, "diagnose", "0", "--json")
    scanned = run_on(fresh_seeded.db, fresh_seeded.store, "diagnose", "0", "--json", "--no-index")
    assert ours.exit_code == 0, ours.output
    assert ours.stdout == scanned.stdout
    assert target.read_bytes()[:15] == b"SQLite format 3"


def test_an_index_of_the_previous_layout_is_built_anew(
    run_on: Callable[..., Result], fresh_seeded: Seeded
) -> None:
    import sqlite3

    target = index_file(fresh_seeded.store.parent, fresh_seeded.db)
    first = _same_without_index(
        lambda *a: run_on(fresh_seeded.db, fresh_seeded.store, *a), "diagnose", "0", "--json"
    )
    conn = sqlite3.connect(target)
    with conn:  # version 2's digest table had no tally column
        conn.execute("DROP TABLE digest")
        conn.execute(
            "CREATE TABLE digest (session_id TEXT NOT NULL, flags TEXT NOT NULL, gen INTEGER"
            " NOT NULL, valid_from INTEGER NOT NULL, blob BLOB NOT NULL, heavy BLOB NOT NULL,"
            " PRIMARY KEY (session_id, flags))"
        )
        conn.execute("UPDATE meta SET value = '2' WHERE key = 'version'")
    conn.close()
    for _ in range(2):  # rebuilt, then read
        again = run_on(fresh_seeded.db, fresh_seeded.store, "diagnose", "0", "--json")
        assert again.exit_code == 0, again.output
        assert again.stdout == first
    conn = sqlite3.connect(target)
    columns = [row[1] for row in conn.execute("PRAGMA table_info(digest)")]
    digests = conn.execute("SELECT count(*) FROM digest").fetchone()[0]
    conn.close()
    assert "tally" in columns and digests > 0


def _misses(seeded: Seeded, state: Path, now: datetime) -> int:
    prepared = prepare(seeded.db, state)
    assert prepared is not None
    db = prepared.reader.open(seeded.db)
    try:
        bridge = Path("/nonexistent")
        build_diagnose(db, DaemonRecords(), now=now, days=0, bridge_path=bridge, memo=prepared.memo)
        build_trace(db, DaemonRecords(), now=now, memo=prepared.memo)
    finally:
        db.close()
    return prepared.memo.misses


def test_the_daemon_keeper_leaves_the_first_report_nothing_to_classify(
    fresh_seeded: Seeded, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    keeper = IndexKeeper(fresh_seeded.db, state, lambda: NOW)
    keeper.round()
    assert keeper.rounds == 1
    assert _misses(fresh_seeded, state, NOW) == 0
    keeper.round()  # nothing changed: the index only catches up
    assert keeper.rounds == 2


def test_the_keeper_thread_stops_and_survives_a_missing_db(tmp_path: Path) -> None:
    keeper = IndexKeeper(tmp_path / "missing.db", tmp_path / "state", lambda: NOW, interval=0.01)
    keeper.round()  # logged, not raised
    assert keeper.rounds == 0
    keeper.start()
    keeper.stop()


def test_the_first_build_reports_its_progress_and_a_sync_does_not(
    fresh_seeded: Seeded, tmp_path: Path
) -> None:
    from opencode_autoretry.diagnostics.index.report_index import refresh

    calls: list[tuple[int, int]] = []
    _, built = refresh(fresh_seeded.db, tmp_path, progress=lambda d, t: calls.append((d, t)))
    assert built.rebuilt == "new index"
    assert calls and calls[-1][0] == calls[-1][1]  # every range read, the bar full
    calls.clear()
    _, synced = refresh(fresh_seeded.db, tmp_path, progress=lambda d, t: calls.append((d, t)))
    assert synced.rebuilt is None and synced.new_messages == 0 and not calls


def test_the_step_index_opens_read_only_under_a_path_with_uri_characters(tmp_path):
    # Issue 20: an unquoted "?" or "#" cut the file: URI short (a stray file, a wrong index).
    from opencode_autoretry.diagnostics.index.step_index import StepIndex

    path = tmp_path / "a?b#c" / "steps.db"
    StepIndex.open(path).close()
    before = sorted(p.name for p in tmp_path.iterdir())
    index = StepIndex.open(path, readonly=True)
    assert index.conn.execute("SELECT count(*) FROM meta").fetchone() is not None
    index.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no stray file
