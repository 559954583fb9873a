import sqlite3
from datetime import UTC, datetime, timedelta

import pytest

from opencode_autoretry.causes import Cause, Facts
from opencode_autoretry.models import Action, BudgetGroup, Decision, Kind, TurnLedger
from opencode_autoretry.store.database import Store, StoreError, StoreView

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


@pytest.fixture
def store(tmp_path):
    s = Store.open(tmp_path / "state" / "autoretry.db")
    yield s
    s.close()


def decision(action=Action.INJECT_AT, session="ses_a", turn="msg_1"):
    return Decision(
        action=action, cause=Cause.RETRY, facts=Facts(note="connection reset"),
        session_id=session, turn_id=turn,
        kind=Kind.DISCONNECT, group=BudgetGroup.DISCONNECT, text="Continue.",
        due=T0 + timedelta(seconds=5), used_before=0, used_after=1, limit=2,
    )


def test_ledger_survives_reopen(tmp_path):
    path = tmp_path / "autoretry.db"
    ledger = TurnLedger(
        "ses_a", "msg_1", {BudgetGroup.BLANK: 2}, frozenset({BudgetGroup.BLANK}),
        first_failure=T0, handled=frozenset({"msg_2", "msg_5"}),
    )
    first = Store.open(path)
    first.save_ledger(ledger, T0)
    first.close()
    again = Store.open(path)
    assert again.load_ledger("ses_a", "msg_1") == ledger
    assert again.load_ledger("ses_a", "msg_2") is None


def test_ledger_update_replaces_counts(store):
    store.save_ledger(TurnLedger("ses_a", "msg_1", {BudgetGroup.DISCONNECT: 1}), T0)
    bumped = TurnLedger("ses_a", "msg_1", {BudgetGroup.DISCONNECT: 2}, user_aborted=True)
    store.save_ledger(bumped, T0)
    (only,) = store.ledgers("ses_a")
    assert only.used_in(BudgetGroup.DISCONNECT) == 2 and only.user_aborted



def test_writes_inside_atomic_land_together_or_not_at_all(tmp_path):
    path = tmp_path / "autoretry.db"
    store = Store.open(path)
    ledger = TurnLedger("ses_a", "msg_1", {BudgetGroup.BLANK: 1}, handled=frozenset({"msg_2"}))
    with pytest.raises(RuntimeError), store.atomic():
        store.save_ledger(ledger, T0)
        store.record_decision(decision(), T0, "msg_2")
        raise RuntimeError("the disk filled up before the intent")
    assert store.ledgers() == [] and store.decisions() == []
    with store.atomic():
        store.save_ledger(ledger, T0)
        with store.atomic():  # nested: committed by the outermost block only
            store.record_decision(decision(), T0, "msg_2")
        assert StoreView.open(path).decisions() == []  # another reader sees nothing yet
    view = StoreView.open(path)
    assert view.load_ledger("ses_a", "msg_1") == ledger and len(view.decisions()) == 1
    store.record_intent(1, "ses_a", "msg_1", "Continue.", T0, T0)  # outside: its own commit
    assert len(StoreView.open(path).injections()) == 1

def test_current_turn_tracks_latest(store):
    assert store.current_turn("ses_a") is None
    store.set_current_turn("ses_a", "msg_1", T0)
    store.set_current_turn("ses_a", "msg_9", T0)
    assert store.current_turn("ses_a") == "msg_9"


def test_injection_lifecycle(store):
    did = store.record_decision(decision(), T0, message_id="msg_2")
    iid = store.record_intent(did, "ses_a", "msg_1", "Continue.", T0 + timedelta(seconds=5), T0)
    assert [i.state for i in store.open_injections()] == ["intent"]
    store.mark_sent(iid, T0 + timedelta(seconds=5))
    assert [i.state for i in store.open_injections("ses_a")] == ["sent"]
    store.mark_confirmed(iid, T0 + timedelta(seconds=6), "msg_3")
    assert store.open_injections() == []
    (inj,) = store.injections("ses_a")
    assert (inj.state, inj.message_id, inj.decision_id) == ("confirmed", "msg_3", did)
    assert inj.sent_at == T0 + timedelta(seconds=5)
    (rec,) = store.decisions(since=T0)
    assert (rec.kind, rec.action, rec.group) == ("disconnect", "inject_at", "disconnect")
    assert rec.limit == 2
    assert rec.due == T0 + timedelta(seconds=5) and rec.message_id == "msg_2"
    assert store.decisions(since=T0 + timedelta(seconds=1)) == []


@pytest.mark.parametrize("final", ["failed", "cancelled"])
def test_closed_injections_are_not_open(store, final):
    did = store.record_decision(decision(), T0)
    iid = store.record_intent(did, "ses_a", "msg_1", "Continue.", None, T0)
    getattr(store, f"mark_{final}")(iid, T0, "why")
    assert store.open_injections() == []
    assert store.injections()[0].error == "why"


def test_switch_global_off_wins_over_session_on(store):
    assert store.is_enabled() and store.is_enabled("ses_a")
    store.set_enabled(False, T0, session_id="ses_a")
    assert store.is_enabled() and not store.is_enabled("ses_a") and store.is_enabled("ses_b")
    store.set_enabled(False, T0)
    store.set_enabled(True, T0, session_id="ses_a")
    assert not store.is_enabled("ses_a") and not store.is_enabled()


def test_heartbeat_roundtrip(store):
    assert store.heartbeat() is None
    store.beat(T0, 42, {"bridges": [{"pid": 7}]})
    store.beat(T0 + timedelta(seconds=5), 42, {"bridges": []})
    hb = store.heartbeat()
    assert hb.at == T0 + timedelta(seconds=5) and hb.pid == 42 and hb.info == {"bridges": []}


def test_view_is_read_only_and_sees_writes(tmp_path):
    path = tmp_path / "autoretry.db"
    writer = Store.open(path)
    writer.record_decision(decision(Action.SKIP), T0)
    view = StoreView.open(path)
    assert [d.action for d in view.decisions()] == ["skip"]
    with pytest.raises(sqlite3.OperationalError):
        view._conn.execute("DELETE FROM decisions")
    writer.close()
    view.close()


def test_missing_store_reads_as_empty(tmp_path):
    view = StoreView.open(tmp_path / "nothing-here.db")
    assert view.decisions() == [] and view.injections() == [] and view.heartbeat() is None
    assert view.is_enabled("ses_a")
    assert not (tmp_path / "nothing-here.db").exists()


def test_corrupt_store_is_a_one_line_error(tmp_path):
    path = tmp_path / "autoretry.db"
    path.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StoreError, match="cannot read the autoretry store"):
        StoreView.open(path)
    with pytest.raises(StoreError, match="cannot open the autoretry store"):
        Store.open(path)


def test_store_file_is_private(tmp_path):
    path = tmp_path / "s" / "autoretry.db"
    Store.open(path).close()
    assert path.stat().st_mode & 0o077 == 0


def test_migration_from_version_1_keeps_ledgers(tmp_path):
    from opencode_autoretry.store.database import MIGRATIONS

    path = tmp_path / "old.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE migrations (version INTEGER PRIMARY KEY, applied INTEGER)")
    conn.executescript(MIGRATIONS[0])
    conn.execute("INSERT INTO migrations VALUES (1, 0)")
    conn.execute("INSERT INTO turns (session_id, turn_id, used, exhausted, user_aborted, updated) "
                 "VALUES ('ses_a', 'msg_1', '{\"blank\": 1}', '[]', 0, 0)")
    conn.commit()
    conn.close()
    store = Store.open(path)
    ledger = store.load_ledger("ses_a", "msg_1")
    assert ledger.used_in(BudgetGroup.BLANK) == 1 and ledger.handled == frozenset()
    assert ledger.first_failure is None
