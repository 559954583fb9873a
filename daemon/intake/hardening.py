"""The daemon's privacy: only its own user may talk to it, and everything it writes is private.

- Peer credentials: every bridge connection is checked before a byte is read. Linux gives
  ``SO_PEERCRED`` (pid, uid, gid of the connecting process); macOS ``LOCAL_PEERCRED`` (a
  ``struct xucred``) where Python exposes it. Where neither exists the connection is refused
  (fail-closed) with a reason in the log: on such a system the daemon accepts nobody.
- State: the daemon runs with umask 077, so its store (and SQLite's -wal/-shm), logs and
  socket are created 0600 and their directories 0700; files left more open by an older
  release are tightened at start-up.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import socket
import stat
import struct
from collections.abc import Callable, Iterable
from pathlib import Path

#: A connection check: None to accept, else why the connection is refused.
PeerCheck = Callable[[socket.socket], "str | None"]

_SOL_LOCAL = 0  # macOS <sys/un.h>: the level of LOCAL_PEERCRED
_XUCRED = "IIh16I"  # cr_version, cr_uid, cr_ngroups, cr_groups[NGROUPS=16]


def peer_uid(sock: socket.socket) -> int | None:
    """The effective uid of the process at the other end; None when the OS cannot tell."""
    peercred = getattr(socket, "SO_PEERCRED", None)
    if peercred is not None:
        raw = sock.getsockopt(socket.SOL_SOCKET, peercred, struct.calcsize("3i"))
        _pid, uid, _gid = struct.unpack("3i", raw)
        return int(uid)
    local = getattr(socket, "LOCAL_PEERCRED", None)
    if local is not None:
        raw = sock.getsockopt(_SOL_LOCAL, local, struct.calcsize(_XUCRED))
        _version, uid = struct.unpack_from("II", raw)
        return int(uid)
    return None


def same_user(
    sock: socket.socket, uid: int | None = None, read_uid: Callable[[socket.socket], int | None]
    = peer_uid,
) -> str | None:
    """Accept only the daemon's own (effective) user; refuse when that cannot be checked."""
    mine = os.geteuid() if uid is None else uid
    try:
        peer = read_uid(sock)
    except OSError as exc:
        return f"cannot read the peer's credentials ({exc}); refused"
    if peer is None:
        return "this OS gives no peer credentials on unix sockets; refused (fail-closed)"
    return None if peer == mine else f"peer uid {peer} is not the daemon's uid {mine}; refused"


class NotPrivateError(RuntimeError):
    """A directory the daemon must own belongs to someone else."""


def owned_private_dir(path: Path) -> None:
    """Create ``path`` 0700 (or tighten it); refuse a directory of another user or a shared
    one (sticky or world-writable, like /tmp: tightening it would lock everyone else out)."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    info = path.stat()
    fix = "put the socket in a directory of its own (AUTORETRY_SOCKET / AUTORETRY_HOME)"
    if info.st_uid != os.geteuid():
        raise NotPrivateError(f"{path} belongs to uid {info.st_uid}, not to you "
                              f"({os.geteuid()}); {fix}")
    mode = stat.S_IMODE(info.st_mode)
    if mode & (stat.S_ISVTX | stat.S_IWOTH):
        raise NotPrivateError(f"{path} is a shared directory (mode {mode:04o}); {fix}")
    if mode != 0o700:
        os.chmod(path, 0o700)


def tighten(dirs: Iterable[Path], files: Iterable[Path]) -> None:
    """chmod existing ``dirs`` 0700 and ``files`` 0600 (an older release left them open)."""
    for directory in dirs:
        with contextlib.suppress(FileNotFoundError):
            if stat.S_IMODE(directory.stat().st_mode) & 0o077:
                os.chmod(directory, 0o700)
    for file in files:
        with contextlib.suppress(FileNotFoundError):
            if stat.S_IMODE(file.stat().st_mode) & 0o177:
                os.chmod(file, 0o600)


def private_state(store: Path, log_dir: Path) -> None:
    """Before the daemon writes anything: umask 077 and the state already on disk tightened."""
    os.umask(0o077)
    sqlite_files = [Path(f"{store}{suffix}") for suffix in ("", "-wal", "-shm")]
    logs = sorted(log_dir.glob("daemon.log*")) if log_dir.is_dir() else []
    tighten([store.parent, log_dir], [*sqlite_files, *logs])


#: Credential shapes masked in every log line (a provider's error message may echo a key).
_CREDENTIALS = re.compile(
    r"(?P<key>\b(?:sk|pk|rk)-[A-Za-z0-9_\-]{8,})"
    r"|(?P<bearer>\bBearer\s+)[A-Za-z0-9._~+/\-]{8,}=*"
    r"|(?P<named>\b(?:api[_-]?key|access[_-]?token|secret|password|authorization)"
    r"[\"']?\s*[:=]\s*[\"']?)(?:Bearer\s+)?[^\s\"',;]{6,}"
    r"|(?P<aws>\bAKIA[0-9A-Z]{16}\b)",
    re.IGNORECASE,
)


def _mask(match: re.Match[str]) -> str:
    prefix = match.group("bearer") or match.group("named") or ""
    return f"{prefix}[redacted]"


def redact(text: str) -> str:
    return _CREDENTIALS.sub(_mask, text)


class RedactingFilter(logging.Filter):
    """On every handler of the daemon: a credential never reaches a log file or stderr."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        cleaned = redact(message)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        return True
