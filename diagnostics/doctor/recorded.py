"""Doctor's summary line as the daemon records it with its heartbeat, for ``diagnose`` (issue 21).

Running doctor's checks costs ``diagnose`` ~50 ms with no daemon and ~90 ms with one (the
whole config loader, the bridge installer, the process table, ``systemctl``). A running daemon
computes the same line every ``RECORD_EVERY_S`` on a thread of its own (``daemon/health.py``)
and its heartbeat carries it with a digest of everything the checks read: the resolved settings
(config.toml and the environment), the OpenCode binary on PATH, the bridges and dropped-line
counts of the heartbeat the checks saw, and the modes, owners, sizes and times of the files
they look at. ``diagnose`` prints the recorded line only when the daemon is live, the record is
at most ``FRESH`` old and the same digest, taken now, matches; otherwise it runs the checks.
What no digest covers: an OpenCode process started or ended since the record (``bridges``).

With no live daemon, ``diagnose`` keeps the line it computed (``doctor-line.json`` in the state
dir) on the same terms, so a report run again within ``FRESH`` does not run the checks either.

Light on purpose: ``diagnose`` imports this module, never the checks, on the recorded path.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
from collections.abc import Mapping
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from opencode_autoretry.config import paths
from opencode_autoretry.config.settings import Settings
from opencode_autoretry.store.database import STALE_HEARTBEAT, Heartbeat

#: The heartbeat's key for the record: ``{"summary": str, "at": ISO, "inputs": digest}``.
RECORD_KEY = "doctor"
#: Every 30 s: a record is then at most ~36 s old when diagnose reads it (the next one is
#: due, plus the heartbeat's 5 s and a tick), within ``FRESH``; twice as often cost the idle
#: daemon twice the CPU for a line no older than ``FRESH`` allows anyway (issue 21).
RECORD_EVERY_S = 30.0
FRESH = timedelta(seconds=45)
SERVICE = "opencode-autoretry.service"
LAUNCHD_LABEL = "com.github.opencode-autoretry"
BAD_LINE_COUNTERS = ("garbage", "oversize", "unknown", "partial", "rejected")
#: What each bridge entry of the heartbeat says that a check reads.
_BRIDGE_KEYS = ("pid", "opencode", "bridge", "dropped", "unknown")


def service_unit() -> Path:
    return paths.config_home() / "systemd" / "user" / SERVICE


def launchd_plist() -> Path:
    return Path.home() / "Library" / "LaunchAgents" / f"{LAUNCHD_LABEL}.plist"


def _stamp(path: Path, content: bool) -> list[Any]:
    """Whether ``path`` exists, its mode and owner (and its size and time for ``content``)."""
    try:
        info = path.lstat()
    except (OSError, ValueError):
        return [str(path), None]
    found: list[Any] = [str(path), info.st_mode, info.st_uid]
    return [*found, info.st_size, info.st_mtime_ns] if content else found


def _listed(folder: Path) -> list[Path]:
    try:
        return sorted(folder.iterdir())
    except (OSError, ValueError):
        return []


def _file_stamps(settings: Settings, opencode_config: Path) -> list[list[Any]]:
    store, logs, sock = settings.store, settings.log_dir, settings.socket
    private = [store.parent, store, Path(f"{store}-wal"), logs, logs / "daemon.log",
               sock.parent, sock]
    folders = [opencode_config / "plugins", opencode_config / "command"]
    shipped = [*folders, *(p for folder in folders for p in _listed(folder)), service_unit(),
               launchd_plist(), *paths.opencode_config_files(os.environ, opencode_config)]
    return [_stamp(p, False) for p in private] + [_stamp(p, True) for p in shipped]


def inputs_digest(settings: Settings, opencode_config: Path, beat: Heartbeat | None) -> str:
    """One digest of what doctor's checks read (see the module's docstring)."""
    info: Mapping[str, Any] = beat.info if beat is not None else {}
    counters = info.get("lines") or {}
    seen = {
        "settings": repr(settings),
        "opencode_config": str(opencode_config),
        "opencode": shutil.which("opencode"),
        "daemon": None if beat is None else [beat.pid, bool(info.get("stopping")),
                                               info.get("started")],
        "bridges": sorted(json.dumps([b.get(k) for k in _BRIDGE_KEYS], default=str)
                          for b in info.get("bridges") or []),
        "bad_lines": [counters.get(k) for k in BAD_LINE_COUNTERS],
        "files": _file_stamps(settings, opencode_config),
    }
    return hashlib.sha256(json.dumps(seen, default=str).encode()).hexdigest()


def make_record(summary: str, at: datetime, inputs: str) -> dict[str, str]:
    return {"summary": summary, "at": at.isoformat(), "inputs": inputs}


def pid_alive(pid: int) -> bool:
    """As ``psutil.pid_exists`` (without importing psutil): signal 0 reaches it, or may not."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except OSError as exc:
        return exc.errno == errno.EPERM
    return True


def recorded_summary(
    beat: Heartbeat | None, settings: Settings, opencode_config: Path, now: datetime
) -> str | None:
    """The daemon's recorded line when it is live, fresh and its inputs are as they are now."""
    if beat is None or beat.info.get("stopping") or not pid_alive(beat.pid):
        return None
    if abs(now - beat.at) > STALE_HEARTBEAT:
        return None
    return _holding(beat.info.get(RECORD_KEY), settings, opencode_config, beat, now)


def _holding(
    record: object, settings: Settings, opencode_config: Path, beat: Heartbeat | None,
    now: datetime,
) -> str | None:
    """A record's line if it is at most ``FRESH`` old and what the checks read is unchanged."""
    if not isinstance(record, Mapping) or not isinstance(record.get("summary"), str):
        return None
    try:
        age = now - datetime.fromisoformat(str(record.get("at")))
    except (TypeError, ValueError):
        return None
    if not timedelta(0) <= age <= FRESH:
        return None
    if record.get("inputs") != inputs_digest(settings, opencode_config, beat):
        return None
    return str(record["summary"])


def _kept_file(settings: Settings) -> Path:
    return settings.store.parent / "doctor-line.json"


def kept_summary(
    settings: Settings, opencode_config: Path, beat: Heartbeat | None, now: datetime
) -> str | None:
    """With no live daemon: the line the last ``diagnose`` computed, on the same terms as the
    daemon's record (at most ``FRESH`` old, what the checks read unchanged)."""
    try:
        record = json.loads(_kept_file(settings).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return _holding(record, settings, opencode_config, beat, now)


def keep_summary(
    summary: str, settings: Settings, opencode_config: Path, beat: Heartbeat | None,
    now: datetime,
) -> None:
    """Keep the line just computed for the next ``diagnose`` (best effort, private)."""
    target = _kept_file(settings)
    partial = target.with_name(f".{target.name}.{os.getpid()}")
    try:
        target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)  # before the digest
        record = make_record(summary, now, inputs_digest(settings, opencode_config, beat))
        handle = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(json.dumps(record))
        os.replace(partial, target)
    except OSError:
        partial.unlink(missing_ok=True)
