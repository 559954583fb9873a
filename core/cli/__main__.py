"""`python -m opencode_autoretry.cli`: the same as the `autoretry` command."""

import sys

from opencode_autoretry.cli.main import main

sys.exit(main())
