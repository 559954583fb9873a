"""The ``autoretry`` command: the composition root that attaches every sub-command."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path

import click

from opencode_autoretry.cli.context import AppContext


def _config() -> list[click.Command]:
    from opencode_autoretry.cli.config_command import COMMANDS

    return COMMANDS


def _daemon() -> list[click.Command]:
    from opencode_autoretry.daemon.commands import COMMANDS

    return COMMANDS


def _exec() -> list[click.Command]:
    from opencode_autoretry.daemon.headless.command import COMMANDS

    return COMMANDS


def _lifecycle() -> list[click.Command]:
    from opencode_autoretry.daemon.lifecycle import COMMANDS

    return COMMANDS


def _notify() -> list[click.Command]:
    from opencode_autoretry.daemon.notifications.commands import COMMANDS

    return COMMANDS


def _setup() -> list[click.Command]:
    from opencode_autoretry.daemon.setup import COMMANDS

    return COMMANDS


def _reports() -> list[click.Command]:
    from opencode_autoretry.diagnostics.commands import COMMANDS

    return COMMANDS


def _doctor() -> list[click.Command]:
    from opencode_autoretry.diagnostics.doctor.command import COMMANDS

    return COMMANDS


def _bridge() -> list[click.Command]:
    from opencode_autoretry.plugin_bridge.commands import COMMANDS

    return COMMANDS


#: Where each sub-command lives. A command's module is imported when it runs (or ``--help``
#: lists them all), so a report does not load the daemon's commands (issue 21: ~25 ms).
COMMAND_MODULES: dict[str, Callable[[], list[click.Command]]] = {
    "config": _config,
    **dict.fromkeys(("run", "on", "off", "status"), _daemon),
    "exec": _exec,
    **dict.fromkeys(("start", "stop", "restart", "logs"), _lifecycle),
    "notify": _notify,
    "setup": _setup,
    **dict.fromkeys(("diagnose", "timeline", "errors", "trace"), _reports),
    "doctor": _doctor,
    "bridge": _bridge,
}


class _Commands(click.Group):
    """``main``'s sub-commands, each loaded from its module when asked for."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMAND_MODULES)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        load = COMMAND_MODULES.get(cmd_name)
        if load is None:
            return None
        return next((c for c in load() if c.name == cmd_name), None)


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
