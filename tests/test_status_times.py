"""`autoretry status` shows times in local time like the other reports; `--json` stays UTC."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner

from opencode_autoretry.causes import Cause, Facts
from opencode_autoretry.cli.main import main
from opencode_autoretry.daemon.control import local_time
from opencode_autoretry.models import Action, Decision, Kind
from opencode_autoretry.store.database import Store

T0 = datetime(2026, 11, 30, 15, 30, tzinfo=UTC)
STARTED = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


@pytest.fixture()
def utc_plus_9(monkeypatch: pytest.MonkeyPatch):
    """A fixed local zone, UTC+9 with no DST (a POSIX TZ string: no zoneinfo files needed)."""
    monkeypatch.setenv("TZ", "XYZ-9")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def seeded_home(home: Path) -> None:
    store = Store.open(home / "autoretry.db")
    try:
        store.beat(datetime.now(tz=UTC), 321, {"started": STARTED.isoformat()})
        decision = Decision(Action.INJECT_AT, Cause.RETRY, "ses_a", "msg_1",
                            kind=Kind.DISCONNECT, due=T0 + timedelta(seconds=5),
                            facts=Facts(note="stream cut"))
        did = store.record_decision(decision, T0)
        store.record_intent(did, "ses_a", "msg_1", "Continue.", decision.due, T0)
    finally:
        store.close()


def status(home: Path, *args: str) -> str:
    env = {"AUTORETRY_HOME": str(home), "OPENCODE_DB": str(home / "opencode.db"),
           "AUTORETRY_CONFIG": str(home / "none.toml")}
    result = CliRunner().invoke(main, ["status", *args], env=env, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_status_text_shows_local_times(tmp_path: Path, utc_plus_9: None) -> None:
    seeded_home(tmp_path)
    text = status(tmp_path)
    assert "started 2026-11-30 21:00:00)" in text
    assert "due 2026-12-01 00:30:05" in text  # local: past midnight, the next day
    assert "  2026-12-01 00:30:00 ses_a disconnect: stream cut" in text
    assert "+00:00" not in text


def test_status_json_stays_utc(tmp_path: Path, utc_plus_9: None) -> None:
    seeded_home(tmp_path)
    report = json.loads(status(tmp_path, "--json"))
    assert report["daemon"]["started"] == "2026-11-30T12:00:00+00:00"
    assert report["decisions"][0]["at"] == "2026-11-30T15:30:00+00:00"
    assert report["pending"][0]["due"] == "2026-11-30T15:30:05+00:00"


def test_local_time_of_nothing_is_a_dash() -> None:
    assert local_time(None) == "-"
    assert local_time("2026-11-30T15:30:00+00:00", UTC) == "2026-11-30 15:30:00"
