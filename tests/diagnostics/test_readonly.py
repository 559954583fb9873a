"""D30: every report opens OpenCode's DB read-only, honours OPENCODE_DB, fails in one line."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from opencode_autoretry.cli.main import main

REPORTS = [
    ("diagnose", "0"),
    ("diagnose", "7", "--json"),
    ("timeline", "swift-planet"),
    ("timeline", "swift-planet", "--json"),
    ("errors",),
    ("errors", "reset", "--json"),
    ("trace", "0"),
    ("trace", "swift-planet", "--json"),
]


def _shm_without_read_marks(shm: bytes) -> bytes:
    """The ``-shm`` wal-index minus ``aReadMark[1..4]`` (bytes 104-119).

    Every WAL reader, OpenCode's own included, records there which WAL frame it reads: it is
    SQLite's shared-memory lock table, not data. Everything else must stay identical.
    """
    return shm[:104] + shm[120:]


@pytest.fixture()
def fresh(tmp_path: Path, seed_into):
    found = seed_into(tmp_path)
    yield found
    found.rows.close()


@pytest.mark.parametrize("args", REPORTS)
def test_reports_leave_db_and_wal_byte_identical(fresh, run_on, args, file_hashes) -> None:
    before = file_hashes(fresh.db)
    shm = fresh.db.with_name(fresh.db.name + "-shm")
    shm_before = shm.read_bytes()
    assert before["-wal"] is not None, "the fixture keeps a live writer, like OpenCode"
    result = run_on(fresh.db, fresh.store, *args)
    assert result.exit_code == 0, result.output
    after = file_hashes(fresh.db)
    assert (after[""], after["-wal"]) == (before[""], before["-wal"])
    assert _shm_without_read_marks(shm.read_bytes()) == _shm_without_read_marks(shm_before)


@pytest.mark.parametrize("args", REPORTS)
def test_reports_leave_all_three_files_identical_after_a_checkpoint(
    fresh, run_on, args, file_hashes
) -> None:
    fresh.rows.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    before = file_hashes(fresh.db)
    assert before["-shm"] is not None
    result = run_on(fresh.db, fresh.store, *args)
    assert result.exit_code == 0, result.output
    assert file_hashes(fresh.db) == before


@pytest.mark.parametrize("args", REPORTS)
def test_missing_db_exits_2_naming_path_and_override(run_on, tmp_path: Path, args) -> None:
    result = run_on(tmp_path / "nope.db", tmp_path / "store.db", *args)
    assert result.exit_code == 2
    assert str(tmp_path / "nope.db") in result.output and "OPENCODE_DB" in result.output
    assert "Traceback" not in result.output and not (tmp_path / "nope.db").exists()


def test_unsupported_schema_exits_2(run_on, tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    sqlite3.connect(path).executescript("CREATE TABLE session (id); CREATE TABLE message (id);")
    result = run_on(path, tmp_path / "store.db", "diagnose")
    assert result.exit_code == 2 and "no part table" in result.output


def test_corrupt_db_exits_2_in_one_line(run_on, tmp_path: Path) -> None:
    path = tmp_path / "corrupt.db"
    path.write_bytes(b"\x00garbage" * 512)
    result = run_on(path, tmp_path / "store.db", "diagnose")
    assert result.exit_code == 2
    assert result.output.count("\n") == 1 and "Traceback" not in result.output


def test_opencode_db_env_is_honoured(report_env, seeded, monkeypatch) -> None:
    from click.testing import CliRunner

    monkeypatch.setenv("OPENCODE_DB", str(seeded.db))
    monkeypatch.setenv("AUTORETRY_STORE", str(seeded.store))
    result = CliRunner().invoke(main, ["errors", "--json"])
    assert result.exit_code == 0, result.output
    assert '"report": "errors"' in result.output
