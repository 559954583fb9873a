"""Read-only reader of OpenCode's SQLite database (1.18 schema). All host SQL: the modules
named below, and dbtypes.

``OpenCodeDB`` is the one name callers open: the shared connection (``reader.DbReader``), the
daemon's reads (``daemon_reads.DaemonReads``) and the reports' queries
(``report_queries.ReportQueries``) over it. The daemon's code is typed with ``DaemonReads`` so
that a report query never creeps into its hot path. This module also re-exports the row and
error types of ``dbtypes`` its callers import from here.
"""

from __future__ import annotations

from opencode_autoretry.opencode.daemon_reads import DaemonReads
from opencode_autoretry.opencode.dbtypes import (
    DbError,
    DbMissing,
    DbUnreadable,
    DbUnsupported,
    EventRow,
    MessageRow,
)
from opencode_autoretry.opencode.reader import BUSY_TIMEOUT_S, REQUIRED_TABLES, DbReader
from opencode_autoretry.opencode.report_queries import ReportQueries

__all__ = [
    "BUSY_TIMEOUT_S",
    "REQUIRED_TABLES",
    "DaemonReads",
    "DbError",
    "DbMissing",
    "DbReader",
    "DbUnreadable",
    "DbUnsupported",
    "EventRow",
    "MessageRow",
    "OpenCodeDB",
    "ReportQueries",
]


class OpenCodeDB(DaemonReads, ReportQueries):
    """A read-only connection to one ``opencode.db``: the daemon's reads and the reports'."""
