"""A store written by a release before typed decisions (issue 18) reads the same.

The rows of an older release have a reason and no cause: the read-only reports type them on
reading (a daemon of that release may still hold the store), and migration 5 types them once
when the new daemon opens it. Either way ``trace``, ``diagnose`` (the summary) and the records
read them as they read the same decisions written typed.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from click.testing import Result

from opencode_autoretry.causes import Cause, Facts, ModelSwitch
from opencode_autoretry.daemon.gap import _transient
from opencode_autoretry.decisions.subagents import whole_seconds
from opencode_autoretry.diagnostics.records import NO_OWNER, load_records
from opencode_autoretry.diagnostics.repetition_view import RepetitionStop
from opencode_autoretry.diagnostics.summary.tally import _left_alone_reason, _rank
from opencode_autoretry.models import Action, BudgetGroup, Decision, Kind
from opencode_autoretry.store.database import MIGRATIONS, Store, StoreView
from opencode_autoretry.store.legacy_reasons import legacy_cause

AT = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
#: The decisions table as releases before migration 5 created it (migration 1).
OLD_DECISIONS = """
    CREATE TABLE decisions (
        id INTEGER PRIMARY KEY AUTOINCREMENT, at INTEGER NOT NULL, session_id TEXT NOT NULL,
        turn_id TEXT, message_id TEXT, kind TEXT, action TEXT NOT NULL, reason TEXT NOT NULL,
        grp TEXT, text TEXT, due INTEGER, used_before INTEGER NOT NULL DEFAULT 0,
        used_after INTEGER NOT NULL DEFAULT 0, lim INTEGER NOT NULL DEFAULT 0);
    CREATE INDEX decisions_session ON decisions (session_id, id);
"""
OLD_COLUMNS = ("id, at, session_id, turn_id, message_id, kind, action, reason, grp, text, due, "
               "used_before, used_after, lim")


def typed_decisions(sid: str, turn: str) -> list[Decision]:
    """One decision of each sort the reports tell apart, as the daemon now writes them."""
    def make(action: Action, cause: Cause, kind: Kind, group: BudgetGroup | None = None,
             **values: object) -> Decision:
        return Decision(action, cause, sid, turn, kind, group, **values)  # type: ignore[arg-type]
    loop = "token_block in text stream: a block of 8 tokens x5 ('a; b)')"
    return [
        make(Action.INJECT, Cause.MODEL_SWITCH, Kind.TERMINAL, used_after=1, limit=2,
             model="fake/b", facts=Facts(detail="the provider rejected the request (HTTP 401)",
                                         switch=ModelSwitch("fake/a", "fake/b", "auth failure"))),
        make(Action.ABORT, Cause.SUBAGENT_HUNG, Kind.SUBAGENT_STALL, used_after=1, limit=1,
             facts=Facts(detail="hung 182 s with no progress", hung_seconds=181.6)),
        make(Action.NOTIFY, Cause.BUDGET_SPENT, Kind.REPETITION, BudgetGroup.REPETITION,
             used_before=2, used_after=2, limit=2,
             facts=Facts(detail=loop, budget_label="repetition")),
        make(Action.SKIP, Cause.WAITING_QUESTION, Kind.DISCONNECT, BudgetGroup.DISCONNECT),
        make(Action.SKIP, Cause.OPENCODE_RETRYING, Kind.SERVER_ERROR, BudgetGroup.SERVER),
        make(Action.SKIP, Cause.NO_OWNER, Kind.BLANK, BudgetGroup.BLANK),
        make(Action.SKIP, Cause.ALREADY_HANDLED, Kind.BLANK, facts=Facts(failure_id="msg_x")),
        make(Action.SKIP, Cause.GROUP_EXHAUSTED, Kind.TIMEOUT, BudgetGroup.TIMEOUT),
        make(Action.SKIP, Cause.NOT_A_CHILD, Kind.SUBAGENT_STALL),
        make(Action.SKIP, Cause.NOT_RETRYABLE, Kind.TERMINAL),
    ]


def make_old(store: Path) -> None:
    """Turn a store into one a release before migration 5 left: its decisions table as it
    was then (the same rows, reason text only) and migration 5 not applied."""
    conn = sqlite3.connect(store)
    with conn:
        conn.execute("ALTER TABLE decisions RENAME TO typed")
        conn.execute("DROP INDEX decisions_session")
        conn.executescript(OLD_DECISIONS)
        conn.execute(f"INSERT INTO decisions ({OLD_COLUMNS}) SELECT {OLD_COLUMNS} FROM typed")
        conn.execute("DROP TABLE typed")
        conn.execute("DELETE FROM migrations WHERE version >= 5")
    columns = {row[1] for row in conn.execute("PRAGMA table_info(decisions)")}
    conn.close()
    assert "cause" not in columns and "facts" not in columns


def reports(run_on: Callable[..., Result], db: Path, store: Path) -> dict[str, object]:
    found: dict[str, object] = {}
    for name, args in {"trace": ("trace", "--json"), "diagnose": ("diagnose", "--json"),
                       "trace_text": ("trace",)}.items():
        result = run_on(db, store, *args)
        assert result.exit_code == 0, result.output
        found[name] = json.loads(result.output) if "--json" in args else result.output
    records = load_records(store)
    found["ownerless"] = list(dict.fromkeys(
        d.session_id for d in records.decisions if d.cause in NO_OWNER))
    # What the reports read of each decision (its cause only for the ones in today's words:
    # the seeded ones carry a test's own text, which no release wrote).
    added = len(typed_decisions("", ""))
    found["causes"] = [d.cause for d in records.decisions[-added:]]
    found["decisions"] = [
        (d.id, d.action, d.reason, d.facts.switch, whole_seconds(d.facts.hung_seconds),
         _left_alone_reason(d.cause), _rank(d, set()), _transient(d),
         RepetitionStop(d, None).detector_reason if d.kind == "repetition" else None)
        for d in records.decisions
    ]
    return found


def same(found: dict[str, object], expected: dict[str, object]) -> bool:
    """Equal reports, or the first difference as the assertion's message."""
    for name, value in expected.items():
        if isinstance(value, list) and isinstance(found[name], list):
            for got, want in zip(found[name], value, strict=True):  # type: ignore[call-overload]
                assert got == want, name
        assert found[name] == value, name
    return True


def test_an_old_store_reads_as_the_same_decisions_written_typed(fresh_seeded, run_on) -> None:
    sid, turn = fresh_seeded.sessions["main"], fresh_seeded.users["hello"]
    store = Store.open(fresh_seeded.store)
    for index, decision in enumerate(typed_decisions(sid, turn)):
        store.record_decision(decision, AT + timedelta(seconds=index))
    store.close()
    typed = reports(run_on, fresh_seeded.db, fresh_seeded.store)

    make_old(fresh_seeded.store)
    unmigrated = reports(run_on, fresh_seeded.db, fresh_seeded.store)  # read-only: typed on reading
    assert same(unmigrated, typed)

    Store.open(fresh_seeded.store).close()  # the new daemon: migration 5 types the old rows
    view = StoreView.open(fresh_seeded.store)
    assert all(row["cause"] for row in view._rows("SELECT cause FROM decisions"))
    view.close()
    assert same(reports(run_on, fresh_seeded.db, fresh_seeded.store), typed)

    kept, causes = typed["decisions"], typed["causes"]
    assert isinstance(kept, list) and isinstance(causes, list)
    by_cause = dict(zip(causes, kept[-len(causes):], strict=True))
    assert by_cause[Cause.MODEL_SWITCH][3] == ModelSwitch("fake/a", "fake/b", "auth failure")
    assert by_cause[Cause.SUBAGENT_HUNG][4] == 182
    assert by_cause[Cause.WAITING_QUESTION][5:8] == ("waiting", 1, True)
    assert by_cause[Cause.ALREADY_HANDLED][6] == 0
    assert by_cause[Cause.BUDGET_SPENT][8].endswith("('a; b)')")
    assert sid in typed["ownerless"]  # type: ignore[operator]


def test_every_rendered_reason_maps_back_to_its_cause() -> None:
    """Today's words are the words older releases wrote: the migration's mapping of them gives
    back the cause (and the facts the reports read) the daemon now stores."""
    for decision in typed_decisions("ses_a", "msg_u"):
        cause, facts = legacy_cause(str(decision.action), decision.reason)
        assert cause is decision.cause, decision.reason
        assert facts.switch == decision.facts.switch
        if decision.facts.hung_seconds is not None:
            assert facts.hung_seconds == round(decision.facts.hung_seconds)


def test_the_migration_runs_on_literal_old_rows(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE migrations (version INTEGER PRIMARY KEY, applied INTEGER)")
    for version, script in enumerate(MIGRATIONS[:4], start=1):
        assert isinstance(script, str)
        conn.executescript(script)
        conn.execute("INSERT INTO migrations VALUES (?, 0)", (version,))
    ms = int(AT.timestamp() * 1000)
    rows = [
        ("skip", "skip: no live owner (recorded, never injected)"),
        ("skip", "skip: session is busy"),
        ("inject", "inject: terminal (auth); usage limit on a/x: switched a/x → b/y "
                   "(fallback 1/1)"),
        ("abort", "abort: subagent hung 200 s with no progress; stopped (never prompted) so its "
                  "parent's task tool returns; 1/1 per parent turn"),
        ("skip", "skip: something a future release says"),
    ]
    conn.executemany(
        "INSERT INTO decisions (at, session_id, action, reason) VALUES (?, 'ses_a', ?, ?)",
        [(ms, action, reason) for action, reason in rows])
    conn.commit()
    conn.close()
    store = Store.open(path)
    found = store.decisions()
    store.close()
    assert [d.reason for d in found] == [reason for _, reason in rows]  # the words are kept
    assert [d.cause for d in found] == [Cause.NO_OWNER, Cause.BUSY, Cause.MODEL_SWITCH,
                                        Cause.SUBAGENT_HUNG, Cause.OTHER]
    assert found[2].facts.switch == ModelSwitch("a/x", "b/y", "usage limit")
    assert found[3].facts.hung_seconds == 200
