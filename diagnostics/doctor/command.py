"""``autoretry doctor``: the command only; the checks are imported when it runs, so that
``autoretry --help`` loads neither the store nor psutil (see ``diagnostics/doctor/report.py``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:  # cli.py imports this module while it attaches the commands
    from opencode_autoretry.cli.context import AppContext


@click.command("doctor")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--opencode", "opencode_bin", metavar="PATH",
              help="The OpenCode binary to check (default: `opencode` on PATH).")
@click.option("--opencode-config", "config_dir",
              type=click.Path(file_okay=False, path_type=Path),
              help="OpenCode's config dir (default: $XDG_CONFIG_HOME/opencode).")
@click.pass_obj
def doctor_command(
    app: AppContext, as_json: bool, opencode_bin: str | None, config_dir: Path | None
) -> None:
    """Check the set-up: OpenCode and its DB, the bridge, the daemon, the service, the socket,
    the state files and the config. Prints a fix for every problem; exits 1 if one failed,
    2 if the config is bad (as every command)."""
    from opencode_autoretry.cli.context import EXIT_BAD_CONFIG
    from opencode_autoretry.diagnostics.doctor.checks import Status
    from opencode_autoretry.diagnostics.doctor.machine import Machine
    from opencode_autoretry.diagnostics.doctor.report import (
        doctor_json,
        render_doctor,
        run_checks,
        subject_for,
    )
    from opencode_autoretry.terminal_text import visible_keeping_colour

    checks = run_checks(subject_for(app, opencode_bin, config_dir), Machine())
    if as_json:
        click.echo(json.dumps(doctor_json(checks), indent=2))
    else:
        # Paths and versions come from the user's shell and machine: shown, never acted on.
        click.echo(visible_keeping_colour(render_doctor(checks)))
    if any(check.name == "config" and check.status is Status.FAIL for check in checks):
        raise SystemExit(EXIT_BAD_CONFIG)  # as run, exec, status and notify test
    if any(check.status is Status.FAIL for check in checks):
        raise SystemExit(1)


COMMANDS: list[click.Command] = [doctor_command]
