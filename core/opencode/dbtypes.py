"""Values, errors, small SQL helpers and the report prefilters of the OpenCode DB reader."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from opencode_autoretry.models import MARKER_KEY, to_epoch_ms

CHUNK = 500  # bound on the ids in one ``IN (...)`` list


class DbError(Exception):
    """OpenCode's database cannot be used; ``str()`` is one line, ``exit_code`` for the CLI."""

    exit_code = 2


class DbMissing(DbError):
    def __init__(self, path: Path) -> None:
        super().__init__(
            f"OpenCode database not found: {path} (point to it with --db PATH or OPENCODE_DB=PATH)"
        )


class DbUnsupported(DbError):
    """No ``part`` table (pre-SQLite OpenCode, or not an OpenCode database at all)."""


class DbUnreadable(DbError):
    """Corrupt, locked, or otherwise unreadable."""


@dataclass(frozen=True)
class EventRow:
    """One row of OpenCode's append-only ``event`` table (``aggregate_id`` is the session)."""

    rowid: int
    aggregate_id: str
    type: str
    data: Mapping[str, Any] = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class MessageRow:
    """A message row before its parts are loaded (reports prefilter on these)."""

    id: str
    session_id: str
    time_created: int
    data: Mapping[str, Any]


def one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def prefix_end(prefix: str) -> str:
    """The smallest string greater than every string starting with ``prefix``."""
    return prefix[:-1] + chr(ord(prefix[-1]) + 1)


def chunks(items: Sequence[str]) -> list[Sequence[str]]:
    return [items[i : i + CHUNK] for i in range(0, len(items), CHUNK)]


def ms_or_zero(cut: datetime | None) -> int:
    return 0 if cut is None else to_epoch_ms(cut)


def marks(items: Sequence[Any]) -> str:
    return ",".join("?" * len(items))


def in_one_row(select: str, columns: Sequence[str]) -> str:
    """``select``'s rows as one JSON array of arrays in one row (in ``select``'s order).

    For scans in worker threads: SQLite runs a step without the GIL, but each result row
    needs it back, and a thread waiting for the GIL behind a busy one waits up to the switch
    interval (5 ms) per row; one row per scan makes the waits one per scan."""
    return f"SELECT json_group_array(json_array({', '.join(columns)})) FROM ({select})"


# Packed message rows embed ``data`` as JSON (one decode in Python); malformed data reads {}.
PACKED_MESSAGE = (
    "id",
    "session_id",
    "time_created",
    "CASE WHEN json_valid(data) THEN json(data) END",
)


def unpack_message_rows(packed: str | None) -> list[MessageRow]:
    rows = json.loads(packed) if packed else []
    return [MessageRow(i, s, t, d if isinstance(d, dict) else {}) for i, s, t, d in rows]


ERRORED_STEP = """instr(data, '"error":') > 0 AND json_extract(data, '$.role') = 'assistant'
    AND json_extract(data, '$.error') IS NOT NULL"""
MARKED_PART = "json_extract(data, '$.metadata.autoretry') IS NOT NULL"
MARKED_PART_TEXT = f"""instr(data, '"{MARKER_KEY}"') > 0 AND {MARKED_PART}"""
MARKED_PARTS_SINCE = f"""SELECT message_id FROM part WHERE rowid >= ? AND time_created >= ?
    AND {MARKED_PART_TEXT}"""

# -- report prefilters ---------------------------------------------------------------------
# They read the raw JSON text and parse it (json_extract) only for the few rows a cheap test
# cannot clear. Every cheap test is a fast path, never the judge: a row it cannot clear goes
# to the exact JSON test, so a change of OpenCode's key order or spacing costs speed (about
# 1 µs per row), never a finding. Each function call on ``data`` costs 60-100 ns a row
# (measured, SQLite 3.40), so the cheap tests are few and ordered by what they clear.

# Healthy = an assistant step with no error that finished "tool-calls", or "stop" with output.
# Fast path: OpenCode writes ``finish`` last (after tokens and time; an error is added after
# it), so one look at the last bytes clears most rows, and a "stop" answer pays one search
# for a zero output count (anywhere: an unrelated zero only sends the row to the exact test).
# Only an error written *before* a final healthy finish would escape the fast path, which
# OpenCode's write order never produces (an error ends the step).
_TAIL_IS = 'substr(CAST(data AS BLOB), -{n}) = CAST(\'"finish":"{finish}"}}\' AS BLOB)'
# The pattern starts at the rare "u" of ``utput``, not at the quote: GLOB tries a match at
# every occurrence of the pattern's first character (~60 quotes a row; measured 90 ms less at
# 1 M messages). Any key ending in "utput" only sends its row on to the exact test.
_OUTPUT_ZERO = "data GLOB '*utput\":0[,}]*'"
_HEALTHY_TAIL = f"""({_TAIL_IS.format(n=22, finish="tool-calls")}
    OR {_TAIL_IS.format(n=16, finish="stop")} AND NOT {_OUTPUT_ZERO})"""
# Exact test, any key order or spacing: one parse (SQLite caches it across the calls of a row)
# gives '["assistant",null,"stop",120]'; malformed JSON stays a candidate (Python reads it).
_FACTS = "json_extract(data, '$.role', '$.error', '$.finish', '$.tokens.output')"
_UNHEALTHY_JSON = f"""CASE WHEN json_valid(data) THEN {_FACTS} GLOB '[[]"assistant",*'
    AND {_FACTS} NOT GLOB '[[]"assistant",null,"tool-calls",*'
    AND {_FACTS} NOT GLOB '[[]"assistant",null,"stop",[1-9]*' ELSE 1 END"""
#: The message test alone (no rowid/time bounds), for the report index.
UNPROVEN_TEXT = f"""NOT {_HEALTHY_TAIL}
    AND data NOT LIKE '{{"role":"user"%' AND {_UNHEALTHY_JSON}"""
UNPROVEN_STEPS = f"""rowid >= ? AND rowid < ? AND time_created >= ? AND {UNPROVEN_TEXT}"""

# Tool calls written as text (the classifier's pattern, case-insensitive like it): LIKE is
# ASCII case-insensitive, a GLOB on the rare "<" + letter gates the tag needles, and the
# JSON form needs an escaped "function" string. The part type is checked (parsed) only on
# the rows that pass, so it does not matter where OpenCode writes it.
TOOL_MARKUP_NEEDLES = ("<invoke", "</invoke>", "<function", "<tool_call>", "<parameter name=")
_TAGS = " OR ".join(f"data LIKE '%{n}%'" for n in TOOL_MARKUP_NEEDLES)
#: The part test alone (no rowid/time bounds), for the report index (diagnostics/index_sync).
TOOL_MARKUP_TEXT = f"""(data GLOB '*<[/fFiIpPtT]*' AND ({_TAGS}) OR data LIKE '%\\"function\\"%')
    AND CASE WHEN json_valid(data) THEN json_extract(data, '$.type') = 'text' ELSE 0 END"""
TOOL_MARKUP_PARTS = f"""SELECT message_id FROM part
    WHERE rowid >= ? AND rowid < ? AND time_created >= ?
    AND {TOOL_MARKUP_TEXT}"""

# Parts the classifier never reads (step-start / step-finish), left out when a report asks
# (``with_parts(..., step_parts=False)``); a part that may be anything else is kept.
NOT_STEP_PART = """NOT (instr(data, '"type":"step-') > 0 AND instr(data, '"type":"t') = 0
    AND instr(data, '"type":"reasoning"') = 0)"""
