"""How long ``autoretry --help`` takes, and what importing the CLI imports (issue 12).

    flock /tmp/autoretry-e2e.lock .venv/bin/python bench/cli_startup.py [--runs 10]

Wall time of each command line (a fresh process each run, median and min of ``--runs``), and
``python -X importtime -c "import opencode_autoretry.cli.main"``: the sum of every module's own
import time (median over the runs; importtime itself adds overhead, so compare it with
itself) and which heavy libraries the import pulls in. Goal: ``autoretry --help`` < 150 ms.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
HEAVY = ("apscheduler", "sqlite_utils", "watchdog", "psutil", "opencode_autoretry.daemon.loop")
COMMANDS = (["--help"], ["status", "--help"], ["diagnose", "--help"])


def wall_ms(argv: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, cwd=ROOT)
    return (time.perf_counter() - start) * 1000


def importtime(module: str) -> tuple[float, list[str]]:
    """Sum of the self times (ms) and the top-level names of every module imported."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", f"import {module}"],
        check=True, capture_output=True, text=True, cwd=ROOT,
    )
    total_us, names = 0, []
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        self_us, _cumulative, name = line.removeprefix("import time:").split("|")
        total_us += int(self_us)
        names.append(name.strip())
    return total_us / 1000, names


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    load = os.getloadavg()[0]
    print(f"{os.cpu_count()} vCPUs, load average {load:.1f}; {args.runs} runs each\n")
    print("| command | median ms | min ms |\n|---|---|---|")
    for extra in COMMANDS:
        wall_ms([str(BIN / "autoretry"), *extra])  # warm the page cache and .pyc files
        times = [wall_ms([str(BIN / "autoretry"), *extra]) for _ in range(args.runs)]
        label = " ".join(["autoretry", *extra])
        print(f"| `{label}` | {statistics.median(times):.0f} | {min(times):.0f} |")
    totals, names = [], []
    for _ in range(args.runs):
        total, names = importtime("opencode_autoretry.cli.main")
        totals.append(total)
    pulled = [h for h in HEAVY if any(n == h or n.startswith(h + ".") for n in names)]
    print(f"\n`import opencode_autoretry.cli.main`: {len(names)} modules, importtime total "
          f"{statistics.median(totals):.0f} ms (median); heavy libraries pulled in: "
          f"{', '.join(pulled) or 'none'}")


if __name__ == "__main__":
    main()
