"""The ``autoretry`` command: the composition root that attaches every sub-command."""

from __future__ import annotations

import os
from pathlib import Path

import click

from opencode_autoretry.cli import process_end

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
#: Each sub-command's help as ``autoretry --help`` lists it: the first paragraph of its
#: docstring, words as click splits them (tests/test_cli_imports.py keeps the two equal), so
#: the list imports none of the commands' modules (~20 ms of ``--help``).
SUMMARIES: dict[str, str] = {
    'bridge': 'The plugin that connects every OpenCode process to the daemon (and /autoretry).',
    'config': 'Where the configuration is, what it says, and whether the daemon would take it.',
    'diagnose': 'Health check plus every abnormal step of the last DAYS days (0 = all).',
    'doctor': (
        'Check the set-up: OpenCode and its DB, the bridge, the daemon, the service, the '
        'socket, the state files and the config. Prints a fix for every problem; exits 1 if one '
        'failed, 2 if the config is bad (as every command).'
    ),
    'errors': 'The 10 newest errored steps, or at most 5 whose error contains KEYWORD.',
    'exec': 'Run a headless `opencode run` and continue its session when the turn fails.',
    'logs': "Print the end of the daemon's log (control characters shown as escapes).",
    'notify': 'Notifications outside OpenCode ([notify] in config.toml).',
    'off': 'Switch automatic recovery off; pending retries are cancelled.',
    'on': 'Switch automatic recovery on (everywhere, or for one session).',
    'restart': 'Stop the daemon, then start it (as `stop` and `start`).',
    'run': 'Run the daemon: watch OpenCode, classify failed turns, continue them within budget.',
    'setup': (
        'Set autoretry up after `pipx install` or `uv tool install`: the OpenCode bridge and '
        '/autoretry command, an OpenCode version check, the daemon as a service (waits for its '
        'first heartbeat) and where its files are. Run again to upgrade. Exit 1, with the '
        "daemon's own error, when it cannot start."
    ),
    'start': (
        'Start the daemon: through the systemd user service or launchd agent setup made, else '
        '`autoretry run` in the background (waits for its first heartbeat; exit 1 with the '
        "daemon's own error when it does not start). AUTORETRY_SERVICE=none skips the service."
    ),
    'status': 'Daemon, bridges, watched sessions, budgets, pending retries and last decisions.',
    'stop': 'Stop the daemon (SIGTERM, waits for it to end); exit 0 when none runs.',
    'timeline': "One session's steps, parts and the daemon's decisions (id, id prefix or slug).",
    'trace': 'Each continuation with its trigger and outcome, and the decisions not to act.',
}


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

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """Click's own list, of stand-ins carrying each command's summary."""
        listed = [click.Command(name, help=SUMMARIES[name]) for name in self.list_commands(ctx)]
        click.Group(commands=listed).format_commands(ctx, formatter)

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
    # Imported here: ``--help`` and ``--version`` never get this far, and need no settings.
    from opencode_autoretry.cli.context import AppContext

    ctx.obj = AppContext({"opencode_db": opencode_db, "store": store}, config)


def console() -> None:
    """The ``autoretry`` console script: ``main`` as click runs it (it always ends in
    ``SystemExit``); after a command that asked for it, the process ends without freeing its
    heap (cli/process_end.py: up to 1.7 s of a first report at 1 M messages)."""
    process_end.console_started()
    try:
        main()
    except SystemExit as done:
        if process_end.ending_without_teardown():
            process_end.end_now(done.code)
        raise


#: Sub-commands that write OpenCode's files (the bridge plugin and its command file), which
#: keep the user's own umask (setup's state dirs are made private by ``private_state``).
WRITES_FOR_OPENCODE = frozenset({"bridge", "setup"})


if __name__ == "__main__":  # pragma: no cover
    console()
