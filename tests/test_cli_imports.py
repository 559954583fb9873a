"""`autoretry --help` loads only the CLI: a command imports what it runs, when it runs."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = (
    "apscheduler",
    "sqlite_utils",
    "watchdog",
    "opencode_autoretry.daemon.loop",
    "opencode_autoretry.store.database",
    "opencode_autoretry.decisions.classifier",
    "apprise",  # [notify] urls only (tests/test_notify_apprise.py: and only with a URL)
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
