"""What every sub-command gets from the ``autoretry`` group: its flags, the config loaded once.

It sits below ``cli`` and every ``commands`` module, so they share it without importing
each other (the group attaches the commands; a command never imports the group).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from opencode_autoretry.config.settings import (
    Resolved,
    Settings,
    SettingsError,
    config_line,
    resolve,
    resolve_with_sources,
)

if TYPE_CHECKING:  # config.load brings the decision core: loaded when a command needs it
    from opencode_autoretry.config.load import Config

#: = ``config.load.EXIT_BAD_CONFIG`` (not imported: ``autoretry --help`` stays light).
EXIT_BAD_CONFIG = 2


class BadConfig(click.ClickException):
    """A bad configuration: the one line of ``config.load.config_line``, exit 2, for every
    command (issue 18: it was 2 at the top level and 1 inside tables)."""

    exit_code = EXIT_BAD_CONFIG


class AppContext:
    """Resolves settings, and the whole config, once, lazily, from the group's flags."""

    def __init__(self, flags: dict[str, object], config: Path | None) -> None:
        self._flags = flags
        self._config_path = config
        self._settings: Settings | None = None
        self._config: Config | None = None

    def settings(self, **more: object) -> Settings:
        """The resolved settings only (reports that need a path, not the tables)."""
        if self._settings is None or more:
            try:
                self._settings = resolve({**self._flags, **more}, config_path=self._config_path)
            except SettingsError as exc:
                raise BadConfig(config_line(exc)) from exc
        return self._settings

    def config(self, **more: object) -> Config:
        """The whole configuration, validated (``run``, ``exec``, ``doctor``, ``status``,
        ``notify test``); a bad one raises BadConfig with its one line."""
        from opencode_autoretry.config.load import load_config
        from opencode_autoretry.config.settings import ConfigError

        if self._config is None or more:
            try:
                self._config = load_config({**self._flags, **more},
                                           config_path=self._config_path)
            except ConfigError as exc:
                raise BadConfig(config_line(exc)) from exc
            self._settings = self._config.settings
        return self._config

    def fresh_config(self, **more: object) -> Config:
        """The configuration as the files and environment say NOW (SIGHUP's reload), read
        again past the cache; a bad one raises BadConfig."""
        self._config = None
        return self.config(**more)

    def resolved(self) -> Resolved:
        """The settings with where each value came from (``autoretry config show``)."""
        try:
            return resolve_with_sources(self._flags, config_path=self._config_path)
        except SettingsError as exc:
            raise BadConfig(config_line(exc)) from exc

    def environment(self) -> dict[str, str]:
        """The group's flags as the ``AUTORETRY_*`` variables that say the same (a daemon
        started by ``autoretry start`` runs as plain ``autoretry run``)."""
        names = {f"AUTORETRY_{key.upper()}": value for key, value in self._flags.items()}
        names["AUTORETRY_CONFIG"] = self._config_path
        return {name: str(value) for name, value in names.items() if value is not None}

    def copy(self) -> AppContext:
        """The same flags, nothing resolved yet (a thread that must read the files anew)."""
        return AppContext(dict(self._flags), self._config_path)

    @property
    def config_path(self) -> Path | None:
        return self._config_path

