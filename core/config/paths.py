"""Where things live on disk: OpenCode's DB, our state dir, socket and config file."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path


def _xdg(name: str, fallback: str) -> Path:
    value = os.environ.get(name)
    return Path(value) if value else Path.home() / fallback


def data_home() -> Path:
    return _xdg("XDG_DATA_HOME", ".local/share")


def config_home() -> Path:
    return _xdg("XDG_CONFIG_HOME", ".config")


def opencode_db_candidates() -> list[Path]:
    """OpenCode's default DB locations, most likely first (Linux, macOS, Windows)."""
    candidates = [data_home() / "opencode" / "opencode.db"]
    if sys.platform == "darwin":
        candidates.append(Path.home() / "Library/Application Support/opencode/opencode.db")
    if sys.platform == "win32":
        local = os.environ.get("LOCALAPPDATA")
        base = Path(local) if local else Path.home() / "AppData/Local"
        candidates.append(base / "opencode" / "opencode.db")
    return candidates


def default_opencode_db() -> Path:
    """``OPENCODE_DB`` if set, else the first existing default, else the first default."""
    override = os.environ.get("OPENCODE_DB")
    if override:
        return Path(override).expanduser()
    candidates = opencode_db_candidates()
    return next((c for c in candidates if c.exists()), candidates[0])


def state_dir() -> Path:
    override = os.environ.get("AUTORETRY_HOME")
    return Path(override).expanduser() if override else data_home() / "opencode-autoretry"


def store_path() -> Path:
    return state_dir() / "autoretry.db"


def log_dir() -> Path:
    return state_dir() / "log"


def socket_path() -> Path:
    override = os.environ.get("AUTORETRY_SOCKET")
    if override:
        return Path(override).expanduser()
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    base = Path(runtime) / "opencode-autoretry" if runtime else state_dir()
    return base / "daemon.sock"


def config_file() -> Path:
    return config_home() / "opencode-autoretry" / "config.toml"


def opencode_config_dir() -> Path:
    return config_home() / "opencode"


def file_exists(path: Path) -> bool:
    """``path.exists()``, False for a name the OS cannot even look up (too long: Python 3.11
    raises for it)."""
    try:
        return path.exists()
    except OSError:
        return False


def opencode_config_files(environ: Mapping[str, str], config_dir: Path) -> list[Path]:
    """Where OpenCode reads its global config: ``$OPENCODE_CONFIG``, then the config dir
    (``[fallback]``'s models are checked against it; doctor's recorded line stamps it)."""
    explicit = environ.get("OPENCODE_CONFIG")
    files = [Path(explicit).expanduser()] if explicit else []
    return [*files, config_dir / "opencode.json", config_dir / "config.json"]
