"""``autoretry notify test``: one test event to every configured channel, each result printed.

Exit 0 when every channel delivered, 1 when one failed, 2 for a bad ``[notify]`` table or no
channel at all.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:  # cli.py imports this module while it attaches the commands
    from opencode_autoretry.cli.context import AppContext


@click.group("notify")
def notify() -> None:
    """Notifications outside OpenCode ([notify] in config.toml)."""


@notify.command("test")
@click.pass_obj
def test_command(app: AppContext) -> None:
    """Send one test event to every configured channel and print each result."""
    from opencode_autoretry.daemon.notifications.notifier import cleartext_warning, send_test
    from opencode_autoretry.notifications.events import Notification, NotifyEvent

    config = app.config().notify  # a bad config: its one line, exit 2 (as every command)
    if not config.channels:
        raise click.UsageError("no channel configured: set desktop, command, webhook or urls "
                               "in [notify] of config.toml")
    warning = cleartext_warning(config)
    if warning:
        click.echo(f"warning: {warning}", err=True)
    note = Notification(NotifyEvent.TEST, "ses_test", datetime.now(tz=UTC),
                        "a test from `autoretry notify test`", title="autoretry notify test")
    failed = 0
    for channel, ok, error in send_test(config, note):
        click.echo(f"{channel}: {'ok' if ok else 'FAILED — ' + (error or 'unknown error')}")
        failed += not ok
    if failed:
        raise SystemExit(1)


COMMANDS: list[click.Command] = [notify]
