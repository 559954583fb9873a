"""PURE: ``[repetition.penalties.<provider>]`` of config.toml, validated into sampling options.

The daemon sends them to each bridge on hello (``RepetitionGuard.on_hello``); off by default
(no table, nothing sent). ``"*"`` applies to every other provider.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from opencode_autoretry.config.settings import SettingsError

PENALTY_RANGES: Mapping[str, tuple[float, float]] = {
    "frequency_penalty": (-2.0, 2.0),  # OpenAI's documented ranges
    "presence_penalty": (-2.0, 2.0),
    "repetition_penalty": (0.0, 2.0),  # vLLM / llama.cpp style: 1.0 is "off"
}


def load_penalties(raw: Mapping[str, Any]) -> dict[str, dict[str, float]]:
    """``[repetition]`` -> provider id -> sampling options; raises SettingsError naming the key."""
    if not isinstance(raw, Mapping):
        raise SettingsError(f"repetition must be a table, got {type(raw).__name__} {raw!r}")
    unknown = sorted(str(k) for k in set(raw) - {"penalties"})
    if unknown:
        raise SettingsError(f"repetition: unknown key(s) {', '.join(unknown)} (known: penalties)")
    table = raw.get("penalties", {})
    if not isinstance(table, Mapping):
        raise SettingsError("repetition.penalties must be a table of provider tables, got "
                            f"{type(table).__name__} {table!r}")
    return {str(provider): _provider_penalties(str(provider), v) for provider, v in table.items()}


def _provider_penalties(provider: str, values: object) -> dict[str, float]:
    path = f"repetition.penalties.{provider}"
    if not isinstance(values, Mapping):
        raise SettingsError(f"{path} must be a table, got {type(values).__name__} {values!r}")
    out: dict[str, float] = {}
    for key, value in values.items():
        if key not in PENALTY_RANGES:
            raise SettingsError(f"{path}: unknown key {key!r} (known: {', '.join(PENALTY_RANGES)})")
        low, high = PENALTY_RANGES[key]
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        if not ok or not math.isfinite(value) or not low <= value <= high:
            raise SettingsError(f"{path}.{key} must be a number from {low:g} to {high:g}, "
                                f"got {value!r}")
        out[key] = float(value)
    return out
