"""The first report on a large database scans it and leaves the index to a background build.

Building the report index and classifying every step into it takes about twice as long as the
plain scan of ``diagnose --no-index`` (measured at 1 M messages: 6.4 s against 3.6 s with the
page cache cold, 10.7 s against 5.7 s with 5 % of the steps failing), and longer than the
seed's six queries. So when a report finds no usable index of a database of at least
``BACKGROUND_FROM_MESSAGES`` messages, it scans (the same output, with its progress bar) and,
once its report is out, starts ``python -m opencode_autoretry.diagnostics.index.background``
in a session of its own: one round of the daemon's index keeper (build the index, then
``diagnose 0`` and ``trace 0`` once on it so their classifications are kept). The reports
after it take the index.

One build at a time: the builder holds an exclusive lock on ``<index>.building`` for the whole
round; a report that finds it held scans instead of waiting for the index's write
transaction, and the daemon's keeper skips its round. A smaller database, ``--rebuild-index``,
or an index that only needs bringing up to date: the report does it itself, as before.
"""

from __future__ import annotations

import os
import sqlite3
import sys
from pathlib import Path

from opencode_autoretry.diagnostics.index.build_lock import building_now
from opencode_autoretry.diagnostics.index.step_index import INDEX_VERSION, index_file
from opencode_autoretry.store.sqlite_uri import readonly_uri

#: Below this many messages the report builds the index itself (a second or less).
BACKGROUND_FROM_MESSAGES = 200_000
MODULE = "opencode_autoretry.diagnostics.index.background"


def _readonly(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(readonly_uri(path), uri=True, timeout=1.0)


def _index_usable(index: Path, db_path: Path) -> bool:
    """The index file holds a finished build of this database in the current format (a
    cheap look at its meta: whether rows were deleted since is for the sync to find)."""
    if not index.is_file():
        return False
    try:
        conn = _readonly(index)
        try:
            meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
        finally:
            conn.close()
        stat = os.stat(db_path)
    except (sqlite3.Error, OSError, UnicodeError):
        return False  # the sync will say what is wrong
    return (
        meta.get("version") == INDEX_VERSION
        and meta.get("db_path") == str(db_path.resolve())
        and (meta.get("dev"), meta.get("ino")) == (str(stat.st_dev), str(stat.st_ino))
    )


def _messages(db_path: Path) -> int:
    """About how many messages OpenCode's DB holds (its last rowid: no scan)."""
    try:
        conn = _readonly(db_path)
        try:
            row = conn.execute("SELECT max(rowid) FROM message").fetchone()
        finally:
            conn.close()
    except (sqlite3.Error, OSError, UnicodeError):  # e.g. a path that is not UTF-8
        return 0  # the report opens it and says what is wrong
    return int(row[0] or 0)


def scan_instead(db_path: Path, state_dir: Path) -> str | None:
    """Why this report should scan rather than take the index (None: take it): a build
    under way (``"building"``), or none usable of a large database (``"missing"``: start one)."""
    index = index_file(state_dir, db_path)
    if building_now(index):
        return "building"
    if _index_usable(index, db_path) or _messages(db_path) < BACKGROUND_FROM_MESSAGES:
        return None
    return "missing"


def start_build(db_path: Path, state_dir: Path, runaway_steps: int) -> None:
    """Start the background build, detached (it outlives this report; nothing to wait for)."""
    import subprocess  # here: every report imports this module (scan_instead), few start one

    try:
        subprocess.Popen(
            [sys.executable, "-m", MODULE, str(db_path), str(state_dir), str(runaway_steps)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # not killed with the terminal's process group
            close_fds=True,
        )
    except OSError as exc:
        print(f"autoretry: report index not built in the background ({exc})", file=sys.stderr)


def build(db_path: Path, state_dir: Path, runaway_steps: int) -> None:
    """One round of the index keeper (it takes the build lock; a failure goes to the log)."""
    from datetime import UTC, datetime

    from opencode_autoretry.diagnostics.index.keeper import IndexKeeper

    def now() -> datetime:
        return datetime.now(UTC)

    IndexKeeper(db_path, state_dir, now, runaway_steps=runaway_steps).round()


def main(argv: list[str]) -> int:
    import logging  # here: every report imports this module (scan_instead)

    db_path, state_dir, runaway = Path(argv[0]), Path(argv[1]), int(argv[2])
    log_to = state_dir / "log" / "report-index.log"
    log_to.parent.mkdir(parents=True, exist_ok=True)
    logging.basicConfig(filename=log_to, level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(message)s")
    build(db_path, state_dir, runaway)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
