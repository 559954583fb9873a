"""Installs the bridge plugin and the ``/autoretry`` command file into OpenCode's config dir.

Idempotent. A command file the user edited is never overwritten without ``force``; the plugin
files are replaced only when they are ours (their first line names the bridge) or with ``force``.

The plugin is ``plugins/autoretry.js`` plus its pure helper modules in ``plugins/autoretry/``:
OpenCode 1.18 loads ``{plugin,plugins}/*.{ts,js}`` one level deep (its glob has no ``**``), so
the helpers are imported by the plugin but never loaded as plugins themselves. They are written
before the plugin and removed after it, so a running OpenCode never imports a missing helper.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import socket
from dataclasses import dataclass
from enum import StrEnum
from importlib import resources
from pathlib import Path

PLUGIN_NAME = "autoretry.js"
COMMAND_NAME = "autoretry.md"
PLUGIN_SIGNATURE = b"// opencode-autoretry bridge"
#: sha256 of command files shipped by earlier releases: safe to replace on upgrade.
PREVIOUS_COMMAND_SHA256: frozenset[str] = frozenset({
    "f5da39dfa2a0a163743e79230353a7131aed2d8b9c71fbfbde167b13ac0f7a5c",  # before `goal` (issue 22)
})


class FileState(StrEnum):
    MISSING = "missing"
    CURRENT = "current"  # identical to the shipped file
    OUTDATED = "outdated"  # ours, from another release
    CUSTOMISED = "customised"  # edited by the user, or not ours


class Action(StrEnum):
    INSTALLED = "installed"
    UPDATED = "updated"
    UNCHANGED = "unchanged"
    KEPT = "kept"  # customised: left alone
    REPLACED = "replaced"  # customised, overwritten because of --force
    REMOVED = "removed"
    ABSENT = "absent"


CHANGED = frozenset({Action.INSTALLED, Action.UPDATED, Action.REPLACED})


@dataclass(frozen=True)
class ShippedFile:
    name: str  # path below the package (and below ``subdir``), "/"-separated
    subdir: str  # below OpenCode's config dir
    signed: bool = False  # ours when its first line is PLUGIN_SIGNATURE

    def target(self, config_dir: Path) -> Path:
        return config_dir / self.subdir / Path(*self.name.split("/"))

    def content(self) -> bytes:
        source = resources.files("opencode_autoretry.plugin_bridge")
        return source.joinpath(*self.name.split("/")).read_bytes()


PLUGIN = ShippedFile(PLUGIN_NAME, "plugins", signed=True)
HELPERS = (
    ShippedFile("autoretry/books.js", "plugins", signed=True),
    ShippedFile("autoretry/coalesce.js", "plugins", signed=True),
    ShippedFile("autoretry/framing.js", "plugins", signed=True),
    ShippedFile("autoretry/messages.js", "plugins", signed=True),
    ShippedFile("autoretry/socket.js", "plugins", signed=True),
    ShippedFile("autoretry/wire.js", "plugins", signed=True),
    ShippedFile("autoretry/history.js", "plugins", signed=True),
)
COMMAND = ShippedFile(COMMAND_NAME, "command")
#: Install order: the helpers before the plugin that imports them.
SHIPPED = (*HELPERS, PLUGIN, COMMAND)
HELPER_DIR = "plugins/autoretry"


@dataclass(frozen=True)
class FileStatus:
    file: ShippedFile
    target: Path
    state: FileState


@dataclass(frozen=True)
class Step:
    target: Path
    action: Action


def _state(file: ShippedFile, existing: bytes | None) -> FileState:
    if existing is None:
        return FileState.MISSING
    if existing == file.content():
        return FileState.CURRENT
    if file.signed and existing.startswith(PLUGIN_SIGNATURE):
        return FileState.OUTDATED
    if file is COMMAND and hashlib.sha256(existing).hexdigest() in PREVIOUS_COMMAND_SHA256:
        return FileState.OUTDATED
    return FileState.CUSTOMISED


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def file_status(file: ShippedFile, config_dir: Path) -> FileStatus:
    target = file.target(config_dir)
    return FileStatus(file, target, _state(file, _read(target)))


def status(config_dir: Path) -> list[FileStatus]:
    return [file_status(file, config_dir) for file in SHIPPED]


def _write(path: Path, data: bytes) -> None:
    # Write-then-rename so a running OpenCode never loads a half-written plugin.
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    temporary.write_bytes(data)
    temporary.replace(path)


_INSTALL_ACTIONS = {
    FileState.MISSING: Action.INSTALLED,
    FileState.CURRENT: Action.UNCHANGED,
    FileState.OUTDATED: Action.UPDATED,
}


def install(config_dir: Path, force: bool = False) -> list[Step]:
    steps = []
    for current in status(config_dir):
        action = _INSTALL_ACTIONS.get(current.state)
        if action is None:
            action = Action.REPLACED if force else Action.KEPT
        if action in CHANGED:
            _write(current.target, current.file.content())
        steps.append(Step(current.target, action))
    return steps


def uninstall(config_dir: Path, force: bool = False) -> list[Step]:
    """Removes in reverse install order (the plugin before its helpers); returns the steps
    in that order."""
    steps = []
    for current in reversed(status(config_dir)):
        if current.state is FileState.MISSING:
            steps.append(Step(current.target, Action.ABSENT))
        elif current.state is FileState.CUSTOMISED and not force:
            steps.append(Step(current.target, Action.KEPT))
        else:
            current.target.unlink()
            steps.append(Step(current.target, Action.REMOVED))
    _remove_if_empty(config_dir / HELPER_DIR)
    return steps


def _remove_if_empty(directory: Path) -> None:
    with contextlib.suppress(OSError):  # missing, or holds something that is not ours
        directory.rmdir()


def duplicate_plugins(config_dir: Path) -> list[Path]:
    """Other copies OpenCode would also load (it scans both ``plugin/`` and ``plugins/``)."""
    other = config_dir / "plugin" / PLUGIN_NAME
    return [other] if other.exists() else []


def socket_alive(path: Path, timeout: float = 0.5) -> bool:
    """True when something accepts connections on the daemon's socket."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(timeout)
    try:
        probe.connect(str(path))
    except OSError:
        return False
    finally:
        probe.close()
    return True
