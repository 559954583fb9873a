"""``autoretry exec -- opencode run …``: a headless run that recovers its own failed turns."""

from __future__ import annotations

import random
import sys
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:  # cli.py imports this module while it attaches the commands
    from opencode_autoretry.cli.context import AppContext

EXIT_USAGE = 2

HELP = """Run a headless `opencode run` and continue its session when the turn fails.

\b
  autoretry exec -- opencode run "fix the failing test"
  autoretry exec -- opencode run --format json --model anthropic/claude-sonnet-4-5 "task"
  autoretry exec -- opencode run --session ses_abc "go on"
  autoretry exec --until "pytest -q" -- opencode run "make the tests pass"

The run's output passes through unchanged. When it has exited, exec reads the session it
worked on from OpenCode's database; a blank reply, a cut connection, a rate limit that
outlasted OpenCode's own retries (any failure the daemon recovers) is continued with
`opencode run --session ID` on the turn's model and agent, within the same per-turn budgets
and backoff as the daemon, recorded for `autoretry trace`. The daemon, if running, leaves
these runs to exec. exec's own lines go to stderr, prefixed `autoretry:`. SIGINT/SIGTERM
are passed on to the run and stop further continuations.

With --until, a healthy end is checked with that shell command (in the session's directory;
[goal] timeout, max_continuations, max_minutes) and, while it fails, continued with its exit
status and the tail of its output (docs/goals-and-caps.md).

\b
Exit status:
  0    the final turn is healthy (with --until: and the final check passes)
  75   autoretry gave up on a recoverable failure (budget exhausted), or with
       --until, gave up with the check still failing
  N    the command's own status when it failed in a way autoretry does not
       recover (401, usage limit with no known reset, crash, autoretry off);
       a usage limit whose reset is known is waited out, up to [quota] max_wait
  2    usage error (no command, not `opencode run`, --attach, --interactive) or a bad
       config.toml (one line naming the key)

In observe mode (--observe, or mode = "observe" in config.toml) exec judges and records
the run's last turn, says on stderr what it would have done, re-runs nothing and exits with
the run's own status.
"""


@click.command("exec", help=HELP, context_settings={
    "ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("-v", "--verbose", is_flag=True, help="Say how each turn was judged (stderr).")
@click.option("--until", "until", metavar="SHELL_COMMAND", default=None,
              help="Continue until this check passes (a goal, issue 22).")
@click.option("--observe", is_flag=True,
              help="Observe mode: judge and record what would be done; re-run nothing.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@click.pass_obj
def exec_command(app: AppContext, verbose: bool, until: str | None, observe: bool,
                 command: tuple[str, ...]) -> None:
    # Imported when it runs: `autoretry --help` must not load the store or the classifier.
    from opencode_autoretry.clock import SystemClock
    from opencode_autoretry.daemon.headless.run import Runner, install_signals, say
    from opencode_autoretry.opencode.db import OpenCodeDB
    from opencode_autoretry.opencode.run_args import RunArgsError, parse_run
    from opencode_autoretry.store.database import Store, StoreError

    try:
        run = parse_run(command)
    except RunArgsError as exc:
        say(sys.stderr, f"usage: {exc}")
        sys.exit(EXIT_USAGE)
    # A bad config: its one line, exit 2, before the run starts.
    config = app.config(mode="observe") if observe else app.config()
    settings = config.settings
    try:
        store = Store.open(settings.store)
    except StoreError as exc:
        say(sys.stderr, str(exc))
        sys.exit(EXIT_USAGE)
    runner = Runner(run, list(command), store, lambda: OpenCodeDB.open(settings.opencode_db),
                    config, SystemClock(), rand=random.random, verbose=verbose, until=until)
    install_signals(runner)
    try:
        status = runner.execute()
    finally:
        store.close()
    sys.exit(status)


COMMANDS: list[click.Command] = [exec_command]
