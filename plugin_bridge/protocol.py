"""The bridge protocol (v1): JSON lines between the in-OpenCode plugin and the daemon.

One JSON object per ``\\n``-terminated UTF-8 line, each with ``"v": 1`` and ``"type"``.
Changes inside v1 are additive only (new optional fields, new types); a receiver ignores
fields it does not know and tolerates (and counts) types it does not know. The same field
table lives in ``autoretry.js`` (``SCHEMA``); both sides are checked against the shared
fixtures in ``tests/fixtures/bridge/``.
"""

from __future__ import annotations

import json
import json.scanner
import re
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, cast

PROTOCOL_VERSION = 1
MAX_LINE_BYTES = 1024 * 1024

# Field kinds: "str", "int", "bool", "obj", "num"; a trailing "?" means optional / nullable.
SCHEMA: dict[str, dict[str, str]] = {
    # bridge -> daemon
    "hello": {
        "pid": "int",
        "directory": "str",
        "project": "str?",
        "opencode": "str?",
        "bridge": "str?",
        "server_url": "str?",
        "exec": "bool?",  # issue 10: the process is an `opencode run` driven by autoretry exec
        "sessions": "obj?",  # issue 11: the sessions the process saw, see ``session_states``
        "prompts": "obj?",  # issue 11: the continuations it ran, see ``ran_injections``
    },
    "event": {"t": "int", "event": "obj"},
    "chat.message": {
        "t": "int",
        "session_id": "str",
        "message_id": "str?",
        "agent": "str?",
        "model": "obj?",
        "variant": "str?",
        "marker": "obj?",
        "synthetic": "bool?",
        "text": "str?",
        "command": "bool?",
    },
    "command": {"id": "str", "session_id": "str?", "name": "str", "arguments": "str?"},
    "ack": {"id": "str", "ok": "bool", "error": "str?", "result": "obj?"},
    "stats": {
        "dropped": "int",
        "queued": "int",
        "sent": "int?",
        "reconnects": "int?",
        "unknown": "int?",
    },
    # daemon -> bridge
    "welcome": {"daemon": "str"},
    "prompt": {
        "id": "str",
        "session_id": "str",
        "text": "str",
        "agent": "str?",
        "model": "obj?",
        "variant": "str?",
        "marker": "obj?",
    },
    "abort": {"id": "str", "session_id": "str"},
    "toast": {
        "id": "str?",
        "title": "str?",
        "message": "str",
        "variant": "str?",
        "duration": "int?",
    },
    "log": {"id": "str?", "level": "str", "message": "str", "extra": "obj?"},
    "reply": {"id": "str", "ok": "bool", "title": "str?", "message": "str", "variant": "str?"},
    "trim": {
        "id": "str?",
        "session_id": "str",
        "message_id": "str",
        "part_id": "str",
        "keep_chars": "int",
        "excerpt": "str?",
    },
    # issue 6: sent by the daemon after a hello (and again when its settings change)
    "config": {"id": "str?", "penalties": "obj?"},
}
BRIDGE_TYPES = frozenset({"hello", "event", "chat.message", "command", "ack", "stats"})
DAEMON_TYPES = frozenset(
    {"welcome", "prompt", "abort", "toast", "log", "reply", "trim", "config"}
)


class ProtocolError(ValueError):
    """A line that is not a valid v1 message; ``reason`` is a stable code shared with the JS."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


@dataclass(frozen=True)
class ModelRef:
    provider_id: str
    model_id: str

    @classmethod
    def parse(cls, raw: Mapping[str, Any] | None) -> ModelRef | None:
        if not raw:
            return None
        provider, model = raw.get("providerID"), raw.get("modelID")
        if isinstance(provider, str) and isinstance(model, str):
            return cls(provider, model)
        return None

    def wire(self) -> dict[str, str]:
        return {"providerID": self.provider_id, "modelID": self.model_id}


# ---------------------------------------------------------------- bridge -> daemon


@dataclass(frozen=True)
class Hello:
    pid: int
    directory: str
    project: str | None = None
    opencode: str | None = None
    bridge: str | None = None
    server_url: str | None = None
    exec: bool | None = None  # True: `autoretry exec` recovers this process's sessions
    #: session id -> {status, next?, permissions?, questions?}, least recently active first;
    #: None from a bridge older than the field. Read it with ``session_states``.
    sessions: Mapping[str, Any] | None = field(default=None, repr=False)
    #: injection id -> session id of the marked continuations the process ran; None from a
    #: bridge older than the field. Read it with ``ran_injections``.
    prompts: Mapping[str, Any] | None = field(default=None, repr=False)


#: A hello names at most this many sessions (the bridge's SESSION_BOOK_LIMIT, books.js): more
#: is cut, the least recently active first. The bridge's limits are pinned to these by
#: tests/test_shared_limits.py.
HELLO_SESSIONS = 256
#: Asks per session and kind (the bridge's ASKS_LIMIT, books.js), and the longest id taken.
HELLO_ASKS = 8
_MAX_ID = 200
SESSION_STATUSES = ("busy", "retry", "idle")


@dataclass(frozen=True)
class SessionState:
    """One session a hello names: what the bridge last saw of it (issue 11)."""

    session_id: str
    status: str | None = None  # busy | retry | idle; None: no status event seen yet
    retry_next: int | None = None  # epoch ms of OpenCode's next attempt (status retry)
    permissions: tuple[str, ...] = ()  # asks still open
    questions: tuple[str, ...] = ()


def _ids(raw: object) -> tuple[str, ...] | None:
    if raw is None:
        return ()
    if not isinstance(raw, list) or len(raw) > HELLO_ASKS:
        return None
    if not all(isinstance(i, str) and 0 < len(i) <= _MAX_ID for i in raw):
        return None
    return tuple(raw)


def _session_state(session_id: object, raw: object) -> SessionState | None:
    if not isinstance(session_id, str) or not session_id.startswith("ses_"):
        return None  # the daemon ignores ids without the prefix (R12)
    if len(session_id) > _MAX_ID or not isinstance(raw, dict):
        return None
    status, nxt = raw.get("status"), raw.get("next")
    if status is not None and status not in SESSION_STATUSES:
        return None  # a status this side does not know could be a wait: not adopted
    if nxt is not None and not _kind_ok("int", nxt):
        return None
    permissions, questions = _ids(raw.get("permissions")), _ids(raw.get("questions"))
    if permissions is None or questions is None:
        return None
    return SessionState(session_id, status, nxt, permissions, questions)


def session_states(hello: Hello) -> tuple[tuple[SessionState, ...], int]:
    """The sessions a hello names (none from an older bridge), and how many entries were
    malformed and dropped: one bad entry costs that session, never the hello."""
    raw = hello.sessions or {}
    items = list(raw.items())[-HELLO_SESSIONS:]
    states = [_session_state(session_id, value) for session_id, value in items]
    kept = tuple(s for s in states if s is not None)
    return kept, len(raw) - len(kept)


#: A hello names at most this many continuations run (the bridge's PROMPT_BOOK_LIMIT, books.js).
HELLO_PROMPTS = 256


def ran_injections(hello: Hello) -> Mapping[int, str] | None:
    """The continuations the hello's process ran: injection id -> its session. None when its
    bridge does not say (older than the field, or a malformed one): then nothing may be sent
    again. The session counts: a daemon with a store made anew numbers its injections from 1
    again, and an id the process ran for another session is not this store's."""
    raw = hello.prompts
    if raw is None or len(raw) > HELLO_PROMPTS:
        return None
    if not all(isinstance(k, str) and k.isdigit() and len(k) <= 18 for k in raw):
        return None
    if not all(isinstance(v, str) for v in raw.values()):
        return None
    return {int(k): v for k, v in raw.items()}


@dataclass(frozen=True)
class Event:
    """A bus event from the plugin's ``event`` hook: ``event`` is ``{type, properties}``."""

    t: int
    event: Mapping[str, Any] = field(repr=False)

    @property
    def event_type(self) -> str:
        return str(self.event.get("type", ""))

    @property
    def properties(self) -> Mapping[str, Any]:
        value = self.event.get("properties")
        return value if isinstance(value, Mapping) else {}

    @property
    def session_id(self) -> str | None:
        props = self.properties
        for source in (props, props.get("info"), props.get("part")):
            if isinstance(source, Mapping) and isinstance(source.get("sessionID"), str):
                return str(source["sessionID"])
        return None


@dataclass(frozen=True)
class ChatMessage:
    """The plugin's ``chat.message`` hook: a user message about to be saved."""

    t: int
    session_id: str
    message_id: str | None = None
    agent: str | None = None
    model: ModelRef | None = None
    variant: str | None = None
    marker: Mapping[str, Any] | None = None
    synthetic: bool = False
    text: str = ""
    command: bool = False  # the text is a "/autoretry ..." line that reached the chat


@dataclass(frozen=True)
class Command:
    id: str
    name: str
    session_id: str | None = None
    arguments: str = ""


@dataclass(frozen=True)
class Ack:
    id: str
    ok: bool
    error: str | None = None
    result: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Stats:
    dropped: int
    queued: int
    sent: int | None = None
    reconnects: int | None = None
    unknown: int | None = None


@dataclass(frozen=True)
class Unknown:
    """A message of a type this side does not know (tolerated, counted by the receiver)."""

    type: str
    data: Mapping[str, Any] = field(repr=False)


BridgeInbound = Hello | Event | ChatMessage | Command | Ack | Stats | Unknown


# ---------------------------------------------------------------- daemon -> bridge


@dataclass(frozen=True)
class Welcome:
    daemon: str


@dataclass(frozen=True)
class Prompt:
    id: str
    session_id: str
    text: str
    agent: str | None = None
    model: ModelRef | None = None
    variant: str | None = None
    marker: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Abort:
    id: str
    session_id: str


@dataclass(frozen=True)
class Toast:
    message: str
    id: str | None = None
    title: str | None = "autoretry"
    variant: str | None = "info"
    duration: int | None = None


@dataclass(frozen=True)
class Log:
    level: str
    message: str
    id: str | None = None
    extra: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Reply:
    id: str
    ok: bool
    message: str
    title: str | None = "autoretry"
    variant: str | None = "info"


@dataclass(frozen=True)
class Trim:
    """Keep only the first ``keep_chars`` chars of a part in what the model is sent on later
    steps (the TUI and OpenCode's DB keep the full text). ``excerpt`` is the repeated block
    ending at ``keep_chars``; the bridge uses it to check (and, if need be, find) the cut."""

    session_id: str
    message_id: str
    part_id: str
    keep_chars: int
    id: str | None = None
    excerpt: str | None = None


@dataclass(frozen=True)
class Config:
    """Bridge settings from the daemon. ``penalties``: provider id -> sampling options the
    bridge adds in ``chat.params`` (e.g. ``{"frequency_penalty": 0.3}``); empty = none."""

    id: str | None = None
    penalties: Mapping[str, Any] | None = None


DaemonOutbound = Welcome | Prompt | Abort | Toast | Log | Reply | Trim | Config

_CLASSES: dict[str, type] = {
    "hello": Hello,
    "event": Event,
    "chat.message": ChatMessage,
    "command": Command,
    "ack": Ack,
    "stats": Stats,
    "welcome": Welcome,
    "prompt": Prompt,
    "abort": Abort,
    "toast": Toast,
    "log": Log,
    "reply": Reply,
    "trim": Trim,
    "config": Config,
}
_TYPE_OF = {cls: name for name, cls in _CLASSES.items()}


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_num(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


_KIND_CHECKS: dict[str, Callable[[object], bool]] = {
    "str": lambda value: isinstance(value, str),
    "int": _is_int,
    "num": _is_num,
    "bool": lambda value: isinstance(value, bool),
    "obj": lambda value: isinstance(value, dict),
}


def _kind_ok(kind: str, value: object) -> bool:
    return _KIND_CHECKS.get(kind, _KIND_CHECKS["obj"])(value)


# SCHEMA compiled once: (field, kind, check, optional) per type. ``validate`` runs for every
# line a bridge sends (hundreds a second while sessions stream), so it must not re-parse the
# "str?" specs each time.
_FIELDS: dict[str, tuple[tuple[str, str, Callable[[object], bool], bool], ...]] = {
    kind: tuple(
        (name, spec.rstrip("?"), _KIND_CHECKS.get(spec.rstrip("?"), _KIND_CHECKS["obj"]),
         spec.endswith("?"))
        for name, spec in fields.items()
    )
    for kind, fields in SCHEMA.items()
}


def _brief(value: object, limit: int = 40) -> str:
    """A value in an error message, cut short: errors are logged, and a line's content is
    the user's conversation (fuzzing found a 1 MiB ``v`` copied into the daemon log)."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} chars)"


def validate(obj: object) -> dict[str, Any]:
    """Check a decoded object against the v1 table; returns it, or raises ProtocolError."""
    if not isinstance(obj, dict):
        raise ProtocolError("not_object", f"expected a JSON object, got {type(obj).__name__}")
    version = obj.get("v")
    if version != PROTOCOL_VERSION or isinstance(version, bool):
        raise ProtocolError("bad_version", f"v must be {PROTOCOL_VERSION}, got {_brief(version)}")
    kind = obj.get("type")
    if not isinstance(kind, str) or not kind:
        raise ProtocolError("bad_type", f"type must be a non-empty string, got {_brief(kind)}")
    for name, field_kind, check, optional in _FIELDS.get(kind, ()):
        value = obj.get(name)
        if value is None:
            if not optional:
                raise ProtocolError("missing_field", f"{_brief(kind)}: {name} is required")
            continue
        if not check(value):
            raise ProtocolError("bad_field", f"{_brief(kind)}: {name} must be {field_kind}")
    return obj


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


#: A decoded line nests at most this deep (OpenCode's events nest about ten levels, tool
#: inputs a few more): deeper lines are refused before anything walks them recursively.
MAX_DEPTH = 100
#: ... and holds at most this many objects and arrays: one 1 MiB line of ``[{},{},…]`` made
#: about 24 MB of Python objects (issue 20). A hello naming 256 sessions needs a few thousand.
MAX_CONTAINERS = 50_000


def _repair(value: Any) -> Any:
    """Lone UTF-16 surrogates (``"\\ud83d"``) become U+FFFD, in keys and values.

    The bridge cuts texts by UTF-16 units (``text.slice(0, 500)``), so an emoji on the cut
    leaves half a pair, which JSON.stringify writes as an escape; Python decodes it into a
    str that no UTF-8 codec (SQLite, the log, the socket) accepts. Found by fuzzing.

    Iterative, repairing the fresh containers ``json.loads`` made in place: a recursive walk
    of a line nested 500 deep raised RecursionError and ended the reader thread (issue 20)."""
    if isinstance(value, str):
        return _LONE_SURROGATE.sub("\ufffd", value)
    stack: list[Any] = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            for index, item in enumerate(node):
                if isinstance(item, str):
                    node[index] = _LONE_SURROGATE.sub("\ufffd", item)
                elif isinstance(item, list | dict):
                    stack.append(item)
        elif isinstance(node, dict):
            items = list(node.items())
            node.clear()
            for key, item in items:
                if isinstance(item, str):
                    item = _LONE_SURROGATE.sub("\ufffd", item)
                elif isinstance(item, list | dict):
                    stack.append(item)
                node[_LONE_SURROGATE.sub("\ufffd", key)] = item
    return value


def _shape_error(value: Any) -> str | None:
    """Why ``value`` nests too deep or holds too many containers (iterative: any depth is
    safe), or None."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    containers = 0
    while stack:
        node, depth = stack.pop()
        containers += 1
        if depth > MAX_DEPTH:
            return f"nested deeper than {MAX_DEPTH}"
        if containers > MAX_CONTAINERS:
            return f"more than {MAX_CONTAINERS} objects and arrays"
        children = node.values() if isinstance(node, dict) else node
        stack.extend((child, depth + 1) for child in children if isinstance(child, list | dict))
    return None


def _check_shape(raw: bytes, obj: Any) -> None:
    # Counting brackets is C-fast and bounds depth and count from above: most lines skip
    # the walk.
    if raw.count(b"[") + raw.count(b"{") > MAX_DEPTH:
        error = _shape_error(obj)
        if error:
            raise ProtocolError("bad_json", error)


#: The C scanner ``json.loads`` ends up in (issue 21: a line is decoded for every coalesced
#: delta, and the Python layers around the scanner were a third of the decode).
_SCAN = json.scanner.make_scanner(json.JSONDecoder())  # type: ignore[arg-type]


def _loads(text: str) -> Any:
    """``json.loads(text)``: a line that is one object with nothing around it (every line a
    bridge writes) goes to the scanner directly; anything else, and any line the scanner
    refuses, goes through ``json.loads`` itself, so its errors are exactly those."""
    if text[:1] == "{" and text[-1:] == "}":
        try:
            obj, end = _SCAN(text, 0)
        except (StopIteration, ValueError, RecursionError):
            return json.loads(text)
        if end == len(text):
            return obj
    return json.loads(text)


def parse_line(line: bytes | str) -> dict[str, Any]:
    """Decode and validate one line (either direction) into a plain dict."""
    raw = line if isinstance(line, bytes) else line.encode("utf-8", "surrogatepass")
    if len(raw) > MAX_LINE_BYTES:
        raise ProtocolError("too_long", f"{len(raw)} bytes > {MAX_LINE_BYTES}")
    try:
        obj = _loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ProtocolError("bad_json", str(exc)) from exc
    except RecursionError as exc:  # found by fuzzing: "[[[[…" ended the reader thread
        raise ProtocolError("bad_json", "nested too deeply") from exc
    except ValueError as exc:  # found by fuzzing: an integer of more than 4300 digits
        raise ProtocolError("bad_json", str(exc)[:80]) from exc
    _check_shape(raw, obj)
    if b"\\ud" in raw or b"\\uD" in raw:  # only then can a lone surrogate be in there
        obj = _repair(obj)
    return validate(obj)


def _build(kind: str, obj: Mapping[str, Any]) -> Any:
    if kind == "event":  # most lines by far (every delta); both fields were validated
        return Event(t=obj["t"], event=obj["event"])
    cls = _CLASSES[kind]
    values = {k: obj[k] for k in SCHEMA[kind] if obj.get(k) is not None}
    if "model" in values:
        values["model"] = ModelRef.parse(values["model"])
    if kind == "command":
        values.setdefault("arguments", "")
    if kind == "chat.message":
        values.setdefault("text", "")
    return cls(**values)


def decode(line: bytes | str, allowed: frozenset[str]) -> Any:
    """Parse one line into its dataclass; types outside ``allowed`` become ``Unknown``."""
    obj = parse_line(line)
    kind = obj["type"]
    if kind not in allowed:
        return Unknown(type=kind, data=obj)
    return _build(kind, obj)


def decode_from_bridge(line: bytes | str) -> BridgeInbound:
    return cast(BridgeInbound, decode(line, BRIDGE_TYPES))


def decode_from_daemon(line: bytes | str) -> DaemonOutbound | Unknown:
    return cast(DaemonOutbound | Unknown, decode(line, DAEMON_TYPES))


def to_wire(message: Any) -> dict[str, Any]:
    """A message dataclass as its wire dict (``v`` and ``type`` first, ``None`` kept)."""
    kind = _TYPE_OF[type(message)]
    body = asdict(message)
    if isinstance(body.get("model"), dict):
        body["model"] = ModelRef(**body["model"]).wire()
    return {"v": PROTOCOL_VERSION, "type": kind, **body}


def encode(message: Any) -> bytes:
    """One message as a ``\\n``-terminated line; refuses what the other side would drop."""
    data = json.dumps(to_wire(message), ensure_ascii=False, separators=(",", ":")).encode()
    if len(data) >= MAX_LINE_BYTES:
        raise ProtocolError("too_long", f"{len(data)} bytes >= {MAX_LINE_BYTES}")
    return data + b"\n"
