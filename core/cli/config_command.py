"""``autoretry config path | show | check``: where the configuration is, what it says, whether
``run`` would take it (issue 24).

``check`` loads the configuration exactly as ``run`` does (``AppContext.config``), so it fails
with the same exit status and the same one line; ``show`` names, for every setting, the flag,
variable or file its value came from, or that it is the default.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click

from opencode_autoretry.cli.context import AppContext
from opencode_autoretry.config.paths import file_exists
from opencode_autoretry.config.settings import Resolved, Source, config_file_for
from opencode_autoretry.terminal_text import json_visible, visible


def config_file(app: AppContext) -> Path:
    """The config file every command reads: ``--config``, ``$AUTORETRY_CONFIG``, the default."""
    return config_file_for(os.environ, app.config_path)


@click.group("config")
def config_group() -> None:
    """Where the configuration is, what it says, and whether the daemon would take it."""


@config_group.command("path")
@click.pass_obj
def path_command(app: AppContext) -> None:
    """Print the config file's path (and whether it exists)."""
    path = config_file(app)
    note = "" if file_exists(path) else "  (not found: the defaults apply)"
    click.echo(visible(f"{path}{note}"))


@config_group.command("check")
@click.pass_obj
def check_command(app: AppContext) -> None:
    """Validate the configuration as `autoretry run` does: exit 2 and one line when it is bad."""
    app.config()  # BadConfig: exit 2 and run's own line
    click.echo(visible(f"config ok: {config_file(app)}"))


def _source_text(source: Source) -> str:
    return f"{source.kind} {source.where}" if source.where else source.kind


def _value(value: object) -> Any:
    """A setting as JSON: paths as text, the raw tables as they are."""
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, Mapping):
        return json.loads(json.dumps(value, default=str))
    return value


def show_report(resolved: Resolved) -> dict[str, Any]:
    settings = {
        name: {"value": _value(getattr(resolved.settings, name)), "source": source.kind,
               "where": source.where}
        for name, source in resolved.sources.items()
    }
    return {"config": str(resolved.config_file), "exists": file_exists(resolved.config_file),
            "settings": settings}


def render_show(report: Mapping[str, Any]) -> str:
    found = "" if report["exists"] else " (not found: the defaults apply)"
    lines = [f"config file: {report['config']}{found}"]
    width = max(len(name) for name in report["settings"])
    for name, entry in report["settings"].items():
        value = entry["value"]
        text = json.dumps(value, ensure_ascii=False) if isinstance(value, dict) else str(value)
        source = Source(entry["source"], entry["where"])
        lines.append(f"{name:<{width}}  {text}  ({_source_text(source)})")
    return "\n".join(lines)


@config_group.command("show")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_obj
def show_command(app: AppContext, as_json: bool) -> None:
    """Print the effective settings, each with where its value came from: flag, environment,
    file or default (a bad configuration: exit 2 and one line, as `run`)."""
    app.config()  # refuses what run refuses
    report = show_report(app.resolved())
    if as_json:
        click.echo(json_visible(json.dumps(report, indent=2, ensure_ascii=False)))
    else:
        click.echo(visible(render_show(report)))


COMMANDS: list[click.Command] = [config_group]
