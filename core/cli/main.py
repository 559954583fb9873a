"""The ``autoretry`` command: the composition root that attaches every sub-command."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from opencode_autoretry.cli.context import AppContext

#: Every sub-command by the module that defines it (``_commands_of`` imports that module).
COMMAND_GROUPS: dict[str, tuple[str, ...]] = {
    "reports": ("diagnose", "timeline", "errors", "trace"),
    "daemon": ("run", "on", "off", "status"),
    "lifecycle": ("start", "stop", "restart", "logs"),
    "config": ("config",),
    "exec": ("exec",),
    "bridge": ("bridge",),
    "doctor": ("doctor",),
    "notify": ("notify",),
    "setup": ("setup",),
}
_GROUP_OF = {name: group for group, names in COMMAND_GROUPS.items() for name in names}


def _commands_of(group: str) -> list[click.Command]:
    """The commands of one module, imported when one of them runs (or ``--help`` lists them
    all), so a report does not load the daemon's commands (issue 21: ~40 modules)."""
    if group == "reports":
        from opencode_autoretry.diagnostics.commands import COMMANDS as reports
        return reports
    if group == "daemon":
        from opencode_autoretry.daemon.commands import COMMANDS as daemon
        return daemon
    if group == "lifecycle":
        from opencode_autoretry.daemon.lifecycle import COMMANDS as lifecycle
        return lifecycle
    if group == "config":
        from opencode_autoretry.cli.config_command import COMMANDS as config
        return config
    if group == "exec":
        from opencode_autoretry.daemon.headless.command import COMMANDS as headless
        return headless
    if group == "bridge":
        from opencode_autoretry.plugin_bridge.commands import COMMANDS as bridge
        return bridge
    if group == "doctor":
        from opencode_autoretry.diagnostics.doctor.command import COMMANDS as doctor
        return doctor
    if group == "notify":
        from opencode_autoretry.daemon.notifications.commands import COMMANDS as notify
        return notify
    from opencode_autoretry.daemon.setup import COMMANDS as setup

    return setup


class _Commands(click.Group):
    """``main``'s sub-commands, each loaded from its module when asked for."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(_GROUP_OF)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        group = _GROUP_OF.get(cmd_name)
        if group is None:
            return None
        return next((c for c in _commands_of(group) if c.name == cmd_name), None)


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
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
    if ctx.invoked_subcommand not in WRITES_FOR_OPENCODE:
        # Every other command may create state (the store and its -wal/-shm under exec, the
        # report index under diagnose, ...) before any daemon made the directories private:
        # none of it may be readable by other users (issue 20).
        os.umask(0o077)
    ctx.obj = AppContext({"opencode_db": opencode_db, "store": store}, config)


#: Sub-commands that write OpenCode's files (the bridge plugin and its command file), which
#: keep the user's own umask (setup's state dirs are made private by ``private_state``).
WRITES_FOR_OPENCODE = frozenset({"bridge", "setup"})


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
