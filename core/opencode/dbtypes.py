"""Values, errors and small SQL helpers of the OpenCode DB reader (``db.py``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from opencode_autoretry.models import to_epoch_ms

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
