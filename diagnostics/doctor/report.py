"""``autoretry doctor [--json]``: is everything in place, and what to do where it is not.

Exit 0 when no check failed (warnings allowed), 1 when one did, 2 when the config is bad (the
exit status of every command for a bad config). ``--json`` shape (stable;
``version`` bumps on incompatible change)::

    {"report": "doctor", "version": 1, "ok": bool, "summary": str,
     "counts": {"ok": int, "warn": int, "fail": int},
     "checks": [{"name": str, "status": "ok"|"warn"|"fail", "detail": str,
                 "fix": str|null}]}
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from opencode_autoretry.cli.context import AppContext, BadConfig
from opencode_autoretry.config import paths
from opencode_autoretry.config.settings import Settings
from opencode_autoretry.diagnostics.doctor.checks import (
    Check,
    Status,
    Subject,
    check_bad_lines,
    check_bridge_files,
    check_bridges,
    check_command_file,
    check_config,
    check_daemon,
    check_opencode,
    check_opencode_db,
    check_service,
    check_socket,
    check_state_files,
    check_telemetry,
)
from opencode_autoretry.diagnostics.doctor.machine import Machine
from opencode_autoretry.diagnostics.doctor.recorded import inputs_digest, make_record
from opencode_autoretry.store.database import Heartbeat, StoreError, StoreView

REPORT_VERSION = 1
_MARK = {Status.OK: "ok  ", Status.WARN: "warn", Status.FAIL: "FAIL"}


def read_heartbeat(store: Path) -> tuple[Heartbeat | None, str | None]:
    try:
        view = StoreView.open(store)
    except StoreError as exc:
        return None, str(exc)
    try:
        return view.heartbeat(), None
    except (StoreError, ValueError, sqlite3.Error) as exc:  # locked, or a row that does not parse
        return None, f"cannot read the heartbeat in {store}: {exc}"
    finally:
        view.close()


def subject_for(
    app: AppContext, opencode_bin: str | None, opencode_config: Path | None
) -> Subject:
    """The config loaded as ``run`` loads it, its settings (the defaults when the top level is
    bad, so the other checks still run) and the daemon's last heartbeat."""
    error = None
    try:
        settings = app.config().settings
    except BadConfig as exc:
        error = exc.format_message()
        try:  # a bad table: the paths of the top level still point the other checks
            settings = app.settings()
        except BadConfig:
            settings = Settings()
    beat, store_error = read_heartbeat(settings.store)
    return Subject(
        settings=settings,
        settings_error=error,
        opencode_config=(opencode_config or paths.opencode_config_dir()).expanduser(),
        opencode_bin=opencode_bin,
        heartbeat=beat,
        store_error=store_error,
    )


def run_checks(subject: Subject, machine: Machine) -> list[Check]:
    return [
        check_config(subject),
        check_opencode(subject, machine),
        check_opencode_db(subject),
        check_bridge_files(subject, machine),
        check_command_file(subject),
        check_daemon(subject, machine),
        check_bridges(subject, machine),
        check_bad_lines(subject, machine),
        check_service(subject, machine),
        check_socket(subject, machine),
        check_state_files(subject, machine),
        *check_telemetry(subject, machine),
    ]


def summary_line(checks: Sequence[Check]) -> str:
    counts = Counter(check.status for check in checks)
    if not counts[Status.FAIL] and not counts[Status.WARN]:
        return f"autoretry doctor: all {len(checks)} checks passed"
    parts = []
    if counts[Status.FAIL]:
        parts.append(f"{counts[Status.FAIL]} problem{'s' if counts[Status.FAIL] > 1 else ''}")
    if counts[Status.WARN]:
        parts.append(f"{counts[Status.WARN]} warning{'s' if counts[Status.WARN] > 1 else ''}")
    failed = ", ".join(c.name for c in checks if c.status is not Status.OK)
    return f"autoretry doctor: {' and '.join(parts)} ({failed})"


def doctor_json(checks: Sequence[Check]) -> dict[str, Any]:
    counts = Counter(str(check.status) for check in checks)
    return {
        "report": "doctor",
        "version": REPORT_VERSION,
        "ok": not counts["fail"],
        "summary": summary_line(checks),
        "counts": {str(s): counts[str(s)] for s in Status},
        "checks": [{"name": c.name, "status": str(c.status), "detail": c.detail, "fix": c.fix}
                   for c in checks],
    }


def render_doctor(checks: Sequence[Check]) -> str:
    width = max(len(c.name) for c in checks)
    lines = []
    for check in checks:
        lines.append(f"{_MARK[check.status]}  {check.name:<{width}}  {check.detail}")
        if check.fix:
            lines.append(f"      {'':<{width}}  fix: {check.fix}")
    lines.append(summary_line(checks))
    return "\n".join(lines)


def _quick_line(checks: Sequence[Check]) -> str:
    line = summary_line(checks)
    if any(check.status is not Status.OK for check in checks):
        line += "; run `autoretry doctor`"
    return line


def quick_summary(app: AppContext) -> str:
    """Doctor's summary line without running ``opencode --version`` (for ``diagnose``), with
    the hint to run doctor when a check is not ok (doctor's own output lists the checks
    above its summary, so only here does the hint belong)."""
    return _quick_line(run_checks(subject_for(app, None, None), Machine(run_binary=False)))


def summary_record(
    app: AppContext, now: datetime, machine: Machine | None = None
) -> dict[str, str]:
    """``quick_summary``'s line with the digest of what its checks read (``recorded``): what
    the daemon's heartbeat carries for ``diagnose``. ``machine``: the daemon's, which keeps
    what it read from one run to the next (``rereads``)."""
    subject = subject_for(app, None, None)
    line = _quick_line(run_checks(subject, machine or Machine(run_binary=False)))
    digest = inputs_digest(subject.settings, subject.opencode_config, subject.heartbeat)
    return make_record(line, now, digest)
