"""Fixtures for the report tests: the seeded OpenCode DB and store (seeded_reports.py) and the
environment a report runs in."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from seeded_reports import NOW, Seeded, seed


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Seeded]:
    found = seed(tmp_path_factory.mktemp("oc"))
    yield found
    found.rows.close()  # type: ignore[attr-defined]


@pytest.fixture()
def fresh_seeded(tmp_path: Path) -> Iterator[Seeded]:
    """The seeded DB, for a test that adds rows of its own."""
    found = seed(tmp_path)
    yield found
    found.rows.close()  # type: ignore[attr-defined]


def file_hashes(db: Path) -> dict[str, str | None]:
    found: dict[str, str | None] = {}
    for suffix in ("", "-wal", "-shm"):
        path = db.with_name(db.name + suffix)
        found[suffix] = hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else None
    return found


@pytest.fixture()
def report_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """UTC local time, no colour, an empty OpenCode config dir (bridge not installed)."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("OPENCODE_DB", raising=False)
    for name in ("AUTORETRY_OPENCODE_DB", "AUTORETRY_STORE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AUTORETRY_CONFIG", str(tmp_path / "no-config.toml"))
    yield tmp_path / "config"
    monkeypatch.undo()
    time.tzset()  # back to the machine's zone for later tests


def run_report(db: Path, store: Path, *args: str) -> Result:
    """``autoretry --db DB --store STORE ARGS`` at the fixed ``NOW``."""
    from freezegun import freeze_time

    from opencode_autoretry.cli.main import main

    with freeze_time(NOW):
        return CliRunner().invoke(main, ["--db", str(db), "--store", str(store), *args])


@pytest.fixture()
def invoke(report_env: Path, seeded: Seeded) -> Callable[..., Result]:
    """Runs a report against the shared seeded DB and store."""
    return lambda *args: run_report(seeded.db, seeded.store, *args)


@pytest.fixture()
def now() -> datetime:
    return NOW


@pytest.fixture()
def run_on(report_env: Path) -> Callable[..., Result]:
    """``run_on(db, store, *args)``: a report against another DB (same environment)."""
    return run_report


@pytest.fixture()
def seed_into() -> Callable[[Path], Seeded]:
    """A fresh seeded DB + store in the given directory (caller closes ``.rows``)."""
    return seed


@pytest.fixture(name="file_hashes")
def file_hashes_fixture() -> Callable[[Path], dict[str, str | None]]:
    return file_hashes
