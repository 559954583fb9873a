#!/usr/bin/env bash
# opencode-autoretry installer.
#
#   ./install.sh              install or upgrade: venv, package, ~/.local/bin/autoretry,
#                             OpenCode bridge plugin + /autoretry command, user service
#   ./install.sh --dev        development: .venv in this checkout, pip install -e '.[dev]'
#   ./install.sh --uninstall  remove the service, the command link, the bridge and the venv
#
# Environment: AUTORETRY_VENV (default ~/.local/share/opencode-autoretry/venv),
# PYTHON (default python3, must be >= 3.11), XDG_CONFIG_HOME / XDG_DATA_HOME as usual.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
DATA_HOME="${XDG_DATA_HOME:-$HOME/.local/share}"
CONFIG_HOME="${XDG_CONFIG_HOME:-$HOME/.config}"
VENV="${AUTORETRY_VENV:-$DATA_HOME/opencode-autoretry/venv}"
BIN_DIR="$HOME/.local/bin"
LINK="$BIN_DIR/autoretry"
SERVICE="opencode-autoretry.service"
UNIT="$CONFIG_HOME/systemd/user/$SERVICE"
LABEL="com.github.opencode-autoretry"
PLIST="$HOME/Library/LaunchAgents/$LABEL.plist"
PYTHON="${PYTHON:-python3}"

say() { printf '==> %s\n' "$*"; }
warn() { printf 'warning: %s\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

check_python() {
  command -v "$PYTHON" >/dev/null 2>&1 || die "$PYTHON not found; install Python 3.11+ or set PYTHON=/path/to/python3.11"
  "$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' \
    || die "$PYTHON is $("$PYTHON" -V 2>&1); opencode-autoretry needs Python 3.11+ (set PYTHON=...)"
}

make_venv() {  # $1 = venv dir
  if [[ ! -x "$1/bin/python" ]]; then
    say "creating virtualenv $1"
    "$PYTHON" -m venv "$1"
  fi
}

systemd_user_works() {
  [[ "$(uname -s)" == "Linux" ]] && command -v systemctl >/dev/null 2>&1 \
    && systemctl --user show-environment >/dev/null 2>&1
}

write_unit() {
  mkdir -p "$(dirname "$UNIT")"
  cat >"$UNIT" <<EOF
[Unit]
Description=opencode-autoretry daemon (keeps OpenCode sessions moving)
Documentation=file://$ROOT/README.md

[Service]
ExecStart=$VENV/bin/autoretry run
Restart=on-failure
RestartSec=5

[Install]
WantedBy=default.target
EOF
}

write_plist() {
  mkdir -p "$(dirname "$PLIST")"
  cat >"$PLIST" <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
<plist version="1.0">
<dict>
  <key>Label</key><string>$LABEL</string>
  <key>ProgramArguments</key><array><string>$VENV/bin/autoretry</string><string>run</string></array>
  <key>RunAtLoad</key><true/>
  <key>KeepAlive</key><dict><key>SuccessfulExit</key><false/></dict>
</dict>
</plist>
EOF
}

install_service() {
  if systemd_user_works; then
    write_unit
    systemctl --user daemon-reload
    systemctl --user enable "$SERVICE" >/dev/null
    systemctl --user restart "$SERVICE"  # restart: an upgrade must run the new code
    say "systemd user service $SERVICE enabled and (re)started (logs: journalctl --user -u $SERVICE)"
  elif [[ "$(uname -s)" == "Darwin" ]] && command -v launchctl >/dev/null 2>&1; then
    write_plist
    launchctl unload "$PLIST" >/dev/null 2>&1 || true
    launchctl load -w "$PLIST"
    say "launchd agent $LABEL loaded ($PLIST)"
  else
    start_in_background
  fi
}

# No service manager (containers, WSL without systemd): run the daemon detached ourselves, so
# that one command still leaves a running daemon. An older one is stopped first (upgrade).
start_in_background() {
  local old
  old="$(pgrep -f "$VENV/bin/autoretry run" || true)"
  if [[ -n "$old" ]]; then
    kill $old 2>/dev/null || true
    for _ in $(seq 50); do pgrep -f "$VENV/bin/autoretry run" >/dev/null || break; sleep 0.1; done
  fi
  nohup "$VENV/bin/autoretry" run >/dev/null 2>&1 </dev/null &
  local pid=$!
  sleep 1
  if kill -0 "$pid" 2>/dev/null; then
    say "no user service manager found: daemon started in the background (pid $pid);"
    say "it is not restarted after a reboot: add 'autoretry run' to your session start-up"
  else
    warn "the daemon exited at once; run 'autoretry run --verbose' to see why"
  fi
}

remove_service() {
  if [[ -f "$UNIT" ]]; then
    if systemd_user_works; then
      systemctl --user disable --now "$SERVICE" >/dev/null 2>&1 || true
    fi
    rm -f "$UNIT"
    if systemd_user_works; then systemctl --user daemon-reload || true; fi
    say "removed $UNIT"
  fi
  if [[ -f "$PLIST" ]]; then
    launchctl unload "$PLIST" >/dev/null 2>&1 || true
    rm -f "$PLIST"
    say "removed $PLIST"
  fi
}

# A copy of the checkout, so that building the wheel leaves no build/ or *.egg-info behind.
source_copy() {
  local copy
  copy="$(mktemp -d "${TMPDIR:-/tmp}/opencode-autoretry-src.XXXXXX")"
  tar -C "$ROOT" --exclude=./.venv --exclude=./.git --exclude=./build --exclude='*.egg-info' \
    --exclude=__pycache__ --exclude=node_modules -cf - . | tar -C "$copy" -xf -
  printf '%s' "$copy"
}

do_install() {
  check_python
  make_venv "$VENV"
  say "installing opencode-autoretry from $ROOT"
  SRC="$(source_copy)"
  trap 'rm -rf "$SRC"' EXIT
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "$SRC"
  # Same version number on every checkout: force the package itself to be rebuilt.
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --force-reinstall --no-deps "$SRC"
  mkdir -p "$BIN_DIR"
  ln -sfn "$VENV/bin/autoretry" "$LINK"
  say "linked $LINK -> $VENV/bin/autoretry"
  case ":$PATH:" in *":$BIN_DIR:"*) ;; *) warn "$BIN_DIR is not on your PATH; add it to use 'autoretry'" ;; esac
  say "installing the OpenCode bridge"
  "$VENV/bin/autoretry" bridge install
  install_service
  say "done: try 'autoretry status' and '/autoretry status' inside OpenCode"
}

do_dev() {
  check_python
  make_venv "$ROOT/.venv"
  say "installing $ROOT in editable mode with the dev tools"
  "$ROOT/.venv/bin/python" -m pip install --quiet --disable-pip-version-check -e "$ROOT[dev]"
  say "done: run tests with .venv/bin/python -m pytest (the e2e suite: -m e2e)"
}

do_uninstall() {
  remove_service
  pkill -f "$VENV/bin/autoretry run" 2>/dev/null && say "stopped the running daemon" || true
  if [[ -x "$VENV/bin/autoretry" ]]; then
    "$VENV/bin/autoretry" bridge uninstall || warn "bridge uninstall failed; remove ~/.config/opencode/plugins/autoretry.js by hand"
  fi
  if [[ -L "$LINK" ]]; then
    rm -f "$LINK"
    say "removed $LINK"
  fi
  if [[ -d "$VENV" ]]; then
    rm -rf "$VENV"
    say "removed $VENV"
  fi
  say "uninstalled (the daemon's store in $DATA_HOME/opencode-autoretry was kept)"
}

case "${1:-}" in
  "") do_install ;;
  --dev) do_dev ;;
  --uninstall) do_uninstall ;;
  -h | --help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//' ;;
  *) die "unknown option $1 (use --dev, --uninstall or --help)" ;;
esac
