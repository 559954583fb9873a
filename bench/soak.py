"""The soak on the real OpenCode (issue 11): ``python bench/soak.py --minutes 10 [--seed N]``.

Two ``opencode serve`` processes on one isolated HOME/XDG (one DB), ``--lanes`` root sessions at
once (some delegate to subagents), the real daemon, a seeded fault per turn from the full menu
(tests/e2e/soak_plan.py), and at seeded moments daemon SIGKILLs, a restart of one OpenCode and
bridge sockets cut mid-line. The checker (tests/e2e/soak_checks.py) judges every turn from
OpenCode's DB (read-only), the daemon's store and the fake provider's log; the table of figures
is printed (and with ``--readme`` written to bench/README.md, section "Soak"); exit 1 on any
violation. The binary is the e2e harness's (``AUTORETRY_E2E_OPENCODE=/path`` picks another).
Run it under the machine-wide lock: ``flock /tmp/autoretry-e2e.lock .venv/bin/python …``.
"""

from __future__ import annotations

import argparse
import random
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "e2e"))
sys.path.insert(0, str(ROOT / "tests"))  # the fake provider's server
sys.path.insert(0, str(ROOT / "bench"))

from daemon_harness import machine_note, remove, scratch, warm_up  # noqa: E402
from fake_provider import FakeProvider  # noqa: E402
from opencode import ensure_opencode, prepare_home  # noqa: E402
from soak_driver import Soak, SoakOptions, SoakResult  # noqa: E402

README = ROOT / "bench" / "README.md"
SECTION = "## Soak"
INTRO = """Two real OpenCode processes on one DB, the real daemon, every lane (root session) playing
turns back to back, each turn a seeded draw from the whole fault menu (`tests/e2e/soak_plan.py`),
with daemon SIGKILLs, an OpenCode restart and bridge sockets cut mid-line at seeded moments. A
turn is "recovered" when it got exactly one continuation and then a clean answer, "left alone
correctly" when nothing was sent and the daemon recorded why; "violations" counts every broken
invariant of `tests/e2e/soak_checks.py` (it must be 0)."""


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="how long turns are started")
    parser.add_argument("--seed", type=int, default=None, help="replay a run (default: random)")
    parser.add_argument("--lanes", type=int, default=10, help="root sessions at once (≥ 8)")
    parser.add_argument("--kills", type=int, default=None, help="daemon SIGKILLs (default 1/min)")
    parser.add_argument("--restarts", type=int, default=None,
                        help="OpenCode restarts (default 1 per 4 min, at least 1)")
    parser.add_argument("--cuts", type=int, default=None, help="socket cuts (default 1/min)")
    parser.add_argument("--readme", action="store_true", help="write the table to bench/README")
    parser.add_argument("--log", type=Path, default=None, help="save the daemon's log here")
    args = parser.parse_args(argv)
    if args.minutes <= 0 or args.lanes < 1:
        parser.error("--minutes must be > 0 and --lanes ≥ 1")
    return args


def options(args: argparse.Namespace, seed: int) -> SoakOptions:
    per_minute = max(1, round(args.minutes))
    return SoakOptions(
        seed=seed, seconds=args.minutes * 60, lanes=args.lanes, short=False,
        daemon_kills=per_minute if args.kills is None else args.kills,
        opencode_restarts=max(1, round(args.minutes / 4)) if args.restarts is None
        else args.restarts,
        socket_cuts=per_minute if args.cuts is None else args.cuts,
    )


def write_readme(result: SoakResult, args: argparse.Namespace, seed: int, took: float) -> None:
    """Replace (or append) the README's "## Soak" section; the rest stays byte for byte."""
    body = (f"{SECTION}\n\n{INTRO}\n\n`flock /tmp/autoretry-e2e.lock .venv/bin/python "
            f"bench/soak.py --minutes {args.minutes:g} --seed {seed} --readme` "
            f"({took / 60:.1f} min in all; {machine_note()}):\n\n{result.table}\n")
    text = README.read_text()
    found = re.search(rf"(?m)^{SECTION}\n(?:.*\n)*?(?=^## |\Z)", text)
    text = (text[: found.start()] + body + ("\n" if text[found.end():] else "")
            + text[found.end():]) if found else text.rstrip("\n") + "\n\n" + body
    README.write_text(text)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    seed = args.seed if args.seed is not None else random.randrange(1 << 31)
    print(f"soak seed {seed} (--seed {seed} replays its faults)", flush=True)
    began = time.monotonic()
    binary = ensure_opencode()
    work = scratch("ar-soak-run-")
    provider = FakeProvider().start()
    try:
        home = prepare_home(work / "opencode", provider.url)
        warm_up(binary, home)
        soak = Soak(binary, home, provider, options(args, seed), work)
        try:
            result = soak.run()
        finally:
            if args.log is not None:
                args.log.write_text("\n".join(soak.daemon.lines()) + "\n")
    finally:
        provider.close()
        remove(work)
    print(result.table)
    for violation in result.violations:
        print(f"VIOLATION {violation.rule}: {violation.where}: {violation.detail}")
    if args.readme:
        write_readme(result, args, seed, time.monotonic() - began)
    return 1 if result.violations else 0


if __name__ == "__main__":
    sys.exit(main())
