// opencode-autoretry bridge: where the daemon listens, and whether it is safe to connect there.
//
// Pure helpers, imported only by `plugins/autoretry.js` (OpenCode does not load subfolders of
// `plugins/` as plugins).
// @ts-check
import fs from "node:fs"
import os from "node:os"
import path from "node:path"

// Where the daemon listens; mirrors opencode_autoretry.config.paths.socket_path().
/**
 * @param {Record<string, string | undefined>} [env]
 * @param {string} [home]
 * @returns {string}
 */
export function socketPath(env = process.env, home = os.homedir()) {
  if (env.AUTORETRY_SOCKET) return env.AUTORETRY_SOCKET.replace(/^~(?=\/|$)/, home)
  if (env.XDG_RUNTIME_DIR) return path.join(env.XDG_RUNTIME_DIR, "opencode-autoretry", "daemon.sock")
  if (env.AUTORETRY_HOME) return path.join(env.AUTORETRY_HOME.replace(/^~(?=\/|$)/, home), "daemon.sock")
  const data = env.XDG_DATA_HOME || path.join(home, ".local", "share")
  return path.join(data, "opencode-autoretry", "daemon.sock")
}

// The plugin's serverUrl is a bogus http://localhost:4096/ unless the process really listens.
/** @param {readonly string[]} [argv] */
export function processListens(argv = process.argv) {
  return argv.some((a) => a === "serve" || a === "web" || a.startsWith("--port") || a.startsWith("--hostname"))
}

/** The longest wait between two connection attempts: 30 s, unless
 * AUTORETRY_BRIDGE_RECONNECT_MAX_MS (100 ms or more) asks for less. The e2e suite keeps one
 * OpenCode per worker across tests, each with a daemon of its own: a bridge that had backed off
 * to 30 s would keep the next test's daemon waiting for it.
 * @param {NodeJS.ProcessEnv} [env] @returns {number} */
export function reconnectCap(env = process.env) {
  const raw = Number(env.AUTORETRY_BRIDGE_RECONNECT_MAX_MS)
  return Number.isFinite(raw) && raw >= 100 ? Math.min(raw, 30000) : 30000
}

/** @param {number} attempt @param {number} [cap] @returns {number} ms before the next connection attempt */
export function backoffDelay(attempt, cap = 30000) {
  return Math.min(cap, 500 * 2 ** Math.max(0, attempt))
}

// Whoever listens on the socket receives every event and excerpt, and every `prompt` it sends
// is run by the agent: the bridge only connects to a socket its own user made, in a directory
// only that user can enter. The daemon refuses a directory of another user or a shared one
// (daemon/intake/hardening.py owned_private_dir) and makes it 0700; the bridge checks the same before
// EVERY connect, because another local user can create the path first where it points into a
// shared directory (XDG_RUNTIME_DIR or AUTORETRY_SOCKET under /tmp). A directory we own with
// no group/other bits is the guard: nobody else can add, swap or replace an entry in it, so
// the socket checked here is the one connected to. lstat: a symlink is never followed to a
// socket (its target could be anyone's, and could change after the check).

/**
 * The subset of fs.Stats the check reads (injectable: tests simulate another user).
 * @typedef {{ uid: number, mode: number, isDirectory(): boolean, isSocket(): boolean, isSymbolicLink(): boolean }} StatLike
 */

/**
 * @typedef {object} SocketCheckDeps
 * @property {(file: string) => StatLike} [lstat] does not follow a symlink
 * @property {(file: string) => StatLike} [stat] follows one (only for a directory link we own)
 * @property {number | null} [uid] the current user; null where the OS has none (fail closed)
 */

/**
 * @typedef {{ ok: true } | { ok: false, reason: string, message: string }} SocketCheck
 * reason "absent": nothing there yet (the daemon is not running): not worth a log line.
 */

/** @returns {number | null} */
export function currentUid() {
  return typeof process.getuid === "function" ? process.getuid() : null
}

/** @param {string} reason @param {string} message @returns {SocketCheck} */
function refuse(reason, message) {
  return { ok: false, reason, message }
}

/** @param {unknown} err */
function isMissing(err) {
  const code = /** @type {{ code?: string } | null} */ (err)?.code
  return code === "ENOENT" || code === "ENOTDIR"
}

/**
 * The socket's directory: ours, no group/other bits; a symlink to such a directory counts only
 * when the link itself is ours (nobody else can repoint it).
 * @param {string} dir
 * @param {Required<SocketCheckDeps>} deps
 * @param {number} uid
 * @returns {SocketCheck}
 */
function checkDirectory(dir, deps, uid) {
  let info = deps.lstat(dir)
  if (info.isSymbolicLink()) {
    if (info.uid !== uid) return refuse("dir_owner", `${dir} is a symlink of uid ${info.uid}, not ours (${uid})`)
    info = deps.stat(dir)
  }
  if (!info.isDirectory()) return refuse("dir_not_dir", `${dir} is not a directory`)
  if (info.uid !== uid) return refuse("dir_owner", `${dir} belongs to uid ${info.uid}, not to us (${uid})`)
  const mode = info.mode & 0o7777
  if (mode & 0o077) return refuse("dir_shared", `${dir} is open to others (mode ${mode.toString(8).padStart(4, "0")})`)
  return { ok: true }
}

/**
 * Whether the bridge may connect to `file`: ok, or why not (fail closed: any doubt refuses).
 * @param {string} file
 * @param {SocketCheckDeps} [deps]
 * @returns {SocketCheck}
 */
export function checkSocket(file, deps = {}) {
  const uid = deps.uid === undefined ? currentUid() : deps.uid
  /** @type {Required<SocketCheckDeps>} */
  const use = { lstat: deps.lstat ?? fs.lstatSync, stat: deps.stat ?? fs.statSync, uid }
  if (uid === null) return refuse("no_uid", "this platform has no user id to check the socket's owner against")
  try {
    const dir = checkDirectory(path.dirname(file), use, uid)
    if (!dir.ok) return dir
    const info = use.lstat(file)
    if (info.isSymbolicLink()) return refuse("symlink", `${file} is a symlink, not the daemon's socket`)
    if (!info.isSocket()) return refuse("not_socket", `${file} is not a socket`)
    if (info.uid !== uid) return refuse("socket_owner", `${file} belongs to uid ${info.uid}, not to us (${uid})`)
    return { ok: true }
  } catch (err) {
    if (isMissing(err)) return refuse("absent", `${file} does not exist`)
    return refuse("unreadable", `${file}: ${String(/** @type {Error} */ (err)?.message ?? err)}`)
  }
}
