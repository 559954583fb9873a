"""What every sub-command gets from the ``autoretry`` group: its flags, settings resolved once.

It sits below ``cli`` and every ``commands`` module, so they share it without importing
each other (the group attaches the commands; a command never imports the group).
"""

from __future__ import annotations

from pathlib import Path

import click

from opencode_autoretry.config.settings import Settings, SettingsError, resolve


class AppContext:
    """Resolves settings once, lazily, from the group's flags."""

    def __init__(self, flags: dict[str, object], config: Path | None) -> None:
        self._flags = flags
        self._config = config
        self._settings: Settings | None = None

    def settings(self, **more: object) -> Settings:
        if self._settings is None or more:
            try:
                self._settings = resolve({**self._flags, **more}, config_path=self._config)
            except SettingsError as exc:
                raise click.UsageError(str(exc)) from exc
        return self._settings
