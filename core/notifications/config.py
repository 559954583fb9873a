"""PURE: the ``[notify]`` table of config.toml, validated once into a ``NotifyConfig``.

Four channels (a desktop notification, a command fed the event as JSON on stdin, an HTTP
webhook, and Apprise's URLs: Telegram, Discord, Pushover, e-mail …) and the events that reach
them. A typo stops start-up with the key path in the message
(``notify.events[1]: unknown event 'gaveup' …``), never a silent default. Webhook URLs carry
secrets (Slack's path, ntfy's topic, a ``?token=`` query), so only ``redact_url`` / ``scrub``
forms of them are ever logged or stored.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from opencode_autoretry.config.settings import ConfigError
from opencode_autoretry.notifications.apprise_urls import AppriseUrlError, check_urls, url_secrets

EVENTS = ("gave_up", "terminal", "loop_stopped", "stall_unrecovered", "recovered", "goal_met",
          "goal_given_up", "waiting_quota", "waiting")
DEFAULT_EVENTS: frozenset[str] = frozenset(EVENTS) - {"recovered"}
FORMATS = ("json", "slack", "ntfy")
DEFAULT_MAX_PER_HOUR = 20
DEFAULT_TIMEOUT_S = 10.0
#: How long a root session waits on a permission or a question before ``waiting`` (issue 23).
DEFAULT_WAITING_AFTER_S = 120.0
MAX_WAITING_AFTER_S = 86400.0
_KEYS = ("desktop", "command", "webhook", "webhook_format", "events", "max_per_hour", "timeout",
         "urls", "waiting_after")


class NotifyConfigError(ConfigError):
    """Bad ``[notify]`` configuration; the message names the key path."""


@dataclass(frozen=True)
class NotifyConfig:
    desktop: bool = False
    command: tuple[str, ...] = ()
    webhook: str | None = None
    webhook_format: str = "json"
    events: frozenset[str] = DEFAULT_EVENTS
    max_per_hour: int = DEFAULT_MAX_PER_HOUR
    timeout: float = DEFAULT_TIMEOUT_S  # per attempt, per channel
    urls: tuple[str, ...] = ()  # Apprise URLs (issue 23): one "apprise" channel for them all
    waiting_after: float = DEFAULT_WAITING_AFTER_S  # seconds an ask waits before ``waiting``

    @property
    def channels(self) -> tuple[str, ...]:
        """The configured channel names, in delivery order."""
        names = []
        if self.desktop:
            names.append("desktop")
        if self.command:
            names.append("command")
        if self.webhook:
            names.append("webhook")
        if self.urls:
            names.append("apprise")
        return tuple(names)

    def wants(self, event: str) -> bool:
        return bool(self.channels) and event in self.events

    def secrets(self) -> tuple[str, ...]:
        """Strings never to be written to a log or the store (see ``scrub``)."""
        found = [secret for url in self.urls for secret in url_secrets(url)]
        if self.webhook:
            parts = urlsplit(self.webhook)
            found += [self.webhook, parts.path, parts.query, parts.password or ""]
        return tuple(s for s in found if len(s) > 1)


def _type_error(path: str, expected: str, value: object) -> NotifyConfigError:
    return NotifyConfigError(f"{path} must be {expected}, got {type(value).__name__} {value!r}")


def _bool(value: object, path: str) -> bool:
    if not isinstance(value, bool):
        raise _type_error(path, "true or false", value)
    return value


def _command(value: object, path: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not value:
        raise _type_error(path, 'a non-empty list of strings, e.g. ["prog", "arg"]', value)
    for index, item in enumerate(value):
        if not isinstance(item, str) or (index == 0 and not item.strip()):
            raise _type_error(f"{path}[{index}]", "a string", item)
    return tuple(value)


def _webhook(value: object, path: str) -> str:
    if not isinstance(value, str):
        raise _type_error(path, "an http:// or https:// URL", value)
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        shown = redact_url(value)
        raise NotifyConfigError(f"{path} must be an http:// or https:// URL, got {shown}")
    try:  # found by a user: port 99999 passed here, then crashed `notify test` and the daemon
        port = parts.port
    except ValueError:
        port = 0
    if port == 0:
        raise NotifyConfigError(f"{path} must have a port from 1 to 65535, got "
                                f"{_port_text(parts.netloc)!r}")
    return value


def _port_text(netloc: str) -> str:
    """What follows the host's last ':' (never the userinfo, which may hold a password)."""
    host = netloc.rpartition("@")[2]
    return host.rpartition("]")[2].rpartition(":")[2] if ":" in host.rpartition("]")[2] else ""



def _choice(value: object, choices: Iterable[str], path: str) -> str:
    allowed = tuple(choices)
    if not isinstance(value, str) or value not in allowed:
        raise NotifyConfigError(f"{path}: unknown value {value!r} (known: {', '.join(allowed)})")
    return value


def _events(value: object, path: str) -> frozenset[str]:
    if not isinstance(value, list):
        raise _type_error(path, f"a list of events ({', '.join(EVENTS)})", value)
    return frozenset(_choice(item, EVENTS, f"{path}[{i}]") for i, item in enumerate(value))


def _int_between(value: object, low: int, high: int, path: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _type_error(path, "an integer", value)
    if not low <= value <= high:
        raise NotifyConfigError(f"{path} must be between {low} and {high}, got {value}")
    return value


def _seconds(value: object, low: float, high: float, path: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        raise _type_error(path, "a number of seconds", value)
    if not low <= value <= high:
        raise NotifyConfigError(f"{path} must be between {low:g} and {high:g} s, got {value}")
    return float(value)


def load_notify(raw: object) -> NotifyConfig:
    """Validate the raw ``[notify]`` table (``{}`` = no channel, nothing sent)."""
    if not isinstance(raw, Mapping):
        raise _type_error("notify", "a table", raw)
    table: Mapping[str, Any] = raw
    for key in table:
        if key not in _KEYS:
            raise NotifyConfigError(f"notify: unknown key {key!r} (known: {', '.join(_KEYS)})")
    config = NotifyConfig()
    values: dict[str, Any] = {}
    if "desktop" in table:
        values["desktop"] = _bool(table["desktop"], "notify.desktop")
    if "command" in table:
        values["command"] = _command(table["command"], "notify.command")
    if "webhook" in table:
        values["webhook"] = _webhook(table["webhook"], "notify.webhook")
    if "webhook_format" in table:
        values["webhook_format"] = _choice(table["webhook_format"], FORMATS,
                                           "notify.webhook_format")
    if "events" in table:
        values["events"] = _events(table["events"], "notify.events")
    if "max_per_hour" in table:
        values["max_per_hour"] = _int_between(table["max_per_hour"], 1, 10_000,
                                              "notify.max_per_hour")
    if "timeout" in table:
        values["timeout"] = _seconds(table["timeout"], 0.1, 60.0, "notify.timeout")
    if "urls" in table:
        try:  # Apprise is imported here only when the list holds a URL
            values["urls"] = check_urls(table["urls"], "notify.urls")
        except AppriseUrlError as exc:
            raise NotifyConfigError(str(exc)) from None
    if "waiting_after" in table:
        values["waiting_after"] = _seconds(table["waiting_after"], 0.0, MAX_WAITING_AFTER_S,
                                           "notify.waiting_after")
    return NotifyConfig(**{**config.__dict__, **values})


def redact_url(url: str) -> str:
    """``https://hooks.slack.com/…``: the scheme and host only; paths and queries are secrets."""
    parts = urlsplit(url)
    host = parts.hostname or "?"
    try:
        port = f":{parts.port}" if parts.port else ""
    except ValueError:  # out of range: refused by load_notify, never to crash a log line
        port = ""
    return f"{parts.scheme or '?'}://{host}{port}/…"


_TOKENISH = re.compile(r"(?i)\b(bearer|token|key|secret|password)(\s*[=:]\s*|\s+)\S+")


def scrub(text: str, secrets: Iterable[str] = ()) -> str:
    """Text fit for a log line or the store: known secrets and token-like pairs removed."""
    for secret in sorted(secrets, key=len, reverse=True):
        if secret:
            text = text.replace(secret, "…")
    return _TOKENISH.sub(lambda m: f"{m[1]}{m[2]}…", text)
