"""Settings, resolved once: command-line flags > ``AUTORETRY_*`` env > config.toml > defaults.

This module validates the top-level keys and ``[stall]``; the other tables are kept raw here and
validated, all at once, by ``config.load.parse_config`` into the one typed ``Config``.
"""

from __future__ import annotations

import math
import os
import unicodedata
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Literal

from opencode_autoretry.config import paths

POLICY_TABLES = ("budgets", "providers", "messages")
#: Raw tables validated where they are used: ``[repetition.penalties.<provider>]`` (issue 6).
REPETITION_TABLE = "repetition"
#: ``[todos]`` (issue 9), validated by ``opencode_autoretry.todos.config.load_todo_config``.
TODOS_TABLE = "todos"
#: ``[stall]``: what the stall detector may do beyond root stalls (issue 9); key -> field.
STALL_TABLE = "stall"
STALL_KEYS = {"subagents": "stall_subagents"}
#: Raw tables validated where they are used: ``[notify]``, ``[fallback]`` (issue 10),
#: ``[telemetry]`` (issue 24), ``[goal]`` (``goals.config.load_goal_config``) and ``[caps]``
#: (``decisions.caps.load_caps``) (issue 22), ``[quota]`` (issue 23).
UNATTENDED_TABLES = ("notify", "fallback", "telemetry", "goal", "caps", "quota")


#: ``mode``: ``act`` carries decisions out; ``observe`` judges and records what it would have
#: done and sends, aborts and switches nothing (issue 23, docs/observe-and-channels.md).
MODES = ("act", "observe")
OBSERVE = "observe"
#: The flag that sets a setting when it is not ``--<name>`` (``autoretry run --observe``).
FLAG_NAMES: Mapping[str, str] = {"mode": "--observe"}


class ConfigError(ValueError):
    """Bad configuration: one line naming the key path, what was found and what is expected.

    Every table's own error (``PolicyError``, ``NotifyConfigError``, ``FallbackError``, ...) is
    one, so ``run``, ``exec``, ``doctor``, ``status`` and ``notify test`` catch this one type."""


MAX_LINE_CHARS = 500


def config_line(error: ConfigError) -> str:
    """The error as one printable line: TOML keys and strings may hold control characters
    (an escape sequence must not reach a terminal, nor a newline split the log line)."""
    text = "".join(
        ch if ch == " " or unicodedata.category(ch)[0] not in "CZ"
        else ch.encode("unicode_escape").decode("ascii")
        for ch in str(error)
    )
    return text if len(text) <= MAX_LINE_CHARS else f"{text[:MAX_LINE_CHARS]}… (cut)"


class SettingsError(ConfigError):
    """Bad top-level key, ``[stall]`` key, ``AUTORETRY_*`` variable or flag, or an unreadable
    file: the message names the file or variable and the key."""


@dataclass(frozen=True)
class Settings:
    """Everything autoretry reads from config.toml, the environment and the defaults, validated."""

    opencode_db: Path = field(default_factory=paths.default_opencode_db)
    store: Path = field(default_factory=paths.store_path)
    socket: Path = field(default_factory=paths.socket_path)
    log_dir: Path = field(default_factory=paths.log_dir)
    enabled: bool = True
    mode: str = "act"  # "act" or "observe" (MODES): observe records, never sends
    poll_interval: float = 60.0  # seconds between fallback DB polls
    tick_interval: float = 1.0  # seconds between stall/deadline checks
    stall_timeout: float = 180.0  # seconds busy without progress before a stall abort
    runaway_steps: int = 6  # consecutive finish=unknown zero-token steps = runaway
    stall_subagents: bool = True  # [stall] subagents: abort a hung child session (issue 9)
    verbose: bool = False
    policy: Mapping[str, Any] = field(default_factory=dict)  # raw budgets/providers/messages
    repetition: Mapping[str, Any] = field(default_factory=dict)  # raw [repetition] table
    todos: Mapping[str, Any] = field(default_factory=dict)  # raw [todos] table
    notify: Mapping[str, Any] = field(default_factory=dict)  # raw [notify] table
    fallback: Mapping[str, Any] = field(default_factory=dict)  # raw [fallback] table
    telemetry: Mapping[str, Any] = field(default_factory=dict)  # raw [telemetry] table
    goal: Mapping[str, Any] = field(default_factory=dict)  # raw [goal] table
    caps: Mapping[str, Any] = field(default_factory=dict)  # raw [caps] table

    @property
    def observing(self) -> bool:
        """Observe mode: decisions are judged and recorded, nothing is carried out."""
        return self.mode == OBSERVE
    quota: Mapping[str, Any] = field(default_factory=dict)  # raw [quota] table (issue 23)


_PATH_FIELDS = {"opencode_db", "store", "socket", "log_dir"}
_RAW_TABLES = {"policy", REPETITION_TABLE, TODOS_TABLE, *UNATTENDED_TABLES}
#: What a user could want, documented in README "Configuration" (issue 18): a longer interval
#: is a typo, a shorter one spins a core; 1e300 s overflowed the loop's timer and killed the
#: DB tailer's thread before these bounds.
RANGES: Mapping[str, tuple[float, float]] = {
    "poll_interval": (0.1, 3600.0),  # seconds between fallback DB polls
    "tick_interval": (0.05, 60.0),  # seconds between stall/deadline checks
    "stall_timeout": (1.0, 86400.0),  # seconds busy without progress
    "runaway_steps": (2, 1000),  # consecutive empty steps
}


def checked_table(raw: object, name: str, known: Collection[str]) -> Mapping[str, object]:
    """A raw ``[name]`` table whose keys are all ``known``; else SettingsError naming them."""
    if not isinstance(raw, Mapping):
        raise SettingsError(f"{name} must be a table, got {type(raw).__name__}")
    unknown = sorted(str(k) for k in raw if k not in known)
    if unknown:
        raise SettingsError(f"{name}: unknown key(s) {', '.join(unknown)} "
                            f"(known: {', '.join(known)})")
    return {str(k): v for k, v in raw.items()}


def _field_types() -> dict[str, str]:
    return {f.name: str(f.type) for f in fields(Settings) if f.name not in _RAW_TABLES}


def _coerce(name: str, raw: object, origin: str) -> object:
    kind = _field_types()[name]
    if kind == "str":
        return _choice(name, raw, origin)
    try:
        if name in _PATH_FIELDS:
            return _path(raw)
        if kind == "bool":
            if isinstance(raw, bool):
                return raw
            text = str(raw).strip().lower()
            if text in ("1", "true", "yes", "on"):
                return True
            if text in ("0", "false", "no", "off"):
                return False
            raise ValueError(raw)
        value: float | int = int(str(raw)) if kind == "int" else float(str(raw))
    except (TypeError, ValueError, RuntimeError) as exc:  # RuntimeError: "~nobody/" has no home
        raise SettingsError(f"{origin}: {name} = {_brief(raw)} is not a valid {kind}") from exc
    if not math.isfinite(value):  # found by fuzzing: nan/inf intervals spin or kill the loop
        raise SettingsError(f"{origin}: {name} must be a finite number, got {_brief(raw)}")
    low, high = RANGES[name]
    if not low <= value <= high:
        sign = "greater than 0, " if value <= 0 else ""
        raise SettingsError(
            f"{origin}: {name} must be {sign}from {low:g} to {high:g}, got {_brief(raw)}"
        )
    return value


#: The settings that take one word of a list.
_CHOICES: Mapping[str, tuple[str, ...]] = {"mode": MODES}


def _choice(name: str, raw: object, origin: str) -> str:
    choices = _CHOICES[name]
    if not isinstance(raw, str) or raw.strip().lower() not in choices:
        raise SettingsError(f"{origin}: {name} must be one of {', '.join(choices)}, "
                            f"got {_brief(raw)}")
    return raw.strip().lower()


def _path(raw: object) -> Path:
    """A path setting: a string without NUL bytes (found by fuzzing: a table, a number or a
    ``"\\u0000"`` became a path that only failed, with a traceback, when first opened)."""
    if not isinstance(raw, str | Path) or "\0" in str(raw) or not str(raw):
        raise ValueError(raw)
    return Path(raw).expanduser()


def _brief(raw: object) -> str:
    text = repr(raw)
    return text if len(text) <= 60 else f"{text[:60]}... ({len(text)} chars)"


def read_config_file(path: Path) -> dict[str, Any]:
    try:
        if not path.exists():
            return {}
        return _parsed_toml(path)
    except UnicodeDecodeError as exc:  # found by fuzzing: a traceback, not an error line
        raise SettingsError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
    except RecursionError as exc:
        raise SettingsError(f"{path}: not valid TOML: nested too deeply") from exc
    except OSError as exc:  # also a name too long (found by fuzzing the CLI)
        raise SettingsError(f"{str(path)[:200]}: cannot read: {str(exc)[:200]}") from exc


def _parsed_toml(path: Path) -> dict[str, Any]:
    # Imported only for a config file: tomllib compiles its patterns on import, and a report
    # run with no config file (the default) never parses one (issue 21).
    import tomllib

    with path.open("rb") as handle:
        try:
            return tomllib.load(handle)
        except tomllib.TOMLDecodeError as exc:
            raise SettingsError(f"{path}: not valid TOML: {exc}") from exc


def _from_file(table: Mapping[str, Any], origin: str) -> dict[str, object]:
    known = _field_types()
    values: dict[str, object] = {}
    for key, raw in table.items():
        if key in POLICY_TABLES or key in (REPETITION_TABLE, TODOS_TABLE, *UNATTENDED_TABLES):
            continue
        if key == STALL_TABLE:
            values.update(_stall_table(raw, origin))
            continue
        if key not in known or key in STALL_KEYS.values():
            choices = ", ".join(sorted([*known.keys() - STALL_KEYS.values(), *POLICY_TABLES,
                                        REPETITION_TABLE, TODOS_TABLE, STALL_TABLE,
                                        *UNATTENDED_TABLES]))
            raise SettingsError(f"{origin}: unknown key {key!r} (known: {choices})")
        if known[key] in ("float", "int") and (isinstance(raw, bool) or
                                               not isinstance(raw, int | float)):
            # A TOML string or boolean is a mistake here (only env values are text).
            raise SettingsError(f"{origin}: {key} must be a number, got {_brief(raw)}")
        values[key] = _coerce(key, raw, origin)
    return values


def _stall_table(raw: object, origin: str) -> dict[str, object]:
    """``[stall]`` -> Settings fields, each key checked by its path (``stall.subagents``)."""
    if not isinstance(raw, Mapping):
        raise SettingsError(f"{origin}: {STALL_TABLE} must be a table, got {raw!r}")
    values: dict[str, object] = {}
    for key, value in raw.items():
        if key not in STALL_KEYS:
            known = ", ".join(sorted(STALL_KEYS))
            raise SettingsError(f"{origin}: {STALL_TABLE}: unknown key {key!r} (known: {known})")
        if not isinstance(value, bool):
            raise SettingsError(
                f"{origin}: {STALL_TABLE}.{key} must be true or false, got {value!r}"
            )
        values[STALL_KEYS[key]] = value
    return values


def _from_env(environ: Mapping[str, str]) -> dict[str, object]:
    values: dict[str, object] = {}
    for name in _field_types():
        raw = environ.get(f"AUTORETRY_{name.upper()}")
        if raw is not None and raw != "":
            values[name] = _coerce(name, raw, f"AUTORETRY_{name.upper()}")
    return values


def config_file_for(environ: Mapping[str, str], config_path: Path | None = None) -> Path:
    """The config file read: ``--config``, else ``$AUTORETRY_CONFIG``, else the XDG default."""
    return config_path or Path(environ.get("AUTORETRY_CONFIG") or paths.config_file())


#: Where a setting's value came from, strongest first.
SourceKind = Literal["flag", "environment", "file", "default"]


@dataclass(frozen=True)
class Source:
    """Where one setting's value came from: ``where`` names the flag, the variable or the file
    (for a default shaped by a variable, e.g. ``OPENCODE_DB``, that variable)."""

    kind: SourceKind
    where: str = ""


@dataclass(frozen=True)
class Resolved:
    """The settings with, for every field of Settings, where its value came from."""

    settings: Settings
    sources: Mapping[str, Source]
    config_file: Path


#: Defaults computed from a variable (config.paths): the variable is named as their source.
_DEFAULT_ENV = {"opencode_db": "OPENCODE_DB", "store": "AUTORETRY_HOME",
                "log_dir": "AUTORETRY_HOME", "socket": "AUTORETRY_HOME"}
#: The raw tables of Settings -> the config.toml tables they hold.
_TABLE_FIELDS: Mapping[str, tuple[str, ...]] = {
    "policy": POLICY_TABLES, REPETITION_TABLE: (REPETITION_TABLE,), TODOS_TABLE: (TODOS_TABLE,),
    **{name: (name,) for name in UNATTENDED_TABLES},
}


def _default_source(name: str, environ: Mapping[str, str]) -> Source:
    variable = _DEFAULT_ENV.get(name, "")
    return Source("default", variable if variable and environ.get(variable) else "")


def resolve(
    flags: Mapping[str, object] | None = None,
    environ: Mapping[str, str] | None = None,
    config_path: Path | None = None,
) -> Settings:
    """Build the one Settings object: flags > env > config file > defaults."""
    return resolve_with_sources(flags, environ, config_path).settings


def resolve_with_sources(
    flags: Mapping[str, object] | None = None,
    environ: Mapping[str, str] | None = None,
    config_path: Path | None = None,
) -> Resolved:
    """``resolve``, keeping where each value came from (``autoretry config show``)."""
    env = os.environ if environ is None else environ
    path = config_file_for(env, config_path)
    table = read_config_file(path)
    values = _from_file(table, str(path))
    sources = {name: Source("file", str(path)) for name in values}
    from_env = _from_env(env)
    values.update(from_env)
    sources.update({name: Source("environment", f"AUTORETRY_{name.upper()}") for name in from_env})
    for key, raw in (flags or {}).items():
        if raw is not None:
            flag = FLAG_NAMES.get(key) or f"--{key.replace('_', '-')}"
            values[key] = _coerce(key, raw, flag)
            sources[key] = Source("flag", flag)
    policy = {key: table[key] for key in POLICY_TABLES if key in table}
    repetition = table.get(REPETITION_TABLE, {})
    if not isinstance(repetition, Mapping):
        raise SettingsError(f"{path}: {REPETITION_TABLE} must be a table")
    todos = table.get(TODOS_TABLE, {})
    if not isinstance(todos, Mapping):
        raise SettingsError(f"{path}: {TODOS_TABLE} must be a table")
    tables = {name: table.get(name, {}) for name in UNATTENDED_TABLES}
    for name, raw in tables.items():
        if not isinstance(raw, Mapping):
            raise SettingsError(f"{path}: {name} must be a table")
    for name, held in _TABLE_FIELDS.items():
        if any(key in table for key in held):
            sources[name] = Source("file", str(path))
    settings = replace(
        Settings(), **values, policy=policy, repetition=repetition,  # type: ignore[arg-type]
        todos=todos, **tables,
    )
    every = {f.name: sources.get(f.name) or _default_source(f.name, env) for f in fields(Settings)}
    return Resolved(settings, every, path)
