"""``autoretry bridge install | uninstall | status``: the plugin bridge in OpenCode's config dir."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from opencode_autoretry.config import paths

# The installer (hashing, sockets, package resources) is imported by the commands that run it,
# so `autoretry --help` stays quick.
if TYPE_CHECKING:
    from opencode_autoretry.cli.context import AppContext
    from opencode_autoretry.plugin_bridge import install as installer

CONFIG_OPTION = click.option(
    "--opencode-config",
    "config_dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="OpenCode's config dir (default: $XDG_CONFIG_HOME/opencode, i.e. ~/.config/opencode).",
)


def _config_dir(config_dir: Path | None) -> Path:
    return (config_dir or paths.opencode_config_dir()).expanduser()


def _echo_steps(steps: list[installer.Step]) -> None:
    from opencode_autoretry.plugin_bridge import install as installer

    for step in steps:
        note = (
            " (edited by you; --force to replace)" if step.action is installer.Action.KEPT else ""
        )
        click.echo(f"{step.action.value:>9}  {step.target}{note}")


@click.group("bridge")
def bridge() -> None:
    """The plugin that connects every OpenCode process to the daemon (and /autoretry)."""


@bridge.command("install")
@CONFIG_OPTION
@click.option("--force", is_flag=True, help="Also replace files you edited.")
def install_command(config_dir: Path | None, force: bool) -> None:
    """Copy the bridge plugin and the /autoretry command file into OpenCode's config dir."""
    from opencode_autoretry.plugin_bridge import install as installer

    target = _config_dir(config_dir)
    steps = installer.install(target, force=force)
    _echo_steps(steps)
    for duplicate in installer.duplicate_plugins(target):
        click.echo(f"  warning  {duplicate} is also loaded by OpenCode; remove it", err=True)
    if any(step.action in installer.CHANGED for step in steps):
        click.echo("Restart running OpenCode processes to load the new bridge.")


@bridge.command("uninstall")
@CONFIG_OPTION
@click.option("--force", is_flag=True, help="Also remove files you edited.")
def uninstall_command(config_dir: Path | None, force: bool) -> None:
    """Remove the bridge plugin and the /autoretry command file."""
    from opencode_autoretry.plugin_bridge import install as installer

    _echo_steps(installer.uninstall(_config_dir(config_dir), force=force))


@bridge.command("status")
@CONFIG_OPTION
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_obj
def status_command(app: AppContext, config_dir: Path | None, as_json: bool) -> None:
    """Is the bridge installed and up to date, and is the daemon's socket alive?"""
    from opencode_autoretry.plugin_bridge import install as installer

    target = _config_dir(config_dir)
    socket = app.settings().socket
    report: dict[str, Any] = {
        "config_dir": str(target),
        "files": {
            s.file.name: {"path": str(s.target), "state": s.state.value}
            for s in installer.status(target)
        },
        "duplicates": [str(p) for p in installer.duplicate_plugins(target)],
        "socket": str(socket),
        "daemon_alive": installer.socket_alive(socket),
    }
    if as_json:
        click.echo(json.dumps(report, indent=2))
        return
    # The widest label sets the column, so a nested file (autoretry/history.js) still lines up.
    label = "daemon socket"
    width = max([len(label), *(len(name) for name in report["files"])])
    for name, entry in report["files"].items():
        click.echo(f"{name:<{width}} {entry['state']:<10} {entry['path']}")
    alive = "alive" if report["daemon_alive"] else "not running (start it: autoretry run)"
    click.echo(f"{label:<{width}} {alive}  {socket}")


COMMANDS: list[click.Command] = [bridge]
