"""`python -m opencode_autoretry.cli`: the same as the `autoretry` command."""

from opencode_autoretry.cli.main import console

console()
