"""The store's ``notifications`` table (migration 4): one row per event and channel.

``queued`` when the loop hands it to a channel's worker, then ``sent`` or ``failed`` (with the
attempts, the scrubbed error and the latency from decision to delivery); ``dropped`` when the
channel's queue was full, ``suppressed`` when the hourly cap held it back (channel ``*``).
Rows hold no URL, no command line and no secret: the one-line summary and, from migration 8,
the notification itself (its texts scrubbed) while it is queued, so that a daemon killed before
a delivery sends it when it starts again (``queued_notifications``).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from opencode_autoretry.models import from_epoch_ms, to_epoch_ms
from opencode_autoretry.store.database import Store, _Reader


@dataclass(frozen=True)
class NotificationRecord:
    """One notification sent outside OpenCode (or that failed), as the store keeps it."""

    id: int
    at: datetime
    session_id: str
    turn_id: str | None
    event: str
    decision_id: int | None
    channel: str
    state: str
    attempts: int
    error: str | None
    done_at: datetime | None
    latency_ms: int | None
    message: str | None
    payload: str | None = None  # the queued notification (migration 8), see ``kept_form``


def _from_row(row: Mapping[str, Any]) -> NotificationRecord:
    values = dict(row)
    values["at"] = from_epoch_ms(values["at"])
    values["done_at"] = from_epoch_ms(values["done_at"])
    return NotificationRecord(**values)


def record_notification(
    store: Store, at: datetime, session_id: str, turn_id: str | None, event: str,
    channel: str, state: str, *, decision_id: int | None = None, message: str | None = None,
    error: str | None = None, payload: str | None = None,
) -> int:
    return store._write(
        "INSERT INTO notifications (at, session_id, turn_id, event, decision_id, channel, state, "
        "message, error, payload) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (to_epoch_ms(at), session_id, turn_id, event, decision_id, channel, state, message, error,
         payload),
    )


def finish_notification(
    store: Store, record_id: int, ok: bool, attempts: int, error: str | None, done_at: datetime
) -> NotificationRecord | None:
    """Close a queued row; the latency is from the row's decision time to ``done_at``."""
    rows = store._rows("SELECT at FROM notifications WHERE id = ?", (record_id,))
    if not rows:
        return None
    latency = max(0, to_epoch_ms(done_at) - int(rows[0]["at"]))
    store._write(  # a delivered row needs its payload no more
        "UPDATE notifications SET state = ?, attempts = ?, error = ?, done_at = ?, latency_ms = ?, "
        "payload = NULL WHERE id = ?",
        ("sent" if ok else "failed", attempts, error, to_epoch_ms(done_at), latency, record_id),
    )
    found = store._rows("SELECT * FROM notifications WHERE id = ?", (record_id,))
    return _from_row(dict(found[0]))


def notifications(
    reader: _Reader, session_id: str | None = None, since: datetime | None = None
) -> list[NotificationRecord]:
    try:
        return reader._filtered("notifications", "at", session_id, since,
                                lambda row: _from_row(dict(row)))
    except sqlite3.OperationalError:  # a store from before migration 4 (views never migrate)
        return []


def queued_notifications(reader: _Reader) -> list[NotificationRecord]:
    """Rows still ``queued``: at a daemon's start, those its predecessor never delivered."""
    rows = reader._rows("SELECT * FROM notifications WHERE state = 'queued' ORDER BY id")
    return [_from_row(dict(row)) for row in rows]


def already_notified(reader: _Reader, session_id: str, turn_id: str | None, event: str) -> bool:
    """A restart must not repeat a message this session, turn and event already had."""
    rows = reader._rows(
        "SELECT 1 FROM notifications WHERE session_id = ? AND turn_id IS ? AND event = ? LIMIT 1",
        (session_id, turn_id, event),
    )
    return bool(rows)


def counts(reader: _Reader, since: datetime | None = None) -> dict[str, int]:
    """Rows by state (``sent``, ``failed``, ``dropped``, ``suppressed``, ``queued``)."""
    out: dict[str, int] = {}
    for record in notifications(reader, since=since):
        out[record.state] = out.get(record.state, 0) + 1
    return out


def status_json(reader: _Reader, now: datetime, recent: int = 5) -> dict[str, Any]:
    """For ``autoretry status``: the last 24 hours by state, and the latest rows."""
    rows = notifications(reader, since=now - timedelta(days=1))
    by_state: dict[str, int] = {}
    for record in rows:
        by_state[record.state] = by_state.get(record.state, 0) + 1
    return {
        "last_24h": by_state,
        "recent": [
            {"id": r.id, "at": r.at.isoformat(), "session_id": r.session_id, "event": r.event,
             "channel": r.channel, "state": r.state, "attempts": r.attempts, "error": r.error,
             "latency_ms": r.latency_ms}
            for r in rows[-recent:]
        ],
    }


def status_lines(report: Mapping[str, Any]) -> list[str]:
    counts = ", ".join(f"{state} {n}" for state, n in sorted(report["last_24h"].items()))
    lines = [f"notifications (24 h): {counts or 'none'}"]
    for r in report["recent"]:
        took = f" in {r['latency_ms']} ms" if r["latency_ms"] is not None else ""
        why = f" — {r['error']}" if r["error"] else ""
        lines.append(f"  {r['at']} {r['session_id']} {r['event']} via {r['channel']}: "
                     f"{r['state']}{took}{why}")
    return lines


def notification_json(r: NotificationRecord) -> dict[str, Any]:
    return {"time": r.at.isoformat(), "session_id": r.session_id, "turn_id": r.turn_id,
            "event": r.event, "decision_id": r.decision_id, "channel": r.channel,
            "state": r.state, "attempts": r.attempts, "error": r.error,
            "latency_ms": r.latency_ms, "message": r.message}


def notification_line(r: NotificationRecord) -> str:
    """'gave_up via webhook: ✓ sent (1 attempt, 84 ms) — decision #7'."""
    mark = {"sent": "✓", "failed": "✗", "queued": "…"}.get(r.state, "-")
    took = f", {r.latency_ms} ms" if r.latency_ms is not None else ""
    tries = f" ({r.attempts} attempt{'s' if r.attempts != 1 else ''}{took})" if r.attempts else ""
    why = f": {r.error}" if r.error else ""
    source = f" — decision #{r.decision_id}" if r.decision_id is not None else ""
    return f"{r.event} via {r.channel}: {mark} {r.state}{tries}{why}{source}"
