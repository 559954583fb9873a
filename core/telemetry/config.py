"""PURE: the ``[telemetry]`` table of config.toml, validated once into a ``TelemetryConfig``.

Off by default. ``otlp_endpoint`` is the base URL of an OTLP/HTTP collector (an OpenTelemetry
Collector, Grafana Alloy, ...): the daemon posts its counters to ``<endpoint>/v1/metrics`` every
``export_interval`` seconds and one span per decision to ``<endpoint>/v1/traces``. Like a
webhook, the URL may hold a secret (a token in its path or query), so errors show its scheme
and host only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from opencode_autoretry.config.settings import ConfigError
from opencode_autoretry.notifications.config import redact_url

TABLE = "telemetry"
DEFAULT_EXPORT_INTERVAL_S = 60.0
EXPORT_INTERVAL_RANGE = (1.0, 3600.0)
_KEYS = ("otlp_endpoint", "export_interval")


class TelemetryConfigError(ConfigError):
    """Bad ``[telemetry]`` configuration; the message names the key path."""


@dataclass(frozen=True)
class TelemetryConfig:
    otlp_endpoint: str | None = None  # None: nothing is exported, OpenTelemetry not imported
    export_interval: float = DEFAULT_EXPORT_INTERVAL_S  # seconds between two metric exports

    @property
    def enabled(self) -> bool:
        return self.otlp_endpoint is not None

    def signal_url(self, signal: str) -> str:
        """``<endpoint>/v1/<signal>`` (``metrics``, ``traces``), as OTLP/HTTP names them."""
        if self.otlp_endpoint is None:
            raise ValueError("telemetry is off")
        return f"{self.otlp_endpoint.rstrip('/')}/v1/{signal}"


def _endpoint(value: object) -> str:
    path = f"{TABLE}.otlp_endpoint"
    if not isinstance(value, str):
        raise TelemetryConfigError(
            f"{path} must be an http:// or https:// URL, e.g. \"http://127.0.0.1:4318\", got "
            f"{type(value).__name__}")
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise TelemetryConfigError(f"{path} must be an http:// or https:// URL, e.g. "
                                   f"\"http://127.0.0.1:4318\", got {redact_url(value)}")
    try:
        port = parts.port
    except ValueError:
        port = 0
    if port == 0 or parts.query or parts.fragment:
        raise TelemetryConfigError(f"{path} must be a base URL with a port from 1 to 65535 "
                                   f"and no query, got {redact_url(value)}")
    return value


def _interval(value: object) -> float:
    path = f"{TABLE}.export_interval"
    low, high = EXPORT_INTERVAL_RANGE
    if isinstance(value, bool) or not isinstance(value, int | float) or not (
            low <= value <= high):
        raise TelemetryConfigError(f"{path} must be a number of seconds from {low:g} to "
                                   f"{high:g}, got {value!r}")
    return float(value)


def load_telemetry(raw: Mapping[str, Any]) -> TelemetryConfig:
    """The raw ``[telemetry]`` table -> ``TelemetryConfig``; raises TelemetryConfigError."""
    for key in raw:
        if key not in _KEYS:
            raise TelemetryConfigError(
                f"{TABLE}: unknown key {key!r} (known: {', '.join(_KEYS)})")
    endpoint = _endpoint(raw["otlp_endpoint"]) if "otlp_endpoint" in raw else None
    interval = (_interval(raw["export_interval"]) if "export_interval" in raw
                else DEFAULT_EXPORT_INTERVAL_S)
    return TelemetryConfig(otlp_endpoint=endpoint, export_interval=interval)
