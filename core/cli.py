"""The ``autoretry`` command: the composition root that attaches every sub-command."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from opencode_autoretry.settings import Settings, SettingsError, resolve


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


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--db",
    "opencode_db",
    type=click.Path(dir_okay=False, path_type=Path),
    help="OpenCode's database (default: $OPENCODE_DB or ~/.local/share/opencode/opencode.db).",
)
@click.option(
    "--store",
    type=click.Path(dir_okay=False, path_type=Path),
    help="autoretry's own store (default: ~/.local/share/opencode-autoretry/autoretry.db).",
)
@click.option(
    "--config",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Config file (default: ~/.config/opencode-autoretry/config.toml).",
)
@click.version_option(package_name="opencode-autoretry")
@click.pass_context
def main(
    ctx: click.Context, opencode_db: Path | None, store: Path | None, config: Path | None
) -> None:
    """Keep OpenCode sessions moving: watch, classify, continue, and explain.

    `autoretry run` starts the daemon; diagnose, timeline, errors and trace are read-only
    reports over OpenCode's database and the daemon's store.
    """
    ctx.obj = AppContext({"opencode_db": opencode_db, "store": store}, config)


def _attach_commands() -> None:
    from opencode_autoretry.daemon.commands import COMMANDS as DAEMON
    from opencode_autoretry.daemon.exec_command import COMMANDS as EXEC
    from opencode_autoretry.diagnostics.commands import COMMANDS as REPORTS
    from opencode_autoretry.plugin_bridge.commands import COMMANDS as BRIDGE

    for command in [*REPORTS, *DAEMON, *EXEC, *BRIDGE]:
        main.add_command(command)


_attach_commands()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
