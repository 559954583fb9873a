"""``autoretry setup [--uninstall]`` (issue 24 item 6): everything install.sh did after pip.

After ``pipx install .``, ``uv tool install .`` or install.sh's own virtualenv, ``setup``
installs the OpenCode bridge and the ``/autoretry`` command file, checks OpenCode's version,
starts the daemon (a systemd user unit, a launchd agent, or a detached ``autoretry run`` with a
pid file), waits for its first heartbeat, and says where the config, the log and the store
are. Run again, it upgrades in place: the bridge files are replaced when they are ours and the
daemon is restarted on the new code. ``--uninstall`` removes the service it wrote, stops the
daemon and removes the bridge; the config, the store and the logs are kept.

A unit or agent is ours when it carries ``lifecycle.WRITTEN_BY`` (the one install.sh wrote
before counts); someone else's is never replaced or removed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import click

from opencode_autoretry.config import paths
from opencode_autoretry.daemon.lifecycle import (
    LAUNCHD_LABEL,
    POLL_S,
    STDERR_FILE,
    SYSTEMD_SERVICE,
    WRITTEN_BY,
    LifecycleError,
    ServiceKind,
    daemon_command,
    heartbeat_pid,
    launchd_plist,
    start_detached,
    stop_detached,
    systemd_unit,
)
from opencode_autoretry.terminal_text import visible

if TYPE_CHECKING:
    from opencode_autoretry.cli.context import AppContext
    from opencode_autoretry.config.settings import Settings

#: Seconds the daemon gets to report its first heartbeat (a first start on a busy machine
#: migrates the store and primes the DB tailer).
SETUP_START_TIMEOUT_S = 60.0
MARK = f"{WRITTEN_BY} setup"
#: The variables a service must see as this shell does (the config, the store, OpenCode's DB).
SERVICE_ENVIRONMENT = ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "AUTORETRY_HOME", "AUTORETRY_CONFIG",
                       "AUTORETRY_STORE", "AUTORETRY_LOG_DIR", "AUTORETRY_SOCKET", "OPENCODE_DB")
SERVICE_CHOICES = ("auto", "systemd", "launchd", "none")


def say(text: str) -> None:
    click.echo(visible(text))


def warn(text: str) -> None:
    click.echo(visible(f"warning: {text}"), err=True)


# -- which service ---------------------------------------------------------------------------------


def systemd_user_works() -> bool:
    """A systemd user manager answers (not in most containers, nor WSL without systemd)."""
    if not sys.platform.startswith("linux") or shutil.which("systemctl") is None:
        return False
    done = subprocess.run(["systemctl", "--user", "show-environment"], capture_output=True,
                          check=False, stdin=subprocess.DEVNULL)
    return done.returncode == 0


def launchd_works() -> bool:
    return sys.platform == "darwin" and shutil.which("launchctl") is not None


def chosen_service(wanted: str) -> ServiceKind:
    """``auto``: a systemd user service, else a launchd agent, else a detached daemon."""
    if wanted in ("systemd", "launchd", "none"):
        return wanted  # type: ignore[return-value]
    if systemd_user_works():
        return "systemd"
    return "launchd" if launchd_works() else "none"


# -- the files a service manager reads--------------------------------------------------------------


def _systemd_quote(value: str) -> str:
    """A value for ``Environment="NAME=value"``: backslash, quote and % escaped."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%")


def unit_text(command: list[str], environment: Mapping[str, str]) -> str:
    """PURE: the systemd user unit that runs ``command`` with ``environment``."""
    env = "".join(f'Environment="{name}={_systemd_quote(value)}"\n'
                  for name, value in environment.items())
    exec_start = " ".join(_systemd_arg(arg) for arg in command)
    return (f"# {MARK}; autoretry setup --uninstall removes it\n"
            "[Unit]\nDescription=opencode-autoretry daemon (keeps OpenCode sessions moving)\n\n"
            f"[Service]\nExecStart={exec_start}\n{env}Restart=on-failure\nRestartSec=5\n\n"
            "[Install]\nWantedBy=default.target\n")


def _systemd_arg(arg: str) -> str:
    if arg and not any(c in arg for c in ' \t"\\%$;'):
        return arg
    return '"' + _systemd_quote(arg).replace("$", "$$") + '"'


def _xml(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def plist_text(command: list[str], environment: Mapping[str, str], stderr: Path) -> str:
    """PURE: the launchd agent that runs ``command``, its stdout and stderr in ``stderr``."""
    arguments = "".join(f"<string>{_xml(arg)}</string>" for arg in command)
    env = "".join(f"<key>{_xml(k)}</key><string>{_xml(v)}</string>"
                  for k, v in environment.items())
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        '<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" '
        '"http://www.apple.com/DTDs/PropertyList-1.0.dtd">\n'
        f"<!-- {MARK}; autoretry setup --uninstall removes it -->\n"
        '<plist version="1.0">\n<dict>\n'
        f"  <key>Label</key><string>{LAUNCHD_LABEL}</string>\n"
        f"  <key>ProgramArguments</key><array>{arguments}</array>\n"
        f"  <key>EnvironmentVariables</key><dict>{env}</dict>\n"
        f"  <key>StandardOutPath</key><string>{_xml(str(stderr))}</string>\n"
        f"  <key>StandardErrorPath</key><string>{_xml(str(stderr))}</string>\n"
        "  <key>RunAtLoad</key><true/>\n"
        "  <key>KeepAlive</key><dict><key>SuccessfulExit</key><false/></dict>\n"
        "</dict>\n</plist>\n"
    )


def is_ours(path: Path) -> bool:
    try:
        return WRITTEN_BY in path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False


def service_environment(app: AppContext) -> dict[str, str]:
    """What the service must see: this shell's variables that name the files, and the flags
    given to ``autoretry`` itself (``--config``, ``--store``, ``--db``)."""
    names = {name: os.environ[name] for name in SERVICE_ENVIRONMENT if os.environ.get(name)}
    environment = app.environment()
    if "AUTORETRY_CONFIG" in environment:  # a relative --config means this directory's file
        environment["AUTORETRY_CONFIG"] = str(Path(environment["AUTORETRY_CONFIG"]).absolute())
    return {**names, **environment}


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    partial.write_text(text, encoding="utf-8")
    partial.replace(path)


# -- waiting for the first heartbeat----------------------------------------------------------------


def wait_for_heartbeat(settings: Settings, pid_of: Callable[[], int | None],
                       dead: Callable[[int | None], bool], timeout: float) -> int | None:
    """The pid once the daemon the service runs (``pid_of``) wrote a heartbeat; None when the
    service says it failed (``dead``). A timeout is an error that says so."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pid = pid_of()
        if dead(pid):
            return None
        if pid is not None and heartbeat_pid(settings) == pid:
            return pid
        time.sleep(POLL_S)
    raise LifecycleError(f"the daemon reported no heartbeat within {timeout:g} s; see "
                         "'autoretry status' and 'autoretry logs'")


def _run(*command: str) -> tuple[int, str]:
    done = subprocess.run(command, capture_output=True, text=True, check=False,
                          stdin=subprocess.DEVNULL)
    return done.returncode, (done.stdout + done.stderr).strip()


def _must(*command: str) -> None:
    code, said = _run(*command)
    if code != 0:
        raise LifecycleError(visible(f"{' '.join(command)} failed (exit {code}): {said[-2000:]}"))


# -- systemd ---------------------------------------------------------------------------------------


def _systemd_show(field: str) -> str:
    return _run("systemctl", "--user", "show", "-p", field, "--value", SYSTEMD_SERVICE)[1]


def _systemd_pid() -> int | None:
    text = _systemd_show("MainPID")
    return int(text) if text.isdigit() and text != "0" else None


def _systemd_dead(_pid: int | None) -> bool:
    """Failed, stopped, or waiting to be restarted after a failure."""
    return (_systemd_show("ActiveState") in ("failed", "inactive")
            or _systemd_show("SubState") == "auto-restart")


def start_systemd(app: AppContext, settings: Settings, timeout: float) -> int:
    unit = systemd_unit()
    if unit.exists() and not is_ours(unit):
        raise LifecycleError(f"{unit} exists and was not written by autoretry; remove or rename "
                             "it, or run with AUTORETRY_SERVICE=none")
    # a daemon an earlier set-up started detached
    stop_detached(settings, heartbeat=False, quiet=True)
    _write(unit, unit_text(daemon_command(), service_environment(app)))
    _must("systemctl", "--user", "daemon-reload")
    _must("systemctl", "--user", "enable", SYSTEMD_SERVICE)
    _must("systemctl", "--user", "restart", SYSTEMD_SERVICE)  # an upgrade runs the new code
    pid = wait_for_heartbeat(settings, _systemd_pid, _systemd_dead, timeout)
    if pid is None:
        _, journal = _run("journalctl", "--user", "-u", SYSTEMD_SERVICE, "-n", "20",
                          "--no-pager", "-o", "cat")
        _run("systemctl", "--user", "stop", SYSTEMD_SERVICE)
        raise LifecycleError(visible(
            f"the systemd user service {SYSTEMD_SERVICE} failed to start (systemctl --user "
            f"status {SYSTEMD_SERVICE})\n--- the daemon said (journal):\n{journal}"))
    say(f"systemd user service {SYSTEMD_SERVICE} enabled and (re)started, pid {pid} "
        f"(journalctl --user -u {SYSTEMD_SERVICE})")
    return pid


# -- launchd ---------------------------------------------------------------------------------------


def _launchd_field(name: str) -> str | None:
    """``PID`` or ``LastExitStatus`` of the loaded agent (``launchctl list LABEL``)."""
    code, text = _run("launchctl", "list", LAUNCHD_LABEL)
    if code != 0:
        return None
    for line in text.splitlines():
        key, _, value = line.strip().partition(" = ")
        if key == f'"{name}"':
            return value.rstrip(";")
    return None


def _launchd_pid() -> int | None:
    value = _launchd_field("PID")
    return int(value) if value and value.isdigit() else None


def _launchd_dead(pid: int | None) -> bool:
    status = _launchd_field("LastExitStatus")
    return pid is None and status not in (None, "0")


def start_launchd(app: AppContext, settings: Settings, timeout: float) -> int:
    plist = launchd_plist()
    if plist.exists() and not is_ours(plist):
        raise LifecycleError(f"{plist} exists and was not written by autoretry; remove or "
                             "rename it, or run with AUTORETRY_SERVICE=none")
    stop_detached(settings, heartbeat=False, quiet=True)
    settings.log_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    stderr = settings.log_dir / STDERR_FILE
    _write(plist, plist_text(daemon_command(), service_environment(app), stderr))
    _run("launchctl", "unload", str(plist))
    _must("launchctl", "load", "-w", str(plist))
    pid = wait_for_heartbeat(settings, _launchd_pid, _launchd_dead, timeout)
    if pid is None:
        _run("launchctl", "unload", str(plist))
        raise LifecycleError(visible(f"the launchd agent {LAUNCHD_LABEL} failed to start; "
                                     f"its output: {stderr}"))
    say(f"launchd agent {LAUNCHD_LABEL} loaded, pid {pid} ({plist})")
    return pid


# -- detached --------------------------------------------------------------------------------------


def start_none(app: AppContext, settings: Settings, timeout: float) -> int:
    stop_detached(settings, quiet=True)  # the pid file's daemon, or an older one by its heartbeat
    pid = start_detached(app, settings, timeout)
    from opencode_autoretry.daemon.pidfile import pid_file_path

    say(f"no user service manager used: daemon started in the background (pid {pid}, pid file "
        f"{pid_file_path()});")
    say(f"it is not restarted after a reboot: add '{' '.join(daemon_command())}' to your "
        "session start-up")
    return pid


STARTERS: dict[ServiceKind, Callable[[AppContext, Settings, float], int]] = {
    "systemd": start_systemd, "launchd": start_launchd, "none": start_none,
}


# -- the bridge and OpenCode------------------------------------------------------------------------


def install_bridge(config_dir: Path) -> None:
    from opencode_autoretry.plugin_bridge import install as installer

    say(f"installing the OpenCode bridge into {config_dir}")
    for step in installer.install(config_dir):
        note = (" (edited by you: kept; autoretry bridge install --force replaces it)"
                if step.action is installer.Action.KEPT else "")
        say(f"{step.action.value:>9}  {step.target}{note}")
    for duplicate in installer.duplicate_plugins(config_dir):
        warn(f"{duplicate} is also loaded by OpenCode; remove it")


def check_opencode(app: AppContext, opencode_bin: str | None, config_dir: Path) -> None:
    """A warning, never a failure: the daemon runs before OpenCode is installed."""
    from opencode_autoretry.diagnostics.doctor.checks import Status
    from opencode_autoretry.diagnostics.doctor.checks import check_opencode as doctor_check
    from opencode_autoretry.diagnostics.doctor.machine import Machine
    from opencode_autoretry.diagnostics.doctor.report import subject_for

    machine = Machine()
    binary = opencode_bin or machine.which("opencode")
    if binary is None:
        warn("OpenCode is not on your PATH. Install it: npm i -g opencode-ai (https://opencode.ai).")
        warn("  Installed elsewhere? Put its directory on PATH, or check it with: autoretry "
             "doctor --opencode /path/to/opencode")
        warn("  (the daemon reads OpenCode's database, ~/.local/share/opencode/opencode.db or "
             "OPENCODE_DB=PATH)")
        return
    check = doctor_check(subject_for(app, binary, config_dir), machine)
    if check.status is Status.OK:
        say(f"OpenCode {check.detail}")
        return
    warn(f"OpenCode: {check.detail}")
    if check.fix:
        warn(f"  fix: {check.fix} (npm i -g opencode-ai@VERSION installs another version)")


# -- the commands ----------------------------------------------------------------------------------


def where_things_are(app: AppContext, settings: Settings) -> None:
    from opencode_autoretry.daemon.commands import where_things_are as paths_of

    where = paths_of(app, settings)
    missing = ("" if where["config_exists"]
               else " (not created: the defaults apply; see README, Configuration)")
    say("done. The daemon's files:")
    say(f"  config  {where['config']}{missing}")
    say(f"  log     {where['log']}")
    say(f"  store   {where['store']}")
    say("next: restart your OpenCode windows so they load the bridge; then try 'autoretry "
        "status'")
    say("  in a shell and '/autoretry status' inside OpenCode ('autoretry doctor' checks the "
        "set-up)")


def do_setup(app: AppContext, wanted: str, opencode_bin: str | None,
             config_dir: Path | None) -> None:
    from opencode_autoretry.cli.context import BadConfig
    from opencode_autoretry.config.settings import config_file_for

    kind = chosen_service(wanted)
    target = (config_dir or paths.opencode_config_dir()).expanduser()
    install_bridge(target)
    check_opencode(app, opencode_bin, target)
    try:  # the daemon would refuse it: its own line, before any service is touched
        settings = app.config().settings
    except BadConfig as exc:
        raise LifecycleError(
            f"the daemon cannot start: {exc.format_message()}\nfix it in the config "
            f"({config_file_for(os.environ, app.config_path)}), then run 'autoretry setup' "
            "again") from exc
    STARTERS[kind](app, settings, SETUP_START_TIMEOUT_S)
    where_things_are(app, settings)


def remove_service() -> None:
    """The unit and the agent this set-up (or install.sh) wrote; anyone else's is kept."""
    unit, plist = systemd_unit(), launchd_plist()
    if unit.exists():
        if not is_ours(unit):
            warn(f"{unit} was not written by autoretry: left as it is")
        else:
            if systemd_user_works():
                _run("systemctl", "--user", "disable", "--now", SYSTEMD_SERVICE)
            unit.unlink()
            if systemd_user_works():
                _run("systemctl", "--user", "daemon-reload")
            say(f"removed {unit}")
    if plist.exists():
        if not is_ours(plist):
            warn(f"{plist} was not written by autoretry: left as it is")
        else:
            _run("launchctl", "unload", str(plist))
            plist.unlink()
            say(f"removed {plist}")


def do_uninstall(app: AppContext, config_dir: Path | None) -> None:
    from opencode_autoretry.cli.context import BadConfig
    from opencode_autoretry.config.settings import Settings, config_file_for
    from opencode_autoretry.plugin_bridge import install as installer

    remove_service()
    try:
        settings = app.settings()
    except BadConfig:  # a bad config still names no other pid file: the defaults' store
        settings = Settings()
    stop_detached(settings)
    target = (config_dir or paths.opencode_config_dir()).expanduser()
    for step in installer.uninstall(target):
        note = " (edited by you: kept)" if step.action is installer.Action.KEPT else ""
        say(f"{step.action.value:>9}  {step.target}{note}")
    say(f"kept: the config ({config_file_for(os.environ, app.config_path)}), the store and "
        "the logs "
        f"({settings.store.parent}, {settings.log_dir})")


@click.command("setup")
@click.option("--service", "wanted", type=click.Choice(SERVICE_CHOICES), default=None,
              help="How the daemon runs: a systemd user service, a launchd agent, or none (a "
                   "detached process with a pid file). Default: $AUTORETRY_SERVICE, else auto "
                   "(systemd, else launchd, else none).")
@click.option("--opencode", "opencode_bin", metavar="PATH",
              help="The OpenCode binary to check (default: `opencode` on PATH).")
@click.option("--opencode-config", "config_dir",
              type=click.Path(file_okay=False, path_type=Path),
              help="OpenCode's config dir (default: $XDG_CONFIG_HOME/opencode).")
@click.option("--uninstall", is_flag=True,
              help="Remove the service setup wrote, stop the daemon, remove the bridge (the "
                   "config, store and logs are kept).")
@click.pass_obj
def setup_command(app: AppContext, wanted: str | None, opencode_bin: str | None,
                  config_dir: Path | None, uninstall: bool) -> None:
    """Set autoretry up after `pipx install` or `uv tool install`: the OpenCode bridge and
    /autoretry command, an OpenCode version check, the daemon as a service (waits for its
    first heartbeat) and where its files are. Run again to upgrade. Exit 1, with the daemon's
    own error, when it cannot start."""
    if uninstall:
        do_uninstall(app, config_dir)
        return
    wanted = wanted or os.environ.get("AUTORETRY_SERVICE") or "auto"
    if wanted not in SERVICE_CHOICES:
        raise click.BadParameter(f"AUTORETRY_SERVICE={wanted} is not one of "
                                 f"{', '.join(SERVICE_CHOICES)}")
    do_setup(app, wanted, opencode_bin, config_dir)


COMMANDS: list[click.Command] = [setup_command]
