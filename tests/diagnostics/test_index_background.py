"""The first report on a large DB scans, and the index is built in the background after it."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result
from seeded_reports import NOW, Seeded

from opencode_autoretry.diagnostics.index import background
from opencode_autoretry.diagnostics.index.build_lock import build_lock, building_now
from opencode_autoretry.diagnostics.index.keeper import IndexKeeper
from opencode_autoretry.diagnostics.index.step_index import index_file


@pytest.fixture()
def large(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Path, Path, int]]:
    """Every DB counts as large; the background builds are recorded, not started."""
    started: list[tuple[Path, Path, int]] = []
    monkeypatch.setattr(background, "BACKGROUND_FROM_MESSAGES", 1)
    monkeypatch.setattr(background, "start_build", lambda *args: started.append(args))
    return started


def test_the_first_report_scans_and_starts_the_build_after_its_output(
    run_on: Callable[..., Result], fresh_seeded: Seeded, large: list[tuple[Path, Path, int]]
) -> None:
    state = fresh_seeded.store.parent
    first = run_on(fresh_seeded.db, fresh_seeded.store, "diagnose", "0", "--json")
    scanned = run_on(fresh_seeded.db, fresh_seeded.store, "diagnose", "0", "--json", "--no-index")
    assert first.exit_code == 0, first.output
    assert first.stdout == scanned.stdout
    assert "the index is built in the background" in first.stderr
    assert large == [(fresh_seeded.db, state, 6)]
    assert not index_file(state, fresh_seeded.db).exists()  # the report itself built nothing


def test_reports_take_the_index_once_built_and_scan_while_it_is_built(
    run_on: Callable[..., Result], fresh_seeded: Seeded, large: list[tuple[Path, Path, int]]
) -> None:
    state = fresh_seeded.store.parent
    index = index_file(state, fresh_seeded.db)
    with build_lock(index) as mine:
        assert mine and building_now(index)
        during = run_on(fresh_seeded.db, fresh_seeded.store, "trace", "0", "--json")
        assert during.exit_code == 0, during.output
        assert "being built in the background" in during.stderr
        assert large == []  # one build at a time
    assert not building_now(index)
    background.build(fresh_seeded.db, state, 6)
    after = run_on(fresh_seeded.db, fresh_seeded.store, "trace", "0", "--json")
    assert after.exit_code == 0 and after.stdout == during.stdout
    assert after.stderr == "" and large == []


def test_a_small_db_or_a_rebuild_on_request_builds_the_index_in_the_report(
    run_on: Callable[..., Result], fresh_seeded: Seeded, large: list[tuple[Path, Path, int]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    index = index_file(fresh_seeded.store.parent, fresh_seeded.db)
    rebuilt = run_on(fresh_seeded.db, fresh_seeded.store, "diagnose", "--rebuild-index")
    assert rebuilt.exit_code == 0 and index.is_file() and large == []
    index.unlink()
    monkeypatch.setattr(background, "BACKGROUND_FROM_MESSAGES", 10**9)
    small = run_on(fresh_seeded.db, fresh_seeded.store, "diagnose")
    assert small.exit_code == 0 and index.is_file() and large == []


def test_the_keeper_skips_its_round_while_a_background_build_holds_the_lock(
    fresh_seeded: Seeded, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    keeper = IndexKeeper(fresh_seeded.db, state, lambda: NOW)
    index = index_file(state, fresh_seeded.db)
    with build_lock(index):
        keeper.round()
        assert not index.exists()
    keeper.round()
    assert index.is_file() and background.scan_instead(fresh_seeded.db, state) is None


def test_the_detached_build_leaves_a_usable_index(fresh_seeded: Seeded, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    state = tmp_path / "state"
    monkeypatch.setattr(background, "BACKGROUND_FROM_MESSAGES", 1)
    assert background.scan_instead(fresh_seeded.db, state) == "missing"
    background.start_build(fresh_seeded.db, state, 6)
    deadline = time.monotonic() + 60
    while background.scan_instead(fresh_seeded.db, state) is not None:
        assert time.monotonic() < deadline, (
            "no usable index 60 s after the background build started; its log: "
            + _log(state)
        )
        time.sleep(0.05)
    while building_now(index_file(state, fresh_seeded.db)):  # the warm-up round after it
        assert time.monotonic() < deadline, "the background build never finished"
        time.sleep(0.05)


def _log(state: Path) -> str:
    log = state / "log" / "report-index.log"
    return log.read_text() if log.exists() else "(none)"
