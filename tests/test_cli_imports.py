"""`autoretry --help` loads only the CLI: a command imports what it runs, when it runs."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys

import click

from opencode_autoretry.cli.main import _GROUP_OF, COMMAND_GROUPS, SUMMARIES, _commands_of

HEAVY = (
    "apscheduler",
    "sqlite_utils",
    "watchdog",
    "opencode_autoretry.daemon.loop",
    "opencode_autoretry.store.database",
    "opencode_autoretry.decisions.classifier",
    "apprise",  # [notify] urls only (tests/test_notify_apprise.py: and only with a URL)
    # the commands' own modules: the list of commands is drawn from their summaries
    "opencode_autoretry.diagnostics.commands",
    "opencode_autoretry.daemon.commands",
    "opencode_autoretry.daemon.lifecycle",
    "opencode_autoretry.daemon.setup",
    "opencode_autoretry.daemon.headless.command",
    "opencode_autoretry.plugin_bridge.commands",
    "opencode_autoretry.diagnostics.doctor.command",
    "opencode_autoretry.daemon.notifications.commands",
    "opencode_autoretry.cli.config_command",
    # the settings: read when a command runs, not to print help
    "opencode_autoretry.config.settings",
    "tomllib",
)

# A fresh interpreter: this test process has long imported everything.
PROBE = """
import json, sys
from opencode_autoretry.cli.main import main
try:
    main(["--help"])
except SystemExit:
    pass
print(json.dumps(sorted(sys.modules)), file=sys.stderr)
"""


def test_help_does_not_import_the_daemon_or_its_libraries() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60, check=True
    )
    loaded = json.loads(done.stderr.strip().splitlines()[-1])
    assert "Commands:" in done.stdout and "diagnose" in done.stdout and "run" in done.stdout
    pulled = [m for m in loaded if any(m == h or m.startswith(h + ".") for h in HEAVY)]
    assert pulled == []


def test_each_listed_summary_is_its_commands_first_paragraph() -> None:
    """``--help`` lists stand-ins carrying ``SUMMARIES``: they must say what each command's
    own docstring says (click shortens both the same way), for every command there is."""
    commands = [c for group in COMMAND_GROUPS for c in _commands_of(group)]
    assert sorted(c.name or "" for c in commands) == sorted(SUMMARIES) == sorted(_GROUP_OF)
    for command in commands:
        assert command.short_help is None and not command.hidden and not command.deprecated
        first = inspect.cleandoc(command.help or "").partition("\n\n")[0]
        assert " ".join(first.split()) == SUMMARIES[command.name or ""], command.name
        for limit in (20, 45, 74, 200):
            shown = click.Command(command.name, help=SUMMARIES[command.name or ""])
            assert shown.get_short_help_str(limit) == command.get_short_help_str(limit)
