#!/usr/bin/env bash
# opencode-autoretry installer.
#
#   ./install.sh              install, or upgrade in place when run again: a virtualenv with
#                             the package, the ~/.local/bin/autoretry link, the OpenCode bridge
#                             plugin and /autoretry command, and the daemon (a user service, or
#                             a detached process); checks OpenCode and waits for the daemon
#   ./install.sh --dev        development: .venv in this checkout, pip install -e '.[dev]'
#   ./install.sh --uninstall  remove what install.sh created (see below)
#   ./install.sh --help       this text
#
# What --uninstall removes: only what install.sh created.
#   - the virtualenv, if install.sh created it (it then holds the marker file
#     .opencode-autoretry-install); a virtualenv that existed before (AUTORETRY_VENV) is
#     kept: only the package is uninstalled from it (pip uninstall)
#   - ~/.local/bin/autoretry, if it is a symlink to the virtualenv's autoretry; a file of
#     yours there, or a link elsewhere, is never replaced or removed (install warns)
#   - the systemd user unit or launchd agent install.sh wrote, or it stops the detached daemon
#     by the pid in its pid file; the bridge files (autoretry bridge uninstall)
#   Kept: your config, the daemon's store and logs.
#
# Environment:
#   AUTORETRY_VENV     the virtualenv (default ~/.local/share/opencode-autoretry/venv)
#   AUTORETRY_SERVICE  how the daemon runs: auto (default: systemd user service, else launchd
#                      agent, else detached), systemd, launchd, or none (detached process)
#   PYTHON             the Python to build the virtualenv with (default python3, >= 3.11)
#   OPENCODE           the OpenCode binary to check (default: opencode on PATH)
#   XDG_CONFIG_HOME, XDG_DATA_HOME, AUTORETRY_HOME, AUTORETRY_CONFIG as the daemon reads them
#
# Exit status: 0 when the daemon is running; 1 on an error (one line saying what to do, and
# the daemon's own error when it could not start).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

expand_home() {  # a leading ~ as the daemon reads it (Python's expanduser)
  case "$1" in
    \~) printf '%s' "$HOME" ;;
    \~/*) printf '%s/%s' "$HOME" "${1:2}" ;;
    *) printf '%s' "$1" ;;
  esac
}

absolute() {  # $1 made absolute against the current directory, trailing slashes dropped
  local path
  path="$(expand_home "$1")"
  [[ "$path" == /* ]] || path="$PWD/$path"
  while [[ "$path" == */ && "$path" != / ]]; do path="${path%/}"; done
  printf '%s' "$path"
}

DATA_HOME="${XDG_DATA_HOME:-$HOME/.local/share}"
CONFIG_HOME="${XDG_CONFIG_HOME:-$HOME/.config}"
VENV="$(absolute "${AUTORETRY_VENV:-$DATA_HOME/opencode-autoretry/venv}")"
MARKER="$VENV/.opencode-autoretry-install"
STATE_DIR="$(absolute "${AUTORETRY_HOME:-$DATA_HOME/opencode-autoretry}")"
PIDFILE="$STATE_DIR/daemon.pid"      # the detached daemon's pid (AUTORETRY_SERVICE=none)
ERRFILE="$STATE_DIR/daemon.stderr"   # its stdout and stderr (launchd: its stderr)
CONFIG_FILE="$(absolute "${AUTORETRY_CONFIG:-$CONFIG_HOME/opencode-autoretry/config.toml}")"
BIN_DIR="$HOME/.local/bin"
LINK="$BIN_DIR/autoretry"
SERVICE="opencode-autoretry.service"
UNIT="$CONFIG_HOME/systemd/user/$SERVICE"
LABEL="com.github.opencode-autoretry"
PLIST="$HOME/Library/LaunchAgents/$LABEL.plist"
WRITTEN_BY="written by opencode-autoretry install.sh"
PYTHON="${PYTHON:-python3}"
#: Seconds the daemon gets to report its first heartbeat, and to stop after SIGTERM.
START_TIMEOUT=60
STOP_TIMEOUT=30

say() { printf '==> %s\n' "$*"; }
warn() { printf 'warning: %s\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

usage() {  # the comment block at the top of this file
  awk 'NR == 1 { next } /^#/ { sub(/^# ?/, ""); print; next } { exit }' "${BASH_SOURCE[0]}"
}

service_kind() {
  case "${AUTORETRY_SERVICE:-auto}" in
    auto)
      if systemd_user_works; then echo systemd
      elif launchd_works; then echo launchd
      else echo none
      fi ;;
    systemd | launchd | none) echo "$AUTORETRY_SERVICE" ;;
    *) die "AUTORETRY_SERVICE=$AUTORETRY_SERVICE is not one of auto, systemd, launchd, none" ;;
  esac
}

systemd_user_works() {
  [[ "$(uname -s)" == "Linux" ]] && command -v systemctl >/dev/null 2>&1 \
    && systemctl --user show-environment >/dev/null 2>&1
}

launchd_works() {
  [[ "$(uname -s)" == "Darwin" ]] && command -v launchctl >/dev/null 2>&1
}

check_python() {
  command -v "$PYTHON" >/dev/null 2>&1 || die "$PYTHON not found; install Python 3.11+ or set PYTHON=/path/to/python3.11"
  "$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' \
    || die "$PYTHON is $("$PYTHON" -V 2>&1); opencode-autoretry needs Python 3.11+ (set PYTHON=...)"
}

# -- the virtualenv ------------------------------------------------------------------------------

venv_is_ours() { [[ -f "$MARKER" && -f "$VENV/pyvenv.cfg" ]]; }

# Reuse a virtualenv that is there (an upgrade, or one you named in AUTORETRY_VENV); create one
# otherwise, and mark it as install.sh's only when install.sh created its directory.
prepare_venv() {
  if [[ -x "$VENV/bin/python" ]]; then
    if venv_is_ours; then
      say "upgrading $VENV"
    else
      say "using the existing virtualenv $VENV (not created by install.sh: --uninstall keeps it)"
    fi
    return
  fi
  local created=0
  if [[ -e "$VENV" || -L "$VENV" ]]; then
    [[ -d "$VENV" ]] || die "AUTORETRY_VENV=$VENV exists and is not a directory; name another path"
    [[ -z "$(ls -A "$VENV")" ]] \
      || die "$VENV exists, is not empty and is not a virtualenv; set AUTORETRY_VENV to a new path or to a virtualenv"
  else
    created=1
  fi
  say "creating virtualenv $VENV"
  "$PYTHON" -m venv "$VENV"
  if ((created)); then
    printf '%s\n' "This virtualenv was created by opencode-autoretry's install.sh;" \
      "'./install.sh --uninstall' removes it (and only a virtualenv holding this file)." >"$MARKER"
  fi
}

# A copy of the checkout, so that building the wheel leaves no build/ or *.egg-info behind.
copy_source() {  # $1 = empty target dir
  tar -C "$ROOT" --exclude=./.venv --exclude=./.git --exclude=./build --exclude='*.egg-info' \
    --exclude=__pycache__ --exclude=node_modules --exclude=.pytest_cache --exclude=.mypy_cache \
    --exclude=.ruff_cache -cf - . | tar -C "$1" -xf -
}

BUILD_DIR=""  # made by mktemp in install_package, removed on exit
trap 'if [[ -n "$BUILD_DIR" ]]; then rm -rf "$BUILD_DIR"; fi' EXIT

install_package() {
  local work wheel
  work="$(mktemp -d "${TMPDIR:-/tmp}/opencode-autoretry-build.XXXXXX")"
  BUILD_DIR="$work"
  mkdir "$work/src" "$work/dist"
  copy_source "$work/src"
  say "installing opencode-autoretry from $ROOT"
  local pip=("$VENV/bin/python" -m pip --disable-pip-version-check)
  "${pip[@]}" wheel --quiet --no-deps --wheel-dir "$work/dist" "$work/src" \
    || die "building the opencode-autoretry wheel failed (pip's output is above)"
  wheel="$(find "$work/dist" -name 'opencode_autoretry-*.whl' | head -n 1)"
  [[ -n "$wheel" ]] || die "pip built no opencode_autoretry wheel in $work/dist"
  # The apprise extra: [notify] urls (Telegram, Discord, Pushover, e-mail ...). Optional: where
  # it cannot be installed, the rest is, and a configured url says what to install.
  if ! "${pip[@]}" install --quiet "${wheel}[apprise]"; then
    warn "the optional apprise package could not be installed: [notify] urls will not work"
    "${pip[@]}" install --quiet "$wheel" \
      || die "pip could not install opencode-autoretry or its dependencies into $VENV (see above)"
  fi
  # Same version number on every checkout: the package itself is always replaced.
  "${pip[@]}" install --quiet --force-reinstall --no-deps "$wheel" \
    || die "pip could not reinstall opencode-autoretry into $VENV (see above)"
  rm -rf "$work"
  BUILD_DIR=""
}

# -- ~/.local/bin/autoretry ----------------------------------------------------------------------

link_is_ours() { [[ -L "$LINK" && "$(readlink "$LINK")" == "$VENV/bin/autoretry" ]]; }

link_command() {
  mkdir -p "$BIN_DIR"
  if [[ -e "$LINK" || -L "$LINK" ]] && ! link_is_ours; then
    local what="a file"
    [[ -L "$LINK" ]] && what="a link to $(readlink "$LINK")"
    warn "$LINK is $what, not install.sh's: left as it is."
    warn "  'autoretry' may not run this install; use $VENV/bin/autoretry, or remove $LINK and re-run ./install.sh to link it"
    return
  fi
  ln -sfn "$VENV/bin/autoretry" "$LINK"
  say "linked $LINK -> $VENV/bin/autoretry"
  case ":$PATH:" in *":$BIN_DIR:"*) ;; *) warn "$BIN_DIR is not on your PATH; add it to use 'autoretry'" ;; esac
}

# -- OpenCode ------------------------------------------------------------------------------------

# A warning, never a failure: the daemon runs before OpenCode is installed and picks it up later.
check_opencode() {
  local bin="${OPENCODE:-}" verdict
  [[ -n "$bin" ]] || bin="$(command -v opencode 2>/dev/null || true)"
  if [[ -z "$bin" ]]; then
    warn "OpenCode is not on your PATH. Install it: npm i -g opencode-ai (https://opencode.ai)."
    warn "  Installed elsewhere? Put its directory on PATH, or check it with: $VENV/bin/autoretry doctor --opencode /path/to/opencode"
    warn "  (the daemon reads OpenCode's database, ~/.local/share/opencode/opencode.db or OPENCODE_DB=PATH)"
    return 0
  fi
  # autoretry doctor knows the tested version range; its "opencode" check: status<TAB>detail<TAB>fix
  verdict="$("$VENV/bin/autoretry" doctor --json --opencode "$bin" 2>/dev/null \
    | "$VENV/bin/python" -c '
import json, sys
try:
    checks = json.load(sys.stdin)["checks"]
except Exception:
    sys.exit(0)
for check in checks:
    if check.get("name") == "opencode":
        print(check.get("status"), check.get("detail"), check.get("fix") or "", sep="\t")
' || true)"
  local status detail fix
  IFS=$'\t' read -r status detail fix <<<"$verdict" || true
  case "$status" in
    ok) say "OpenCode $detail" ;;
    warn | fail)
      warn "OpenCode: $detail"
      [[ -z "$fix" ]] || warn "  fix: $fix (npm i -g opencode-ai@VERSION installs another version)" ;;
    *)
      warn "could not check OpenCode's version ($bin); run: $VENV/bin/autoretry doctor --opencode $bin" ;;
  esac
}

# -- the daemon ----------------------------------------------------------------------------------

proc_args() {  # the command line of process $1 ("" when gone, or a zombie)
  if [[ -d /proc/$1 ]]; then
    tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null || true
  else
    ps -o args= -p "$1" 2>/dev/null || true
  fi
}

# Process $1 is alive and is this virtualenv's daemon (a pid can be reused by anything else).
is_our_daemon() {
  [[ "$1" =~ ^[0-9]+$ ]] || return 1
  [[ "$(proc_args "$1")" == *"$VENV/bin/autoretry run"* ]]
}

heartbeat_pid() {  # the pid of the daemon whose heartbeat is fresh, "" when none
  [[ -x "$VENV/bin/autoretry" ]] || return 0
  "$VENV/bin/autoretry" status --json 2>/dev/null | "$VENV/bin/python" -c '
import json, sys
try:
    daemon = json.load(sys.stdin)["daemon"]
except Exception:
    sys.exit(0)
if daemon.get("running") and daemon.get("pid"):
    print(daemon["pid"])
' 2>/dev/null || true
}

# Stop this virtualenv's detached daemon: the pid in the pid file, and the pid in the store's
# heartbeat (a daemon started by an older install.sh, which wrote no pid file). Each pid is
# checked to be this virtualenv's `autoretry run` before it gets SIGTERM; never a name pattern.
# $1 = pidfile: the pid file only (a service's daemon, in the heartbeat, is the service's to stop).
stop_detached() {
  local pid candidates=() stopped i
  if [[ -f "$PIDFILE" ]]; then candidates+=("$(head -n 1 "$PIDFILE")"); fi
  [[ "${1:-}" == pidfile ]] || candidates+=("$(heartbeat_pid)")
  for pid in "${candidates[@]}"; do
    is_our_daemon "$pid" || continue
    kill -TERM "$pid" 2>/dev/null || continue
    stopped=0
    for ((i = 0; i < STOP_TIMEOUT * 10; i++)); do
      if ! is_our_daemon "$pid"; then stopped=1; break; fi
      sleep 0.1
    done
    ((stopped)) || die "the daemon (pid $pid) did not stop within $STOP_TIMEOUT s of SIGTERM; stop it (kill $pid) and re-run"
    say "stopped the daemon (pid $pid)"
  done
  rm -f "$PIDFILE"
}

log_file() {  # the daemon's log: AUTORETRY_LOG_DIR > config.toml's log_dir > the state dir
  local dir="${AUTORETRY_LOG_DIR:-}"
  if [[ -z "$dir" && -f "$CONFIG_FILE" && -x "$VENV/bin/python" ]]; then
    dir="$(config_value log_dir)"
  fi
  printf '%s/daemon.log' "$(absolute "${dir:-$STATE_DIR/log}")"
}

store_file() {  # the daemon's store: AUTORETRY_STORE > config.toml's store > the state dir
  local store="${AUTORETRY_STORE:-}"
  if [[ -z "$store" && -f "$CONFIG_FILE" && -x "$VENV/bin/python" ]]; then
    store="$(config_value store)"
  fi
  absolute "${store:-$STATE_DIR/autoretry.db}"
}

config_value() {  # a top-level string of config.toml, "" when absent or unreadable
  "$VENV/bin/python" - "$CONFIG_FILE" "$1" 2>/dev/null <<'EOF' || true
import sys, tomllib
try:
    with open(sys.argv[1], "rb") as handle:
        value = tomllib.load(handle).get(sys.argv[2])
except Exception:
    sys.exit(0)
if isinstance(value, str):
    print(value)
EOF
}

# The daemon could not start: its own words, then exit 1.
daemon_failed() {  # $1 = what happened, $2 = log size before the start
  local log
  log="$(log_file)"
  printf 'error: %s\n' "$1" >&2
  if [[ -s "$ERRFILE" ]]; then
    printf -- '--- the daemon said (%s):\n' "$ERRFILE" >&2
    tail -n 20 "$ERRFILE" >&2
  fi
  if [[ -f "$log" ]] && (($(wc -c <"$log") > $2)); then
    printf -- '--- its log (%s):\n' "$log" >&2
    tail -c "+$(($2 + 1))" "$log" | tail -n 20 >&2
  fi
  printf 'error: fix the problem above (the config: %s), then re-run ./install.sh\n' "$CONFIG_FILE" >&2
  exit 1
}

log_size() {
  local log
  log="$(log_file)"
  if [[ -f "$log" ]]; then wc -c <"$log" | tr -d ' '; else echo 0; fi
}

# Wait for the daemon to prove it runs (a fresh heartbeat from the expected pid) or to die.
# $1 = a command printing the daemon's pid ("" while there is none), $2 = a command that
# succeeds when it has failed, $3 = log size before the start.
wait_for_daemon() {
  local deadline=$((SECONDS + START_TIMEOUT)) pid
  while ((SECONDS < deadline)); do
    pid="$($1)"
    if $2 "$pid"; then return 1; fi
    if [[ -n "$pid" && "$(heartbeat_pid)" == "$pid" ]]; then
      DAEMON_PID="$pid"
      return 0
    fi
    sleep 0.2
  done
  daemon_failed "the daemon did not report a heartbeat within $START_TIMEOUT s; see 'autoretry status'" "$3"
}

# -- detached (no service manager: containers, WSL without systemd, AUTORETRY_SERVICE=none) --------

detached_pid() { head -n 1 "$PIDFILE" 2>/dev/null || true; }
detached_dead() { ! is_our_daemon "$1"; }

start_detached() {
  stop_detached
  local before pid
  before="$(log_size)"
  (umask 077 && mkdir -p "$STATE_DIR" && : >"$ERRFILE")
  nohup "$VENV/bin/autoretry" run </dev/null >>"$ERRFILE" 2>&1 &
  pid=$!
  (umask 077 && printf '%s\n' "$pid" >"$PIDFILE")
  if ! wait_for_daemon detached_pid detached_dead "$before"; then
    local code=0
    wait "$pid" 2>/dev/null || code=$?
    rm -f "$PIDFILE"
    daemon_failed "the daemon exited at once (exit status $code)" "$before"
  fi
  say "no user service manager used: daemon started in the background (pid $DAEMON_PID, pid file $PIDFILE);"
  say "it is not restarted after a reboot: add '$VENV/bin/autoretry run' to your session start-up"
}

# -- systemd --------------------------------------------------------------------------------------

unit_is_ours() {
  [[ -f "$UNIT" ]] && { grep -qF "# $WRITTEN_BY" "$UNIT" || grep -qxF "ExecStart=$VENV/bin/autoretry run" "$UNIT"; }
}

systemd_quote() {  # a value for Environment="NAME=value"
  local value="$1"
  value="${value//\\/\\\\}"
  value="${value//\"/\\\"}"
  printf '%s' "${value//%/%%}"
}

write_unit() {
  mkdir -p "$(dirname "$UNIT")"
  local name env=""
  # The service sees the config and store this shell sees.
  for name in XDG_CONFIG_HOME XDG_DATA_HOME AUTORETRY_HOME AUTORETRY_CONFIG OPENCODE_DB; do
    if [[ -n "${!name:-}" ]]; then
      env+="Environment=\"$name=$(systemd_quote "${!name}")\""$'\n'
    fi
  done
  cat >"$UNIT" <<EOF
# $WRITTEN_BY; ./install.sh --uninstall removes it
[Unit]
Description=opencode-autoretry daemon (keeps OpenCode sessions moving)
Documentation=file://$ROOT/README.md

[Service]
ExecStart=$VENV/bin/autoretry run
${env}Restart=on-failure
RestartSec=5

[Install]
WantedBy=default.target
EOF
}

systemd_pid() {
  local pid
  pid="$(systemctl --user show -p MainPID --value "$SERVICE" 2>/dev/null || true)"
  [[ "$pid" == 0 ]] || printf '%s' "$pid"
}

systemd_dead() {  # failed, or waiting to be restarted after a failure
  local state sub
  state="$(systemctl --user show -p ActiveState --value "$SERVICE" 2>/dev/null || true)"
  sub="$(systemctl --user show -p SubState --value "$SERVICE" 2>/dev/null || true)"
  [[ "$state" == failed || "$state" == inactive || "$sub" == auto-restart ]]
}

start_systemd() {
  if [[ -f "$UNIT" ]] && ! unit_is_ours; then
    die "$UNIT exists and was not written by install.sh; remove or rename it, or run with AUTORETRY_SERVICE=none"
  fi
  stop_detached pidfile  # a daemon an earlier run started detached
  local before
  before="$(log_size)"
  write_unit
  systemctl --user daemon-reload
  systemctl --user enable "$SERVICE" >/dev/null
  systemctl --user restart "$SERVICE"  # restart: an upgrade must run the new code
  if ! wait_for_daemon systemd_pid systemd_dead "$before"; then
    (umask 077 && mkdir -p "$STATE_DIR" \
      && journalctl --user -u "$SERVICE" -n 20 --no-pager -o cat >"$ERRFILE" 2>/dev/null) || true
    systemctl --user stop "$SERVICE" >/dev/null 2>&1 || true
    daemon_failed "the systemd user service $SERVICE failed to start (systemctl --user status $SERVICE)" "$before"
  fi
  say "systemd user service $SERVICE enabled and (re)started, pid $DAEMON_PID (journalctl --user -u $SERVICE)"
}

# -- launchd --------------------------------------------------------------------------------------

plist_is_ours() {
  [[ -f "$PLIST" ]] && { grep -qF "<!-- $WRITTEN_BY" "$PLIST" || grep -qF "<string>$VENV/bin/autoretry</string>" "$PLIST"; }
}

xml_escape() {
  local value="${1//&/&amp;}"
  value="${value//</&lt;}"
  printf '%s' "${value//>/&gt;}"
}

write_plist() {
  mkdir -p "$(dirname "$PLIST")"
  cat >"$PLIST" <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
<!-- $WRITTEN_BY; ./install.sh --uninstall removes it -->
<plist version="1.0">
<dict>
  <key>Label</key><string>$LABEL</string>
  <key>ProgramArguments</key><array><string>$(xml_escape "$VENV/bin/autoretry")</string><string>run</string></array>
  <key>StandardErrorPath</key><string>$(xml_escape "$ERRFILE")</string>
  <key>RunAtLoad</key><true/>
  <key>KeepAlive</key><dict><key>SuccessfulExit</key><false/></dict>
</dict>
</plist>
EOF
}

launchd_field() {  # "PID" or "LastExitStatus" of the loaded agent
  launchctl list "$LABEL" 2>/dev/null | sed -n "s/^[[:space:]]*\"$1\" = \\([0-9-]*\\);.*/\\1/p"
}

launchd_pid() { launchd_field PID; }
launchd_dead() { [[ -z "$1" && -n "$(launchd_field LastExitStatus)" && "$(launchd_field LastExitStatus)" != 0 ]]; }

start_launchd() {
  if [[ -f "$PLIST" ]] && ! plist_is_ours; then
    die "$PLIST exists and was not written by install.sh; remove or rename it, or run with AUTORETRY_SERVICE=none"
  fi
  stop_detached pidfile
  local before
  before="$(log_size)"
  (umask 077 && mkdir -p "$STATE_DIR" && : >"$ERRFILE")
  write_plist
  launchctl unload "$PLIST" >/dev/null 2>&1 || true
  launchctl load -w "$PLIST"
  if ! wait_for_daemon launchd_pid launchd_dead "$before"; then
    launchctl unload "$PLIST" >/dev/null 2>&1 || true
    daemon_failed "the launchd agent $LABEL failed to start" "$before"
  fi
  say "launchd agent $LABEL loaded, pid $DAEMON_PID ($PLIST)"
}

remove_service() {
  if [[ -f "$UNIT" ]]; then
    if unit_is_ours; then
      if systemd_user_works; then systemctl --user disable --now "$SERVICE" >/dev/null 2>&1 || true; fi
      rm -f "$UNIT"
      if systemd_user_works; then systemctl --user daemon-reload || true; fi
      say "removed $UNIT"
    else
      warn "$UNIT was not written by install.sh: left as it is"
    fi
  fi
  if [[ -f "$PLIST" ]]; then
    if plist_is_ours; then
      launchctl unload "$PLIST" >/dev/null 2>&1 || true
      rm -f "$PLIST"
      say "removed $PLIST"
    else
      warn "$PLIST was not written by install.sh: left as it is"
    fi
  fi
}

# -- the commands ---------------------------------------------------------------------------------

do_install() {
  local kind
  kind="$(service_kind)"
  check_python
  prepare_venv
  install_package
  link_command
  say "installing the OpenCode bridge"
  "$VENV/bin/autoretry" bridge install
  check_opencode
  case "$kind" in
    systemd) start_systemd ;;
    launchd) start_launchd ;;
    none) start_detached ;;
  esac
  say "done. The daemon's files:"
  say "  config  $CONFIG_FILE$([[ -f "$CONFIG_FILE" ]] || printf ' (not created: the defaults apply; see README, Configuration)')"
  say "  log     $(log_file)"
  say "  store   $(store_file)"
  say "next: restart your OpenCode windows so they load the bridge; then try 'autoretry status'"
  say "  in a shell and '/autoretry status' inside OpenCode ('autoretry doctor' checks the set-up)"
}

do_dev() {
  check_python
  if [[ ! -x "$ROOT/.venv/bin/python" ]]; then
    say "creating virtualenv $ROOT/.venv"
    "$PYTHON" -m venv "$ROOT/.venv"
  fi
  say "installing $ROOT in editable mode with the dev tools"
  "$ROOT/.venv/bin/python" -m pip install --quiet --disable-pip-version-check -e "${ROOT}[dev]" \
    --config-settings editable_mode=strict
  say "done: run tests with .venv/bin/python -m pytest (the e2e suite: -m e2e)"
}

do_uninstall() {
  remove_service
  stop_detached
  if [[ -x "$VENV/bin/autoretry" ]]; then
    "$VENV/bin/autoretry" bridge uninstall || warn "bridge uninstall failed; remove ~/.config/opencode/plugins/autoretry.js by hand"
  fi
  if link_is_ours; then
    rm -f "$LINK"
    say "removed $LINK"
  elif [[ -e "$LINK" || -L "$LINK" ]]; then
    say "kept $LINK: it is not install.sh's link to $VENV/bin/autoretry"
  fi
  if venv_is_ours; then
    rm -rf "$VENV"
    say "removed $VENV"
  elif [[ -x "$VENV/bin/python" ]]; then
    if "$VENV/bin/python" -m pip show --quiet opencode-autoretry >/dev/null 2>&1; then
      "$VENV/bin/python" -m pip uninstall --quiet --yes opencode-autoretry \
        || die "pip uninstall opencode-autoretry failed in $VENV"
      say "uninstalled opencode-autoretry from $VENV"
    fi
    say "kept $VENV: install.sh did not create it (remove it yourself if you no longer need it)"
  fi
  say "uninstalled (kept: the daemon's store and logs in $STATE_DIR, the config $CONFIG_FILE)"
}

[[ $# -le 1 ]] || die "one option at most, got: $* (use --help)"
case "${1:-}" in
  "") do_install ;;
  --dev) do_dev ;;
  --uninstall) do_uninstall ;;
  -h | --help) usage ;;
  *) die "unknown option $1 (use --dev, --uninstall or --help)" ;;
esac
