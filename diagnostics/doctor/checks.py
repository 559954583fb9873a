"""The checks of ``autoretry doctor``: each looks at one part and says what to do about it.

A check returns one ``Check`` (``ok``, ``warn`` or ``fail``, a one-line detail and, unless
ok, a one-line fix). Only ``fail`` makes ``doctor`` exit 1 (2 for a bad config, as every
command): a warning is something that works
but deserves a look (an untested OpenCode version, an OpenCode process started before the
bridge was installed, bad lines a bridge sent).
"""

from __future__ import annotations

import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from opencode_autoretry.config.load import parse_config
from opencode_autoretry.config.settings import ConfigError, Settings, config_line
from opencode_autoretry.diagnostics.doctor.machine import Machine
from opencode_autoretry.diagnostics.doctor.recorded import (
    BAD_LINE_COUNTERS,
    LAUNCHD_LABEL,
    SERVICE,
    launchd_plist,
    service_unit,
)
from opencode_autoretry.notifications.config import redact_url
from opencode_autoretry.opencode import versions
from opencode_autoretry.opencode.db import OpenCodeDB
from opencode_autoretry.opencode.dbtypes import DbError
from opencode_autoretry.plugin_bridge import install as installer
from opencode_autoretry.store.database import STALE_HEARTBEAT, Heartbeat
from opencode_autoretry.telemetry.config import load_telemetry

START_DAEMON = ("start the daemon: autoretry start (autoretry setup makes it a service), or "
                "autoretry run in a terminal")


class Status(StrEnum):
    OK = "ok"
    WARN = "warn"
    FAIL = "fail"


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    detail: str
    fix: str | None = None


@dataclass(frozen=True)
class Subject:
    """What doctor looks at: the resolved settings and what the daemon last wrote."""

    settings: Settings
    settings_error: str | None  # the one line of a bad config (``config.load``), as run says it
    opencode_config: Path
    opencode_bin: str | None  # --opencode, else looked up on PATH
    heartbeat: Heartbeat | None
    store_error: str | None


def ok(name: str, detail: str) -> Check:
    return Check(name, Status.OK, detail)


def warn(name: str, detail: str, fix: str) -> Check:
    return Check(name, Status.WARN, detail, fix)


def fail(name: str, detail: str, fix: str) -> Check:
    return Check(name, Status.FAIL, detail, fix)


# -- config ------------------------------------------------------------------------------------


def check_config(subject: Subject) -> Check:
    """The config as ``run`` loads it (``config.load.load_config``): the same refusal, the
    same line."""
    error = subject.settings_error
    if error is None:
        try:  # settings resolved elsewhere (tests, a caller): their tables, parsed as run does
            parse_config(subject.settings)
        except ConfigError as exc:
            error = config_line(exc)
    if error is not None:
        return fail("config", error, "fix the key named above in config.toml (or the "
                    "AUTORETRY_* variable or flag); see README, Configuration")
    return ok("config", "valid")


# -- OpenCode ----------------------------------------------------------------------------------


def live_info(subject: Subject, machine: Machine) -> Mapping[str, Any]:
    """The heartbeat's info when the daemon is running, else nothing."""
    beat = subject.heartbeat
    if beat is None or beat.info.get("stopping") or not machine.pid_alive(beat.pid):
        return {}
    age = abs((machine.now() - beat.at).total_seconds())
    return beat.info if age <= STALE_HEARTBEAT.total_seconds() else {}


def bridge_versions(info: Mapping[str, Any]) -> list[str]:
    return sorted({str(b["opencode"]) for b in info.get("bridges", []) if b.get("opencode")})


def _binary_version(subject: Subject, machine: Machine) -> tuple[str | None, str | None]:
    """(path, version) of the OpenCode binary; version None when it did not answer."""
    binary = subject.opencode_bin or machine.which("opencode")
    if binary is None or not machine.run_binary:
        return binary, None
    code, out = machine.run([binary, "--version"], 15.0)
    parsed = versions.parse_version(out) if code == 0 else None
    return binary, ".".join(map(str, parsed)) if parsed else None


def check_opencode(subject: Subject, machine: Machine) -> Check:
    binary, version = _binary_version(subject, machine)
    seen = bridge_versions(live_info(subject, machine))
    if binary is None and not seen:
        return fail("opencode", "no opencode on PATH and no bridge connected",
                    "install OpenCode (https://opencode.ai) or pass --opencode PATH")
    if version is None and machine.run_binary and binary is not None and not seen:
        return fail("opencode", f"{binary} --version gave no version",
                    "check the binary: run it with --version")
    found = sorted({*seen, *([version] if version else [])})
    untested = [w for w in map(versions.untested_warning, found) if w]
    where = binary or "not on PATH"
    detail = f"{', '.join(found) or 'version not checked'} ({where})"
    if untested:
        return warn("opencode", f"{detail}: {untested[0]}",
                    f"use OpenCode {versions.tested_range_text()} or report what differs")
    return ok("opencode", f"{detail}, tested range {versions.tested_range_text()}")


def check_opencode_db(subject: Subject) -> Check:
    path = subject.settings.opencode_db
    try:
        db = OpenCodeDB.open(path)
        try:
            sessions = db.count("session")
        finally:
            db.close()
    except DbError as exc:
        return fail("opencode db", str(exc), "start OpenCode once, or point --db / OPENCODE_DB "
                    "at its opencode.db (`opencode db path`)")
    except (OSError, ValueError) as exc:
        return fail("opencode db", f"{path}: {exc}", "point --db / OPENCODE_DB at opencode.db")
    return ok("opencode db", f"{path} readable ({sessions} sessions)")


# -- the bridge --------------------------------------------------------------------------------


_FILE_PROBLEMS = {
    installer.FileState.MISSING: "missing",
    installer.FileState.OUTDATED: "from another release",
    installer.FileState.CUSTOMISED: "edited",
}


def check_bridge_files(subject: Subject, machine: Machine) -> Check:
    config = subject.opencode_config
    files = [e for e in installer.status(config) if e.file is not installer.COMMAND]
    problems = [f"{e.target.relative_to(config)} {_FILE_PROBLEMS[e.state]}" for e in files
                if e.state in _FILE_PROBLEMS]
    if problems:
        return fail("bridge", f"in {config}: " + ", ".join(problems),
                    "autoretry bridge install (add --force for edited files), then restart "
                    "OpenCode")
    duplicates = installer.duplicate_plugins(subject.opencode_config)
    if duplicates:
        return warn("bridge", f"also loaded from {duplicates[0]}", f"rm {duplicates[0]}")
    return ok("bridge", f"installed, matches autoretry {machine.version} "
              f"({subject.opencode_config / 'plugins'})")


def check_command_file(subject: Subject) -> Check:
    entry = installer.file_status(installer.COMMAND, subject.opencode_config)
    if entry.state is installer.FileState.MISSING:
        return fail("/autoretry", f"{entry.target} is missing", "autoretry bridge install")
    if entry.state is installer.FileState.CUSTOMISED:
        return warn("/autoretry", f"{entry.target} was edited",
                    "autoretry bridge install --force (restores the shipped command)")
    if entry.state is installer.FileState.OUTDATED:
        return fail("/autoretry", f"{entry.target} is from another release",
                    "autoretry bridge install")
    return ok("/autoretry", f"{entry.target}")


# -- the daemon --------------------------------------------------------------------------------


def check_daemon(subject: Subject, machine: Machine) -> Check:
    if subject.store_error:
        return fail("daemon", subject.store_error, "move the broken store aside; the daemon "
                    "creates a new one")
    beat = subject.heartbeat
    if beat is None:
        return fail("daemon", "never ran (no heartbeat in the store)", START_DAEMON)
    age = (machine.now() - beat.at).total_seconds()
    if beat.info.get("stopping"):
        return fail("daemon", f"stopped {age:.0f} s ago (pid {beat.pid})", START_DAEMON)
    if not machine.pid_alive(beat.pid):
        return fail("daemon", f"pid {beat.pid} is gone; last heartbeat {age:.0f} s ago "
                    "(crashed or killed)", f"{START_DAEMON}; see daemon.log for why it died")
    if abs(age) > STALE_HEARTBEAT.total_seconds():
        return fail("daemon", f"pid {beat.pid} alive but its heartbeat is {age:.0f} s old "
                    "(hung?)", f"restart it: kill {beat.pid}, then {START_DAEMON}")
    return ok("daemon", f"running (pid {beat.pid}, heartbeat {max(age, 0):.0f} s ago)")


def _old_bridges(info: Mapping[str, Any], version: str) -> list[str]:
    return [str(b.get("pid")) for b in info.get("bridges", [])
            if b.get("bridge") and b.get("bridge") != version]


def check_bridges(subject: Subject, machine: Machine) -> Check:
    info = live_info(subject, machine)
    if not info:
        return fail("bridges", "no daemon, so no bridge is connected", START_DAEMON)
    bridge_pids = {b.get("pid") for b in info.get("bridges", [])}
    without = [p for p in machine.processes() if p.pid not in bridge_pids]
    connected = f"{len(bridge_pids)} connected"
    if without:
        pids = ", ".join(str(p.pid) for p in without[:5])
        return warn("bridges", f"{connected}; OpenCode running without one: pid {pids}",
                    "restart those OpenCode processes (they started before the bridge was "
                    "installed, or have no socket access)")
    old = _old_bridges(info, machine.version)
    if old:
        return warn("bridges", f"{connected}; an older bridge runs in pid {', '.join(old)}",
                    "restart those OpenCode processes to load the installed bridge")
    return ok("bridges", connected)


def check_bad_lines(subject: Subject, machine: Machine) -> Check:
    info = live_info(subject, machine)
    if not info:
        return ok("bridge lines", "no daemon running: nothing read")
    counters: Mapping[str, Any] = info.get("lines", {})
    dropped = {k: int(counters.get(k) or 0) for k in BAD_LINE_COUNTERS}
    bridges = info.get("bridges", [])  # what the bridges themselves dropped (their stats)
    dropped["bridge events"] = sum(int(b.get("dropped") or 0) for b in bridges)
    dropped["bridge bad lines"] = sum(int(b.get("unknown") or 0) for b in bridges)
    if not any(dropped.values()):
        total = int(counters.get("lines") or 0)
        return ok("bridge lines", f"{total} read, none dropped")
    listed = ", ".join(f"{k} {v}" for k, v in dropped.items() if v)
    return warn("bridge lines", f"dropped since the daemon started: {listed}",
                "see daemon.log; reinstall the bridge (autoretry bridge install) and restart "
                "OpenCode if they keep coming")


# -- the service and the files -----------------------------------------------------------------


def _systemd(machine: Machine, unit: Path) -> Check:
    code, out = machine.run(["systemctl", "--user", "is-active", SERVICE], 10.0)
    if code == 0 and out.strip() == "active":
        return ok("service", f"systemd user unit {SERVICE} active")
    return fail("service", f"systemd user unit {unit} is {out.strip() or 'not active'}",
                f"systemctl --user restart {SERVICE} (logs: journalctl --user -u {SERVICE})")


def _launchd(machine: Machine, plist: Path) -> Check:
    code, _ = machine.run(["launchctl", "list", LAUNCHD_LABEL], 10.0)
    if code == 0:
        return ok("service", f"launchd agent {LAUNCHD_LABEL} loaded")
    return fail("service", f"launchd agent {plist} is not loaded", f"launchctl load -w {plist}")


def check_service(subject: Subject, machine: Machine) -> Check:
    unit, plist = service_unit(), launchd_plist()  # the recorded line stamps the same files
    if machine.platform.startswith("linux") and unit.exists():
        return _systemd(machine, unit)
    if machine.platform == "darwin" and plist.exists():
        return _launchd(machine, plist)
    if live_info(subject, machine):
        return ok("service", "none: the daemon runs detached (not restarted after a reboot)")
    return warn("service", "no systemd user unit or launchd agent", "autoretry setup (or "
                "./install.sh) sets one up (or add `autoretry run` to your session start-up)")


def _mode_problem(path: Path, allowed: int, uid: int, kind: str) -> str | None:
    """Why ``path`` is not private: another owner, or permission bits beyond ``allowed``."""
    try:
        info = path.lstat()
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        return f"{path}: {exc}"
    if info.st_uid != uid:
        return f"{path} belongs to uid {info.st_uid}"
    if kind == "socket" and not stat.S_ISSOCK(info.st_mode):
        return f"{path} is not a socket"
    mode = stat.S_IMODE(info.st_mode)
    return f"{path} is {mode:04o} (want {allowed:04o})" if mode & ~allowed else None


def _problems(entries: Sequence[tuple[Path, int, str]], uid: int) -> list[str]:
    return [p for p in (_mode_problem(path, mode, uid, kind) for path, mode, kind in entries) if p]


def check_socket(subject: Subject, machine: Machine) -> Check:
    sock = subject.settings.socket
    problems = _problems([(sock.parent, 0o700, "dir"), (sock, 0o600, "socket")], machine.uid)
    if problems:
        return fail("socket", "; ".join(problems),
                    f"stop the daemon, rm -r {sock.parent}, start it again (it recreates both "
                    "private)")
    try:
        present = sock.is_socket()
    except (OSError, ValueError):
        present = False
    if not present:
        return fail("socket", f"{sock} does not exist", START_DAEMON)
    if not installer.socket_alive(sock):
        return fail("socket", f"nothing listens on {sock}", START_DAEMON)
    return ok("socket", f"{sock} (dir 0700, socket 0600)")


#: What ``[telemetry]`` needs (the ``telemetry`` extra): checked only when it is configured.
TELEMETRY_MODULES = ("opentelemetry.sdk", "opentelemetry.exporter.otlp.proto.http")
TELEMETRY_INSTALL = ("pip install 'opentelemetry-sdk>=1.25' "
                     "'opentelemetry-exporter-otlp-proto-http>=1.25' into autoretry's environment "
                     "(pipx: pipx install --force '.[telemetry]'), then autoretry restart")


def check_telemetry(subject: Subject, machine: Machine) -> list[Check]:
    """``[telemetry] otlp_endpoint`` set: its packages are installed (the daemon runs on
    without the export when they are not). No check at all when it is off."""
    try:
        config = load_telemetry(subject.settings.telemetry)
    except ConfigError:
        return []  # check_config says why
    if not config.enabled:
        return []
    where = redact_url(config.signal_url("metrics"))
    missing = [name for name in TELEMETRY_MODULES if not machine.module_found(name)]
    if missing:
        return [warn("telemetry", f"{where} configured, but {', '.join(missing)} is not "
                     "installed: nothing is exported", TELEMETRY_INSTALL)]
    return [ok("telemetry", f"exporting to {where} every {config.export_interval:g} s")]


def check_state_files(subject: Subject, machine: Machine) -> Check:
    store = subject.settings.store
    logs = subject.settings.log_dir
    entries = [(store.parent, 0o700, "dir"), (store, 0o600, "file"),
               (Path(f"{store}-wal"), 0o600, "file"), (logs, 0o700, "dir"),
               (logs / "daemon.log", 0o600, "file")]
    problems = _problems(entries, machine.uid)
    if problems:
        return fail("state files", "; ".join(problems),
                    f"chmod -R go-rwx {store.parent} {logs} (the daemon tightens them at start)")
    return ok("state files", f"private ({store.parent})")
