"""``diagnose``'s findings from the per-session digests of the report index (session_digest.py).

A session is read from its digest when the digest is valid (the session's counter unchanged,
every step settled), the session has no row above the index's watermark (added since the
sync) and all of its candidates lie inside the window. Every other session of the window is
classified as ``build_diagnose`` does (its candidates read from the index, the rows above the
watermark from OpenCode's DB, the memo answering the groups it remembers), and, for
``diagnose 0``, digested for the next run. The findings come out in ``build_diagnose``'s
order (the message scan's by time, then the part scan's), the light rows left as they are
except in the sessions the store has decisions about (``relabel_daemon_aborts`` and the
summary read their whole steps).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime, tzinfo
from operator import itemgetter
from typing import TYPE_CHECKING

from opencode_autoretry.diagnostics.index.light_fold import light_folds
from opencode_autoretry.diagnostics.index.session_digest import (
    EXTRA,
    NONE_YET,
    Header,
    Key,
    LightPart,
    Objects,
    decode_head,
    encode_digest,
    encode_head,
    fits,
    grouped,
)
from opencode_autoretry.diagnostics.local_days import LocalDays
from opencode_autoretry.diagnostics.records import DaemonRecords
from opencode_autoretry.diagnostics.steps import (
    ABNORMAL_KINDS,
    SETTLE_MS,
    ClassifiedStep,
    classify_rows,
    classify_streamed,
    lean_step,
    relabel_daemon_aborts,
)
from opencode_autoretry.diagnostics.summary.session_tally import found_counts, session_tally
from opencode_autoretry.models import to_epoch_ms
from opencode_autoretry.opencode.dbtypes import ms_or_zero

if TYPE_CHECKING:
    from opencode_autoretry.diagnostics.index.indexed_db import GroupMemo, IndexedDB

_ABNORMAL = frozenset(ABNORMAL_KINDS)


class _Window:
    """The window's bounds on the index and OpenCode's DB."""

    def __init__(self, db: IndexedDB, since: datetime | None) -> None:
        self.since = since
        self.cut_ms = ms_or_zero(since)
        self.low_message = db.first_rowid_since("message", since)
        self.low_part = db.first_rowid_since("part", since)
        self.edge_message = db.watermark("message") + 1
        self.edge_part = db.watermark("part") + 1


def digest_findings(
    db: IndexedDB,
    memo: GroupMemo,
    records: DaemonRecords,
    *,
    since: datetime | None,
    now: datetime,
    runaway_steps: int,
    zone: tzinfo | None = None,
) -> tuple[list[tuple[Key, ClassifiedStep]], LightPart]:
    """The window's abnormal findings built in full, in diagnose's order, with their keys
    (the sessions classified now or with records), and the sessions counted from digests."""
    flags = repr((runaway_steps, False, True))
    window = _Window(db, since)
    index = db.index()
    in_window = index.sessions_in(
        "candidate", window.low_message, window.edge_message, window.cut_ms
    ) | index.sessions_in("markup", window.low_part, window.edge_part, window.cut_ms)
    fresh = db.sessions_after("message", window.edge_message - 1) | db.sessions_after(
        "part", window.edge_part - 1
    )
    objects = Objects(memo.index_file, flags)
    candidates = in_window - fresh
    # A dated window reads its own sessions' heads; the whole one all, in the index's order.
    wanted = sorted(candidates) if since is not None else None
    valid = memo.valid_digests(objects.heads(wanted), now)
    heads = {sid: head for sid, head in valid.items() if sid in candidates}
    # Sessions with records are judged step by step (decisions, the turns of injections).
    recorded = {d.session_id for d in records.decisions} | {
        i.session_id for i in records.injections
    }
    bounds = (window.low_message, window.low_part, window.cut_ms)
    with_records = sorted(
        sid for sid in recorded & heads.keys() if fits(decode_head(heads[sid])[0], *bounds)
    )
    days = LocalDays(zone)
    kept = (objects.kept_fold(), flags) if since is None else None
    light, folds, blob = light_folds(
        objects, {s: h for s, h in heads.items() if s not in recorded}, bounds, days, kept
    )
    if blob is not None:
        memo.keep_fold(flags, blob)
    uncovered = sorted((in_window | fresh) - light - set(with_records))
    keyed = _classified(db, memo, window, uncovered, bool(fresh), now, runaway_steps, flags, days)
    built = [row for rows in objects.rows(with_records).values() for row in rows]
    objects.load(built)
    keyed += [(row[EXTRA], objects.item(row)) for row in built]
    full = relabel_daemon_aborts([item for _, item in keyed], records)
    found = sorted(
        (((extra, to_epoch_ms(i.step.time_created), i.step.id), i)
         for (extra, _), i in zip(keyed, full, strict=True)),
        key=itemgetter(0),
    )
    return found, LightPart(objects, light, folds, found_counts(folds))


def _classified(
    db: IndexedDB,
    memo: GroupMemo,
    window: _Window,
    sessions: Sequence[str],
    fresh: bool,
    now: datetime,
    runaway_steps: int,
    flags: str,
    days: LocalDays,
) -> list[tuple[int, ClassifiedStep]]:
    """The abnormal findings of ``sessions`` in the window, each with its scan mark (1: found
    by the part scan alone), classified like build_diagnose; digested if the window is all."""
    index, since, cut = db.index(), window.since, window.cut_ms
    candidates = index.candidates_of(sessions, window.low_message, window.edge_message, cut)
    rows = [db.stub(c) for c in candidates]
    hits = index.hits_of("markup", sessions, window.low_part, window.edge_part, cut)
    markup = db.rows_by_id([h[1] for h in hits])
    if fresh:  # rows added since the sync (their sessions are all in ``sessions``)
        rows += db.step_candidates(since, (max(window.low_message, window.edge_message), 1 << 62))
        markup += db.tool_markup_candidates(
            since, (max(window.low_part, window.edge_part), 1 << 62)
        )
    streamed = classify_streamed(
        db, [rows], now=now, runaway_steps=runaway_steps, lean=True, memo=memo
    )
    seen = {c.step.id for c in streamed}
    extra = {r.id: r for r in markup if r.id not in seen and r.data.get("role") == "assistant"}
    extras = classify_rows(
        db, list(extra.values()), now=now, runaway_steps=runaway_steps, lean=True, memo=memo
    )
    if since is None and not fresh:
        _digest(db, memo, flags, now, candidates, hits, streamed, extras, days)
    return [(0, i) for i in streamed if i.verdict.kind in _ABNORMAL] + [
        (1, i) for i in extras if i.verdict.kind in _ABNORMAL
    ]


def _digest(
    db: IndexedDB,
    memo: GroupMemo,
    flags: str,
    now: datetime,
    candidates: Sequence[tuple[int, str, str, int, str, str, str, str]],
    hits: Sequence[tuple[int, str, str, int]],
    streamed: Sequence[ClassifiedStep],
    extras: Sequence[ClassifiedStep],
    days: LocalDays,
) -> None:
    """Keep each settled session's findings for the next runs (``diagnose 0`` only: it saw
    every candidate of each session)."""
    header: dict[str, list[int]] = defaultdict(lambda: [NONE_YET] * 4)
    for row, _, sid, created, *_ in candidates:
        bounds = header[sid]
        bounds[0], bounds[1] = min(bounds[0], row), min(bounds[1], created)
    for row, _, sid, created in hits:
        bounds = header[sid]
        bounds[2], bounds[3] = min(bounds[2], row), min(bounds[3], created)
    newest: dict[str, int] = {}
    items: dict[str, list[tuple[ClassifiedStep, bool]]] = defaultdict(list)
    for extra, group in ((False, streamed), (True, extras)):
        for item in group:
            sid, at = item.step.session_id, to_epoch_ms(item.step.time_created)
            newest[sid] = max(newest.get(sid, 0), at)
            if item.verdict.kind in _ABNORMAL:
                items[sid].append((lean_step(item), extra))
    now_ms = to_epoch_ms(now)
    settled = [s for s in header if now_ms >= (newest[s] + SETTLE_MS if s in newest else 0)]
    parents = db.parent_ids(settled)
    for sid in settled:
        found = sorted(
            items.get(sid, []),
            key=lambda pair: (pair[1], pair[0].step.time_created, pair[0].step.id),
        )
        bounds = header[sid]
        bounds_t: Header = (bounds[0], bounds[1], bounds[2], bounds[3])
        blob, heavy, rows = encode_digest(bounds_t, found)
        tally = session_tally(rows, child=bool(parents.get(sid)), days=days)
        valid_from = newest[sid] + SETTLE_MS if sid in newest else 0
        memo.keep_digest(
            sid, flags, valid_from, blob, heavy, encode_head(bounds_t, tally), grouped(rows)
        )
