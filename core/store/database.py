"""The daemon's own SQLite store: budgets, decisions, injections, the switch, the heartbeat.

Budgets (turn ledgers) live in their own table, apart from anything transient: nothing in the
daemon's in-memory view can reset them. ``Store`` is the daemon's writer; ``StoreView`` is the
read-only view the reports and ``autoretry status`` use (opened ``mode=ro``; a missing store
reads as empty so reports work before the daemon ever ran).
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from opencode_autoretry.causes import Cause, Facts
from opencode_autoretry.decisions.observed import would_do
from opencode_autoretry.models import BudgetGroup, Decision, TurnLedger, from_epoch_ms, to_epoch_ms
from opencode_autoretry.store.sqlite_uri import readonly_uri

GLOBAL_SCOPE = "*"
OPEN_STATES = ("intent", "sent")


def _type_old_decisions(conn: sqlite3.Connection) -> None:
    """Migration 5: every decision gets its cause and facts; the rows of older releases are
    mapped once from their reason text (the only reading of that text, ``legacy_reasons``)."""
    columns = {row[1] for row in conn.execute("PRAGMA table_info(decisions)")}
    if "cause" not in columns:  # NULL: written by an older release (also after a downgrade)
        conn.execute("ALTER TABLE decisions ADD COLUMN cause TEXT")
    if "facts" not in columns:
        conn.execute("ALTER TABLE decisions ADD COLUMN facts TEXT NOT NULL DEFAULT '{}'")
    rows = conn.execute("SELECT id, action, reason FROM decisions WHERE cause IS NULL").fetchall()
    if not rows:  # a new store, or the empty one a report reads before any daemon ran
        return
    from opencode_autoretry.store.legacy_reasons import legacy_cause  # its ~35 patterns: here

    for row_id, action, reason in rows:
        cause, facts = legacy_cause(str(action), str(reason))
        conn.execute("UPDATE decisions SET cause = ?, facts = ? WHERE id = ?",
                     (str(cause), facts.to_json(), row_id))


def _add_column(conn: sqlite3.Connection, table: str, column: str) -> None:
    """``ALTER TABLE ... ADD COLUMN`` unless the table has it (a store whose migration rows
    were rewound, as a test of older stores does)."""
    name = column.split()[0]
    if name not in {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}:
        conn.execute(f"ALTER TABLE {table} ADD COLUMN {column}")


#: Each step is a script, or a function of the connection (run in the step's transaction).
Migration = str | Callable[[sqlite3.Connection], None]

MIGRATIONS: tuple[Migration, ...] = (
    # 1: the initial schema
    """
    CREATE TABLE turns (
        session_id TEXT NOT NULL, turn_id TEXT NOT NULL,
        used TEXT NOT NULL DEFAULT '{}', exhausted TEXT NOT NULL DEFAULT '[]',
        user_aborted INTEGER NOT NULL DEFAULT 0, updated INTEGER NOT NULL,
        PRIMARY KEY (session_id, turn_id));
    CREATE TABLE current_turn (
        session_id TEXT PRIMARY KEY, turn_id TEXT NOT NULL, at INTEGER NOT NULL);
    CREATE TABLE decisions (
        id INTEGER PRIMARY KEY AUTOINCREMENT, at INTEGER NOT NULL, session_id TEXT NOT NULL,
        turn_id TEXT, message_id TEXT, kind TEXT, action TEXT NOT NULL, reason TEXT NOT NULL,
        grp TEXT, text TEXT, due INTEGER, used_before INTEGER NOT NULL DEFAULT 0,
        used_after INTEGER NOT NULL DEFAULT 0, lim INTEGER NOT NULL DEFAULT 0);
    CREATE INDEX decisions_session ON decisions (session_id, id);
    CREATE TABLE injections (
        id INTEGER PRIMARY KEY AUTOINCREMENT, decision_id INTEGER NOT NULL REFERENCES decisions(id),
        session_id TEXT NOT NULL, turn_id TEXT, text TEXT NOT NULL, due INTEGER,
        state TEXT NOT NULL, created INTEGER NOT NULL, sent_at INTEGER, confirmed_at INTEGER,
        message_id TEXT, error TEXT);
    CREATE INDEX injections_session ON injections (session_id, id);
    CREATE INDEX injections_state ON injections (state);
    CREATE TABLE switches (scope TEXT PRIMARY KEY, enabled INTEGER NOT NULL, at INTEGER NOT NULL);
    CREATE TABLE heartbeat (id INTEGER PRIMARY KEY CHECK (id = 1), at INTEGER NOT NULL,
        pid INTEGER NOT NULL, info TEXT NOT NULL);
    """,
    # 2: deadlines count from the turn's first failure; handled failures are never re-spent
    """
    ALTER TABLE turns ADD COLUMN first_failure INTEGER;
    ALTER TABLE turns ADD COLUMN handled TEXT NOT NULL DEFAULT '[]';
    """,
    # 3: history trims of stopped loops, re-sent to every bridge that says hello (issue 6)
    """
    CREATE TABLE trims (
        id INTEGER PRIMARY KEY AUTOINCREMENT, at INTEGER NOT NULL, session_id TEXT NOT NULL,
        message_id TEXT NOT NULL, part_id TEXT NOT NULL UNIQUE, keep_chars INTEGER NOT NULL,
        excerpt TEXT, decision_id INTEGER); CREATE INDEX trims_session ON trims (session_id, id);
    """,
    # 4: notifications outside OpenCode, one row per event and channel (issue 10)
    """
    CREATE TABLE IF NOT EXISTS notifications (
        id INTEGER PRIMARY KEY AUTOINCREMENT, at INTEGER NOT NULL, session_id TEXT NOT NULL,
        turn_id TEXT, event TEXT NOT NULL, decision_id INTEGER, channel TEXT NOT NULL,
        state TEXT NOT NULL, attempts INTEGER NOT NULL DEFAULT 0, error TEXT,
        done_at INTEGER, latency_ms INTEGER, message TEXT);
    CREATE INDEX IF NOT EXISTS notifications_session ON notifications (session_id, id);
    """,
    # 5: decisions are typed: why (``cause``) and what they were taken on (``facts``, JSON)
    _type_old_decisions,
    # 6: goals and their check runs (issue 22); a goal outlives a daemon restart
    """
    CREATE TABLE IF NOT EXISTS goals (
        id INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT NOT NULL, command TEXT NOT NULL,
        turn_id TEXT, state TEXT NOT NULL, set_at INTEGER NOT NULL, ended_at INTEGER,
        outcome TEXT);
    CREATE INDEX IF NOT EXISTS goals_session ON goals (session_id, id);
    CREATE TABLE IF NOT EXISTS goal_checks (
        id INTEGER PRIMARY KEY AUTOINCREMENT, goal_id INTEGER NOT NULL, session_id TEXT NOT NULL,
        reply_id TEXT NOT NULL, at INTEGER NOT NULL, exit_code INTEGER, duration_ms INTEGER NOT
        NULL, timed_out INTEGER NOT NULL DEFAULT 0, signature TEXT NOT NULL, excerpt TEXT,
        decision_id INTEGER);
    CREATE INDEX IF NOT EXISTS goal_checks_session ON goal_checks (session_id, id);
    """,
    # 7: observe mode (issue 23): a decision recorded as what autoretry WOULD have done
    "ALTER TABLE decisions ADD COLUMN observed INTEGER NOT NULL DEFAULT 0;",
    # 8: a queued notification keeps what it says, to be sent after a daemon killed first
    lambda conn: _add_column(conn, "notifications", "payload TEXT"),
)


def _run_migration(conn: sqlite3.Connection, step: Migration) -> None:
    if isinstance(step, str):
        conn.executescript(step)
    else:
        step(conn)


class StoreError(RuntimeError):
    """The store cannot be opened or read (one line, shown to the user as is)."""


@dataclass(frozen=True)
class DecisionRecord:
    """One decision of the daemon as the store keeps it (``decisions``)."""

    id: int
    at: datetime
    session_id: str
    turn_id: str | None
    message_id: str | None
    kind: str | None
    action: str
    reason: str
    group: str | None
    text: str | None
    due: datetime | None
    used_before: int
    used_after: int
    limit: int
    cause: Cause = Cause.OTHER  # why (rows of older releases: mapped from their reason)
    facts: Facts = Facts()
    observed: bool = False  # taken in observe mode: never carried out (issue 23)

    @property
    def would(self) -> str | None:
        """What an observed decision would have done; None when it is not one, or a skip."""
        if not self.observed:
            return None
        return would_do(self.action, self.kind, self.cause, self.facts, self.used_after,
                        self.limit)

    @classmethod
    def of_legacy(cls, **values: Any) -> DecisionRecord:
        """A record as an older release wrote it (reason text only): typed as migration 5
        types it."""
        # Only rows of older releases read their reason: the patterns compile on the first.
        from opencode_autoretry.store.legacy_reasons import legacy_cause

        cause, facts = legacy_cause(str(values["action"]), str(values["reason"]))
        return cls(**values, cause=cause, facts=facts)


@dataclass(frozen=True)
class InjectionRecord:
    """One continuation the daemon sent or meant to send, and its state (``injections``)."""

    id: int
    decision_id: int
    session_id: str
    turn_id: str | None
    text: str
    due: datetime | None
    state: str
    created: datetime
    sent_at: datetime | None
    confirmed_at: datetime | None
    message_id: str | None
    error: str | None


@dataclass(frozen=True)
class TrimRecord:
    """A part whose repeated tail is kept out of the model's context (sent as a ``trim``)."""

    id: int
    at: datetime
    session_id: str
    message_id: str
    part_id: str
    keep_chars: int
    excerpt: str | None
    decision_id: int | None


#: A heartbeat older than this means the daemon is not running (it beats every few seconds);
#: read by ``autoretry status`` and ``doctor``.
STALE_HEARTBEAT = timedelta(seconds=30)


@dataclass(frozen=True)
class GoalRecord:
    """A goal set for a session (issue 22). ``turn_id`` is the user turn it follows (None
    until the session's next user message); ``state``: active, met, given_up, ended."""

    id: int
    session_id: str
    command: str
    turn_id: str | None
    state: str
    set_at: datetime
    ended_at: datetime | None
    outcome: str | None

    @property
    def active(self) -> bool:
        return self.state == "active"


@dataclass(frozen=True)
class GoalCheckRecord:
    """One run of a goal's check: its exit status (None: killed at its timeout) and duration."""

    id: int
    goal_id: int
    session_id: str
    reply_id: str
    at: datetime
    exit_code: int | None
    duration_ms: int
    timed_out: bool
    signature: str
    excerpt: str | None
    decision_id: int | None


@dataclass(frozen=True)
class Heartbeat:
    """The daemon's last sign of life: when, its pid and what it reported."""

    at: datetime
    pid: int
    info: Mapping[str, Any]


def _ms(value: datetime | None) -> int | None:
    return None if value is None else to_epoch_ms(value)


def _decision_from_row(row: sqlite3.Row) -> DecisionRecord:
    values: dict[str, Any] = dict(
        id=row["id"], at=from_epoch_ms(row["at"]),
        session_id=row["session_id"], turn_id=row["turn_id"], message_id=row["message_id"],
        kind=row["kind"], action=row["action"], reason=row["reason"], group=row["grp"],
        text=row["text"], due=from_epoch_ms(row["due"]), used_before=row["used_before"],
        used_after=row["used_after"], limit=row["lim"],
    )
    if "cause" not in row.keys() or row["cause"] is None:  # noqa: SIM118 (a Row iterates values)
        # A store an older daemon still holds (a report cannot migrate it): typed on reading.
        return DecisionRecord.of_legacy(**values)
    observed = "observed" in row.keys() and bool(row["observed"])  # noqa: SIM118
    return DecisionRecord(**values, cause=Cause.parse(row["cause"]),
                          facts=Facts.from_json(row["facts"]), observed=observed)


def _injection_from_row(row: sqlite3.Row) -> InjectionRecord:
    return InjectionRecord(
        id=row["id"], decision_id=row["decision_id"], session_id=row["session_id"],
        turn_id=row["turn_id"], text=row["text"], due=from_epoch_ms(row["due"]),
        state=row["state"], created=from_epoch_ms(row["created"]),  # type: ignore[arg-type]
        sent_at=from_epoch_ms(row["sent_at"]), confirmed_at=from_epoch_ms(row["confirmed_at"]),
        message_id=row["message_id"], error=row["error"],
    )


def _trim_from_row(row: sqlite3.Row) -> TrimRecord:
    return TrimRecord(**{**dict(row), "at": from_epoch_ms(row["at"])})


def _goal_from_row(row: sqlite3.Row) -> GoalRecord:
    return GoalRecord(
        id=row["id"], session_id=row["session_id"], command=row["command"],
        turn_id=row["turn_id"], state=row["state"],
        set_at=from_epoch_ms(row["set_at"]),  # type: ignore[arg-type]
        ended_at=from_epoch_ms(row["ended_at"]), outcome=row["outcome"],
    )


def _goal_check_from_row(row: sqlite3.Row) -> GoalCheckRecord:
    return GoalCheckRecord(
        id=row["id"], goal_id=row["goal_id"], session_id=row["session_id"],
        reply_id=row["reply_id"], at=from_epoch_ms(row["at"]),  # type: ignore[arg-type]
        exit_code=row["exit_code"], duration_ms=row["duration_ms"],
        timed_out=bool(row["timed_out"]), signature=row["signature"], excerpt=row["excerpt"],
        decision_id=row["decision_id"],
    )


def _ledger_from_row(row: sqlite3.Row) -> TurnLedger:
    used = {BudgetGroup(k): int(v) for k, v in json.loads(row["used"]).items()}
    exhausted = frozenset(BudgetGroup(g) for g in json.loads(row["exhausted"]))
    return TurnLedger(
        session_id=row["session_id"], turn_id=row["turn_id"], used=used,
        exhausted=exhausted, user_aborted=bool(row["user_aborted"]),
        first_failure=from_epoch_ms(row["first_failure"]),
        handled=frozenset(json.loads(row["handled"])),
    )


class _Reader:
    """Queries shared by the writer and the read-only view."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        conn.row_factory = sqlite3.Row
        self._conn = conn

    def _rows(self, sql: str, params: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
        return self._conn.execute(sql, params).fetchall()

    def _filtered(
        self, table: str, time_col: str, session_id: str | None, since: datetime | None,
        convert: Callable[[sqlite3.Row], Any],
    ) -> list[Any]:
        clauses: list[str] = []
        params: list[Any] = []
        if session_id is not None:
            clauses.append("session_id = ?")
            params.append(session_id)
        if since is not None:
            clauses.append(f"{time_col} >= ?")
            params.append(to_epoch_ms(since))
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        return [convert(r) for r in self._rows(f"SELECT * FROM {table} {where} ORDER BY id",
                                                tuple(params))]

    def decisions(
        self, session_id: str | None = None, since: datetime | None = None
    ) -> list[DecisionRecord]:
        return self._filtered("decisions", "at", session_id, since, _decision_from_row)

    def injections(
        self, session_id: str | None = None, since: datetime | None = None
    ) -> list[InjectionRecord]:
        return self._filtered("injections", "created", session_id, since, _injection_from_row)

    def trims(
        self, session_id: str | None = None, since: datetime | None = None
    ) -> list[TrimRecord]:
        return self._filtered("trims", "at", session_id, since, _trim_from_row)

    def ledgers(self, session_id: str | None = None) -> list[TurnLedger]:
        if session_id is None:
            rows = self._rows("SELECT * FROM turns ORDER BY updated")
        else:
            rows = self._rows("SELECT * FROM turns WHERE session_id = ? ORDER BY updated",
                              (session_id,))
        return [_ledger_from_row(r) for r in rows]

    def load_ledger(self, session_id: str, turn_id: str) -> TurnLedger | None:
        rows = self._rows("SELECT * FROM turns WHERE session_id = ? AND turn_id = ?",
                          (session_id, turn_id))
        return _ledger_from_row(rows[0]) if rows else None

    def current_turn(self, session_id: str) -> str | None:
        rows = self._rows("SELECT turn_id FROM current_turn WHERE session_id = ?", (session_id,))
        return rows[0]["turn_id"] if rows else None

    def open_injections(self, session_id: str | None = None) -> list[InjectionRecord]:
        sql = "SELECT * FROM injections WHERE state IN (?, ?)"
        params: tuple[Any, ...] = OPEN_STATES
        if session_id is not None:
            sql += " AND session_id = ?"
            params = (*params, session_id)
        return [_injection_from_row(r) for r in self._rows(sql + " ORDER BY id", params)]

    def is_enabled(self, session_id: str | None = None) -> bool:
        """Off globally wins; a per-session switch applies on top of a global on."""
        scopes = {r["scope"]: bool(r["enabled"]) for r in self._rows("SELECT * FROM switches")}
        if not scopes.get(GLOBAL_SCOPE, True):
            return False
        return True if session_id is None else scopes.get(session_id, True)

    def switches(self) -> dict[str, bool]:
        return {r["scope"]: bool(r["enabled"]) for r in self._rows("SELECT * FROM switches")}

    def goals(self, session_id: str | None = None, *, active: bool = False) -> list[GoalRecord]:
        """Goals in the order they were set (a store of an older release has none)."""
        clauses = (["session_id = ?"] if session_id is not None else []) + (
            ["state = 'active'"] if active else [])
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        params = (session_id,) if session_id is not None else ()
        try:
            rows = self._rows(f"SELECT * FROM goals {where} ORDER BY id", params)
        except sqlite3.OperationalError:  # not migrated yet (read-only view of an old store)
            return []
        return [_goal_from_row(r) for r in rows]

    def active_goal(self, session_id: str) -> GoalRecord | None:
        found = self.goals(session_id, active=True)
        return found[-1] if found else None

    def goal_checks(self, session_id: str | None = None, goal_id: int | None = None
                    ) -> list[GoalCheckRecord]:
        clauses: list[str] = []
        params: list[Any] = []
        if session_id is not None:
            clauses.append("session_id = ?")
            params.append(session_id)
        if goal_id is not None:
            clauses.append("goal_id = ?")
            params.append(goal_id)
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        try:
            rows = self._rows(f"SELECT * FROM goal_checks {where} ORDER BY id", tuple(params))
        except sqlite3.OperationalError:
            return []
        return [_goal_check_from_row(r) for r in rows]

    def heartbeat(self) -> Heartbeat | None:
        rows = self._rows("SELECT * FROM heartbeat WHERE id = 1")
        if not rows:
            return None
        row = rows[0]
        return Heartbeat(at=from_epoch_ms(row["at"]), pid=row["pid"],  # type: ignore[arg-type]
                         info=json.loads(row["info"]))

    def close(self) -> None:
        self._conn.close()


def _migrate(conn: sqlite3.Connection) -> None:
    with conn:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS migrations (version INTEGER PRIMARY KEY, applied INTEGER)"
        )
    done = {row[0] for row in conn.execute("SELECT version FROM migrations").fetchall()}
    for version, script in enumerate(MIGRATIONS, start=1):
        if version in done:
            continue
        with conn:
            _run_migration(conn, script)
            conn.execute("INSERT INTO migrations VALUES (?, strftime('%s','now'))", [version])


class Store(_Reader):
    """The daemon's writer. One process writes; every write is its own transaction, but for
    the groups of writes inside ``atomic``."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        super().__init__(conn)
        self._depth = 0  # how many ``atomic`` blocks are open

    @classmethod
    def open(cls, path: Path) -> Store:
        try:
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            conn = sqlite3.connect(str(path), timeout=5.0, check_same_thread=False)
            conn.execute("PRAGMA journal_mode=WAL")
            # Plain sqlite3 (sqlite-utils only wrapped this connection, and cost the reports
            # ~50 ms of imports: issue 21); recursive triggers as sqlite-utils switched them on.
            conn.execute("PRAGMA recursive_triggers=on")
            _migrate(conn)
        except (sqlite3.DatabaseError, OSError) as exc:  # OSError: found by fuzzing the CLI
            raise StoreError(f"cannot open the autoretry store {str(path)[:200]}: "
                             f"{str(exc)[:200]}") from exc
        os.chmod(path, 0o600)
        return cls(conn)

    def _write(self, sql: str, params: tuple[Any, ...]) -> int:
        if self._depth:  # inside ``atomic``: committed with the rest of its writes
            return int(self._conn.execute(sql, params).lastrowid or 0)
        with self._conn:
            cursor = self._conn.execute(sql, params)
        return int(cursor.lastrowid or 0)

    @contextmanager
    def atomic(self) -> Iterator[None]:
        """The writes inside land together or not at all (nestable: the outermost commits).
        A decision, the budget it spent and its continuation are one such group: a SIGKILL or
        a full disk between two of them once left a failure handled and nothing sent."""
        self._depth += 1
        try:
            yield
        except BaseException:
            self._depth -= 1
            if not self._depth:
                self._conn.rollback()
            raise
        self._depth -= 1
        if not self._depth:
            self._conn.commit()

    def save_ledger(self, ledger: TurnLedger, at: datetime | None = None) -> None:
        used = json.dumps({str(k): v for k, v in sorted(ledger.used.items())})
        exhausted = json.dumps(sorted(str(g) for g in ledger.exhausted))
        handled = json.dumps(sorted(ledger.handled))
        self._write(
            "INSERT INTO turns (session_id, turn_id, used, exhausted, user_aborted, updated, "
            "first_failure, handled) VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
            "ON CONFLICT (session_id, turn_id) DO UPDATE SET used=excluded.used, "
            "exhausted=excluded.exhausted, user_aborted=excluded.user_aborted, "
            "updated=excluded.updated, first_failure=excluded.first_failure, "
            "handled=excluded.handled",
            (ledger.session_id, ledger.turn_id, used, exhausted, int(ledger.user_aborted),
             _ms(at) or 0, _ms(ledger.first_failure), handled),
        )

    def set_current_turn(self, session_id: str, turn_id: str, at: datetime) -> None:
        self._write(
            "INSERT INTO current_turn VALUES (?, ?, ?) ON CONFLICT (session_id) DO UPDATE "
            "SET turn_id=excluded.turn_id, at=excluded.at",
            (session_id, turn_id, to_epoch_ms(at)),
        )

    def record_decision(
        self, decision: Decision, at: datetime, message_id: str | None = None
    ) -> int:
        return self._write(
            "INSERT INTO decisions (at, session_id, turn_id, message_id, kind, action, reason, "
            "grp, text, due, used_before, used_after, lim, cause, facts, observed) "
            "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                to_epoch_ms(at), decision.session_id, decision.turn_id, message_id,
                decision.kind and str(decision.kind), str(decision.action), decision.reason,
                decision.group and str(decision.group), decision.text, _ms(decision.due),
                decision.used_before, decision.used_after, decision.limit,
                str(decision.cause), decision.facts.to_json(), int(decision.observed),
            ),
        )

    def record_intent(
        self, decision_id: int, session_id: str, turn_id: str | None, text: str,
        due: datetime | None, at: datetime | None = None,
    ) -> int:
        created = _ms(at) or _ms(due) or 0
        return self._write(
            "INSERT INTO injections (decision_id, session_id, turn_id, text, due, state, created) "
            "VALUES (?, ?, ?, ?, ?, 'intent', ?)",
            (decision_id, session_id, turn_id, text, _ms(due), created),
        )

    def _move(self, injection_id: int, state: str, sets: str, params: tuple[Any, ...]) -> None:
        self._write(f"UPDATE injections SET state = ?, {sets} WHERE id = ?",
                    (state, *params, injection_id))

    def mark_sent(self, injection_id: int, at: datetime) -> None:
        self._move(injection_id, "sent", "sent_at = ?", (to_epoch_ms(at),))

    def mark_unsent(self, injection_id: int, why: str) -> None:
        """Back to an intent: its line never left whole (issue 11, see ``Actions``)."""
        self._write("UPDATE injections SET state = 'intent', sent_at = NULL, error = ? "
                    "WHERE id = ? AND state = 'sent'", (why, injection_id))

    def mark_confirmed(self, injection_id: int, at: datetime, message_id: str | None) -> None:
        self._move(injection_id, "confirmed", "confirmed_at = ?, message_id = ?",
                   (to_epoch_ms(at), message_id))

    def mark_failed(self, injection_id: int, at: datetime, error: str) -> None:
        self._move(injection_id, "failed", "confirmed_at = ?, error = ?", (to_epoch_ms(at), error))

    def mark_cancelled(self, injection_id: int, at: datetime, reason: str) -> None:
        self._move(injection_id, "cancelled", "confirmed_at = ?, error = ?",
                   (to_epoch_ms(at), reason))

    def record_trim(self, session_id: str, message_id: str, part_id: str, keep_chars: int,
                    at: datetime, excerpt: str | None = None,
                    decision_id: int | None = None) -> int:
        """One trim per part: a second one for the same part (a replay) replaces the first."""
        return self._write(
            "INSERT OR REPLACE INTO trims (at, session_id, message_id, part_id, keep_chars, "
            "excerpt, decision_id) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (to_epoch_ms(at), session_id, message_id, part_id, keep_chars, excerpt, decision_id),
        )

    def set_enabled(self, on: bool, at: datetime, session_id: str | None = None) -> None:
        self._write(
            "INSERT INTO switches VALUES (?, ?, ?) ON CONFLICT (scope) DO UPDATE "
            "SET enabled=excluded.enabled, at=excluded.at",
            (session_id or GLOBAL_SCOPE, int(on), to_epoch_ms(at)),
        )

    # -- goals (issue 22) --------------------------------------------------------------------

    def set_goal(self, session_id: str, command: str, turn_id: str | None, at: datetime) -> int:
        """A new active goal for the session (one that was active ends, replaced)."""
        with self.atomic():
            for old in self.goals(session_id, active=True):
                self.end_goal(old.id, "ended", "replaced by a new goal", at)
            return self._write(
                "INSERT INTO goals (session_id, command, turn_id, state, set_at) "
                "VALUES (?, ?, ?, 'active', ?)", (session_id, command, turn_id, to_epoch_ms(at)))

    def bind_goal(self, goal_id: int, turn_id: str) -> None:
        self._write("UPDATE goals SET turn_id = ? WHERE id = ?", (turn_id, goal_id))

    def end_goal(self, goal_id: int, state: str, outcome: str, at: datetime) -> None:
        self._write("UPDATE goals SET state = ?, outcome = ?, ended_at = ? WHERE id = ? "
                    "AND state = 'active'", (state, outcome, to_epoch_ms(at), goal_id))

    def record_goal_check(
        self, goal_id: int, session_id: str, reply_id: str, at: datetime,
        exit_code: int | None, duration_ms: int, timed_out: bool, signature: str,
        excerpt: str | None, decision_id: int | None = None,
    ) -> int:
        return self._write(
            "INSERT INTO goal_checks (goal_id, session_id, reply_id, at, exit_code, duration_ms,"
            " timed_out, signature, excerpt, decision_id) VALUES (?,?,?,?,?,?,?,?,?,?)",
            (goal_id, session_id, reply_id, to_epoch_ms(at), exit_code, duration_ms,
             int(timed_out), signature, excerpt, decision_id),
        )

    def beat(self, at: datetime, pid: int, info: Mapping[str, Any]) -> None:
        self._write(
            "INSERT INTO heartbeat VALUES (1, ?, ?, ?) ON CONFLICT (id) DO UPDATE "
            "SET at=excluded.at, pid=excluded.pid, info=excluded.info",
            (to_epoch_ms(at), pid, json.dumps(dict(info), default=str)),
        )


class StoreView(_Reader):
    """Read-only: opened with ``mode=ro``; a store that does not exist yet reads as empty."""

    @classmethod
    def open(cls, path: Path) -> StoreView:
        try:
            exists = path.exists()
        except OSError as exc:  # e.g. a name too long (found by fuzzing the CLI)
            raise StoreError(f"cannot read the autoretry store {str(path)[:200]}: {exc}") from exc
        if not exists:
            # An empty in-memory schema: a missing store answers every query with nothing.
            conn = sqlite3.connect(":memory:")
            for script in MIGRATIONS:
                _run_migration(conn, script)
            return cls(conn)
        try:
            conn = sqlite3.connect(readonly_uri(path), uri=True, timeout=5.0)
            conn.execute("SELECT 1 FROM heartbeat LIMIT 1")
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"cannot read the autoretry store {path}: {exc}") from exc
        return cls(conn)

