"""The ``autoretry`` command: the composition root that attaches every sub-command."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from opencode_autoretry.cli.context import AppContext


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
    if ctx.invoked_subcommand not in WRITES_FOR_OPENCODE:
        # Every other command may create state (the store and its -wal/-shm under exec, the
        # report index under diagnose, ...) before any daemon made the directories private:
        # none of it may be readable by other users (issue 20).
        os.umask(0o077)
    ctx.obj = AppContext({"opencode_db": opencode_db, "store": store}, config)


#: Sub-commands that write OpenCode's files (the bridge plugin and its command file), which
#: keep the user's own umask (setup's state dirs are made private by ``private_state``).
WRITES_FOR_OPENCODE = frozenset({"bridge", "setup"})


def _attach_commands() -> None:
    from opencode_autoretry.cli.config_command import COMMANDS as CONFIG
    from opencode_autoretry.daemon.commands import COMMANDS as DAEMON
    from opencode_autoretry.daemon.headless.command import COMMANDS as EXEC
    from opencode_autoretry.daemon.lifecycle import COMMANDS as LIFECYCLE
    from opencode_autoretry.daemon.notifications.commands import COMMANDS as NOTIFY
    from opencode_autoretry.daemon.setup import COMMANDS as SETUP
    from opencode_autoretry.diagnostics.commands import COMMANDS as REPORTS
    from opencode_autoretry.diagnostics.doctor.command import COMMANDS as DOCTOR
    from opencode_autoretry.plugin_bridge.commands import COMMANDS as BRIDGE

    for command in [*REPORTS, *DAEMON, *LIFECYCLE, *CONFIG, *EXEC, *BRIDGE, *DOCTOR, *NOTIFY,
                    *SETUP]:
        main.add_command(command)


_attach_commands()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
