#!/usr/bin/env bash
# opencode-autoretry installer: a virtualenv, then `autoretry setup`.
#
#   ./install.sh              install, or upgrade in place when run again: a virtualenv with
#                             the package and the ~/.local/bin/autoretry link, then
#                             `autoretry setup`: the OpenCode bridge plugin and /autoretry
#                             command, the OpenCode check, and the daemon (a user service, or a
#                             detached process), waiting for its first heartbeat
#   ./install.sh --dev        development: .venv in this checkout, pip install -e '.[dev]'
#   ./install.sh --uninstall  remove what install.sh created (see below)
#   ./install.sh --help       this text
#
# Without this script: `pipx install .` or `uv tool install .`, then `autoretry setup`
# (`autoretry setup --uninstall`, then `pipx uninstall opencode-autoretry`, to remove it).
#
# What --uninstall removes: only what install.sh created.
#   - the virtualenv, if install.sh created it (it then holds the marker file
#     .opencode-autoretry-install); a virtualenv that existed before (AUTORETRY_VENV) is
#     kept: only the package is uninstalled from it (pip uninstall)
#   - ~/.local/bin/autoretry, if it is a symlink to the virtualenv's autoretry; a file of
#     yours there, or a link elsewhere, is never replaced or removed (install warns)
#   - through `autoretry setup --uninstall`: the systemd user unit or launchd agent it wrote
#     (or it stops the detached daemon by the pid in its pid file) and the bridge files
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
CONFIG_FILE="$(absolute "${AUTORETRY_CONFIG:-$CONFIG_HOME/opencode-autoretry/config.toml}")"
BIN_DIR="$HOME/.local/bin"
LINK="$BIN_DIR/autoretry"
PYTHON="${PYTHON:-python3}"

say() { printf '==> %s\n' "$*"; }
warn() { printf 'warning: %s\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

usage() {  # the comment block at the top of this file
  awk 'NR == 1 { next } /^#/ { sub(/^# ?/, ""); print; next } { exit }' "${BASH_SOURCE[0]}"
}

# Checked before anything is created; `autoretry setup` reads the same variable.
check_service() {
  case "${AUTORETRY_SERVICE:-auto}" in
    auto | systemd | launchd | none) ;;
    *) die "AUTORETRY_SERVICE=$AUTORETRY_SERVICE is not one of auto, systemd, launchd, none" ;;
  esac
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

# -- the commands ---------------------------------------------------------------------------------

do_install() {
  check_service
  check_python
  prepare_venv
  install_package
  link_command
  local setup=("$VENV/bin/autoretry" setup)
  [[ -z "${OPENCODE:-}" ]] || setup+=(--opencode "$OPENCODE")
  # The bridge, the OpenCode check, the daemon and its first heartbeat, where its files are.
  "${setup[@]}" \
    || die "fix the problem above (the config: $CONFIG_FILE), then re-run ./install.sh"
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
  if [[ -x "$VENV/bin/autoretry" ]]; then
    "$VENV/bin/autoretry" setup --uninstall \
      || warn "autoretry setup --uninstall failed; stop the daemon (autoretry stop) and remove ~/.config/opencode/plugins/autoretry.js by hand"
  else
    warn "no $VENV/bin/autoretry: the service, the daemon and the bridge files are left as they are"
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
}

[[ $# -le 1 ]] || die "one option at most, got: $* (use --help)"
case "${1:-}" in
  "") do_install ;;
  --dev) do_dev ;;
  --uninstall) do_uninstall ;;
  -h | --help) usage ;;
  *) die "unknown option $1 (use --dev, --uninstall or --help)" ;;
esac
