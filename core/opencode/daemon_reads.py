"""What the daemon reads of OpenCode's DB: the tailer's cursors, the last turn of a session for
the judge and the gap review, the injected messages, the todos, what a headless run just asked.

Each read costs the same whatever the database's size (an index or a rowid range), since the
daemon reads on every batch of new rows."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any, cast

from opencode_autoretry.models import Message, Role, Turn, to_epoch_ms
from opencode_autoretry.opencode.dbtypes import EventRow
from opencode_autoretry.opencode.reader import DbReader
from opencode_autoretry.opencode.shapes import group_turns, is_real_user, load_json

if TYPE_CHECKING:  # the todo reader (continuation's regexes) is the daemon's: not the reports'
    from opencode_autoretry.todos.continuation import Todo


class DaemonReads(DbReader):
    """The daemon's reads (the loop, the judge, the tailer, the gap review, headless runs)."""

    # -- turns --------------------------------------------------------------------------------

    def turns(self, session_id: str) -> list[Turn]:
        return group_turns(session_id, self.session_messages(session_id))

    def last_turn(self, session_id: str) -> Turn | None:
        """The newest turn, reading back only as far as its opening real user message."""
        opener = self._last_real_user(session_id)
        since = None if opener is None else to_epoch_ms(opener.time_created)
        turns = group_turns(session_id, self.session_messages(session_id, since))
        return turns[-1] if turns else None

    def _last_real_user(self, session_id: str, batch: int = 64) -> Message | None:
        cursor: tuple[int, str] | None = None
        while True:
            where, params = "session_id = ?", list[Any]([session_id])
            if cursor is not None:
                where += " AND (time_created, id) < (?, ?)"
                params.extend(cursor)
            rows = self._message_rows(
                where, params, f"ORDER BY time_created DESC, id DESC LIMIT {batch}"
            )
            users = [r for r in rows if r.data.get("role") == "user"]
            real = next((m for m in self.with_parts(users) if is_real_user(m)), None)
            if real is not None or len(rows) < batch:
                return real
            cursor = (rows[-1].time_created, rows[-1].id)

    def injected_messages(self, session_id: str) -> list[Message]:
        """User messages of the session carrying the autoretry marker, oldest first."""
        found = self.messages_by_id(self._session_marker_ids(session_id))
        return [m for m in found if m.role is Role.USER and m.marker]

    def user_messages_since(self, since_ms: int) -> list[Message]:
        """User messages created at or after ``since_ms`` (exec: what a run just asked)."""
        rows = self._message_rows("time_created >= ? AND json_extract(data, '$.role') = 'user'",
                                  (since_ms,), "ORDER BY time_created, id")
        return self.with_parts(rows)

    def todos(self, session_id: str) -> list[Todo]:
        """The session's todo list as ``todowrite`` last wrote it, in order (PK lookup)."""
        from opencode_autoretry.todos.continuation import Todo

        if not self._has_table("todo"):
            return []
        sql = "SELECT content, status, priority FROM todo WHERE session_id = ? ORDER BY position"
        return [Todo(str(c), str(s), str(p)) for c, s, p in self._rows(sql, (session_id,))]

    # -- tailing ------------------------------------------------------------------------------

    def max_message_id(self) -> str | None:
        return cast(str | None, self._scalar("SELECT max(id) FROM message"))

    def messages_after(self, message_id: str | None, limit: int = 500) -> list[Message]:
        """Messages with an id above ``message_id`` (all when ``None``), by id, with parts."""
        rows = self._message_rows("id > ?", (message_id or "",), f"ORDER BY id LIMIT {int(limit)}")
        return self.with_parts(rows)

    def sessions_with_messages_since(self, cut: datetime) -> set[str]:
        """Sessions with a message created at or after ``cut`` (a rowid range, no scan)."""
        sql = "SELECT session_id FROM message WHERE rowid >= ? AND time_created >= ?"
        rows = self._rows(sql, (self.first_rowid_since("message", cut), to_epoch_ms(cut)))
        return {r[0] for r in rows}

    def max_event_rowid(self) -> int:
        if not self._has_table("event"):
            return 0
        return int(self._scalar("SELECT max(rowid) FROM event") or 0)

    def events_after(self, rowid: int, limit: int = 500) -> list[EventRow]:
        if not self._has_table("event"):
            return []
        sql = "SELECT rowid, aggregate_id, type, data FROM event WHERE rowid > ? ORDER BY rowid"
        rows = self._rows(f"{sql} LIMIT ?", (rowid, int(limit)))
        return [EventRow(r, a, t, load_json(d)) for r, a, t, d in rows]
