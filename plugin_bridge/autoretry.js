// opencode-autoretry bridge: an OpenCode server plugin (plain ES module, node:net only).
//
// It runs inside every OpenCode process, connects to the autoretry daemon over a Unix socket,
// streams the bus events the daemon needs and executes the daemon's requests (prompt, abort,
// toast, log) through the in-process `client`. It must never slow down, block or crash
// OpenCode: every error is caught, nothing is printed, the send queue is bounded, and with
// no daemon it only retries the connection with backoff (0.5 s -> 30 s).
//
// OpenCode 1.18 loads a file whose default export is `{id, server}` through `server()` only,
// so the named exports below (pure helpers, used by the node --test suite) are not plugins.
import net from "node:net"
import os from "node:os"
import path from "node:path"

export const PROTOCOL_VERSION = 1
export const BRIDGE_VERSION = "0.1.0"
export const MAX_LINE_BYTES = 1024 * 1024
export const QUEUE_LIMIT = 8 * 1024 * 1024 // chars of queued lines (~8 MB)
export const TOOL_OUTPUT_KEEP = 2000
export const TEXT_KEEP = 500
export const WRITE_BATCH = 256 * 1024 // chars per socket write
export const COMMAND_TIMEOUT_MS = 1000
export const REQUEST_TIMEOUT_MS = 10000
export const FORWARDED_EVENTS = new Set([
  "session.status", "session.idle", "session.error", "session.created", "session.updated",
  "session.deleted", "message.updated", "message.part.updated", "message.part.delta",
  "permission.asked", "permission.replied", "command.executed", "todo.updated",
  "session.compacted",
])

// Same table as plugin_bridge/protocol.py SCHEMA ("?" = optional / nullable).
export const SCHEMA = {
  hello: { pid: "int", directory: "str", project: "str?", opencode: "str?", bridge: "str?", server_url: "str?" },
  event: { t: "int", event: "obj" },
  "chat.message": { t: "int", session_id: "str", message_id: "str?", agent: "str?", model: "obj?", variant: "str?", marker: "obj?", synthetic: "bool?", text: "str?", command: "bool?" },
  command: { id: "str", session_id: "str?", name: "str", arguments: "str?" },
  ack: { id: "str", ok: "bool", error: "str?", result: "obj?" },
  stats: { dropped: "int", queued: "int", sent: "int?", reconnects: "int?", unknown: "int?" },
  welcome: { daemon: "str" },
  prompt: { id: "str", session_id: "str", text: "str", agent: "str?", model: "obj?", variant: "str?", marker: "obj?" },
  abort: { id: "str", session_id: "str" },
  toast: { id: "str?", title: "str?", message: "str", variant: "str?", duration: "int?" },
  log: { id: "str?", level: "str", message: "str", extra: "obj?" },
  reply: { id: "str", ok: "bool", title: "str?", message: "str", variant: "str?" },
  trim: { id: "str?", session_id: "str", message_id: "str", part_id: "str", keep_chars: "int" },
}

export class ProtocolError extends Error {
  constructor(reason, detail) {
    super(`${reason}: ${detail}`)
    this.reason = reason
  }
}

function kindOk(kind, value) {
  if (kind === "str") return typeof value === "string"
  if (kind === "int") return Number.isInteger(value)
  if (kind === "num") return typeof value === "number" && Number.isFinite(value)
  if (kind === "bool") return typeof value === "boolean"
  return value !== null && typeof value === "object" && !Array.isArray(value)
}

export function validate(obj) {
  if (obj === null || typeof obj !== "object" || Array.isArray(obj))
    throw new ProtocolError("not_object", "expected a JSON object")
  if (obj.v !== PROTOCOL_VERSION) throw new ProtocolError("bad_version", `v must be ${PROTOCOL_VERSION}`)
  if (typeof obj.type !== "string" || obj.type === "") throw new ProtocolError("bad_type", "type must be a non-empty string")
  for (const [name, spec] of Object.entries(SCHEMA[obj.type] ?? {})) {
    const optional = spec.endsWith("?")
    const value = obj[name]
    if (value === undefined || value === null) {
      if (!optional) throw new ProtocolError("missing_field", `${obj.type}: ${name} is required`)
      continue
    }
    if (!kindOk(spec.replace("?", ""), value)) throw new ProtocolError("bad_field", `${obj.type}: ${name}`)
  }
  return obj
}

export function parseLine(line) {
  if (Buffer.byteLength(line, "utf8") > MAX_LINE_BYTES) throw new ProtocolError("too_long", "line over 1 MiB")
  let obj
  try {
    obj = JSON.parse(line)
  } catch (err) {
    throw new ProtocolError("bad_json", String(err?.message ?? err))
  }
  return validate(obj)
}

export function encodeMessage(type, fields) {
  return JSON.stringify({ v: PROTOCOL_VERSION, type, ...fields }) + "\n"
}

// Where the daemon listens; mirrors opencode_autoretry.paths.socket_path().
export function socketPath(env = process.env, home = os.homedir()) {
  if (env.AUTORETRY_SOCKET) return env.AUTORETRY_SOCKET.replace(/^~(?=\/|$)/, home)
  if (env.XDG_RUNTIME_DIR) return path.join(env.XDG_RUNTIME_DIR, "opencode-autoretry", "daemon.sock")
  if (env.AUTORETRY_HOME) return path.join(env.AUTORETRY_HOME.replace(/^~(?=\/|$)/, home), "daemon.sock")
  const data = env.XDG_DATA_HOME || path.join(home, ".local", "share")
  return path.join(data, "opencode-autoretry", "daemon.sock")
}

// The plugin's serverUrl is a bogus http://localhost:4096/ unless the process really listens.
export function processListens(argv = process.argv) {
  return argv.some((a) => a === "serve" || a === "web" || a.startsWith("--port") || a.startsWith("--hostname"))
}

export function backoffDelay(attempt) {
  return Math.min(30000, 500 * 2 ** Math.max(0, attempt))
}

function cut(text, keep) {
  if (typeof text !== "string" || text.length <= keep) return text
  return `${text.slice(0, keep)}…[autoretry trimmed ${text.length - keep} chars]`
}

// Tool outputs can be megabytes; the daemon needs their state, not their bytes.
export function trimEvent(event) {
  const part = event?.properties?.part
  if (event?.type !== "message.part.updated" || part?.type !== "tool" || !part.state) return event
  const state = { ...part.state }
  if (typeof state.output === "string") state.output = cut(state.output, TOOL_OUTPUT_KEEP)
  if (state.metadata && typeof state.metadata === "object") {
    state.metadata = { ...state.metadata }
    if (typeof state.metadata.output === "string") state.metadata.output = cut(state.metadata.output, TOOL_OUTPUT_KEEP)
  }
  return { ...event, properties: { ...event.properties, part: { ...part, state } } }
}

export function chatMessageFields(input, output, now = Date.now()) {
  const parts = Array.isArray(output?.parts) ? output.parts : []
  const text = parts.find((p) => p?.type === "text") ?? null
  const body = typeof text?.text === "string" ? text.text : ""
  const marker = text?.metadata?.autoretry
  return {
    t: now,
    session_id: String(input?.sessionID ?? output?.message?.sessionID ?? ""),
    message_id: input?.messageID ?? output?.message?.id ?? null,
    agent: input?.agent ?? output?.message?.agent ?? null,
    model: input?.model ?? output?.message?.model ?? null,
    variant: input?.variant ?? null,
    marker: marker && typeof marker === "object" ? marker : null,
    synthetic: Boolean(text?.synthetic),
    text: body.slice(0, TEXT_KEEP),
    command: /^\s*\/autoretry(\s|$)/.test(body),
  }
}

export function promptBody(req) {
  const marker = req.marker && typeof req.marker === "object" ? req.marker : {}
  const body = { parts: [{ type: "text", text: req.text, metadata: { autoretry: marker } }] }
  if (req.agent) body.agent = req.agent
  if (req.model) body.model = req.model
  if (req.variant) body.variant = req.variant
  return body
}

// Bounded FIFO of encoded lines (by size, in UTF-16 units ~ bytes): when full, drop the
// oldest delta, then the oldest event; control lines (hello, acks, commands) go last.
export class SendQueue {
  constructor(limit = QUEUE_LIMIT) {
    this.limit = limit
    this.items = []
    this.size = 0
    this.dropped = 0
  }
  push(line, kind) {
    while (this.size + line.length > this.limit) {
      if (!this.evict(kind)) {
        this.dropped += 1
        return false
      }
    }
    this.items.push({ line, kind })
    this.size += line.length
    return true
  }
  unshift(line, kind) {
    this.items.unshift({ line, kind })
    this.size += line.length
  }
  evict(incoming) {
    for (const victim of ["delta", "event"]) {
      const index = this.items.findIndex((item) => item.kind === victim)
      if (index >= 0) {
        this.size -= this.items.splice(index, 1)[0].line.length
        this.dropped += 1
        return true
      }
      if (incoming === victim) return false
    }
    return false
  }
  shift() {
    const item = this.items.shift()
    if (item) this.size -= item.line.length
    return item
  }
  clear() {
    this.items = []
    this.size = 0
  }
  get length() {
    return this.items.length
  }
}

// AUTORETRY_BRIDGE_STATS_MS lets tests see stats without waiting 15 s.
function statsInterval(options, env = process.env) {
  const raw = Number(options.statsMs ?? env.AUTORETRY_BRIDGE_STATS_MS)
  return Number.isFinite(raw) && raw >= 100 ? raw : 15000
}

function withTimeout(promise, ms, what) {
  let timer
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} timed out`)), ms)
    timer.unref?.()
  })
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer))
}

// Socket callbacks run outside any OpenCode try/catch: an exception there would crash it.
function safe(fn) {
  return (...args) => {
    try {
      fn(...args)
    } catch {}
  }
}

function sdkFailed(res) {
  return res && typeof res === "object" && res.error !== undefined && res.error !== null
}

export class Bridge {
  constructor(input, options = {}) {
    this.client = input.client
    this.directory = input.directory ?? input.worktree ?? ""
    this.project = input.project?.id ?? null
    this.serverUrl = () => {
      try {
        return processListens() ? String(input.serverUrl) : null
      } catch {
        return null
      }
    }
    this.path = options.socketPath ?? socketPath()
    this.queue = new SendQueue(options.queueLimit ?? QUEUE_LIMIT)
    this.socket = null
    this.connected = false // socket open: lines are queued
    this.ready = false // hello written first: lines are flushed
    this.attempt = 0
    this.connections = 0
    this.reconnects = 0
    this.sent = 0
    this.unknown = 0
    this.buffer = ""
    this.pending = new Map()
    this.nextCommand = 1
    this.closed = false
    this.flushPending = false
    this.version = null
    this.timer = null
    this.statsTimer = setInterval(() => this.sendStats(), statsInterval(options))
    this.statsTimer.unref?.()
  }

  start() {
    this.connect()
    return this
  }

  connect() {
    if (this.closed || this.socket) return
    try {
      const socket = net.createConnection({ path: this.path })
      this.socket = socket
      socket.setEncoding("utf8")
      socket.on("connect", () => this.onConnect(socket))
      socket.on("data", safe((chunk) => this.onData(chunk)))
      socket.on("drain", safe(() => this.flush()))
      socket.on("error", () => {})
      socket.on("close", safe(() => this.onClose(socket)))
    } catch {
      this.socket = null
      this.scheduleReconnect()
    }
  }

  async onConnect(socket) {
    try {
      socket.unref?.() // an idle bridge must never keep `opencode run` alive
      this.connections += 1
      this.reconnects = this.connections - 1
      this.attempt = 0
      this.connected = true
      this.buffer = ""
      const hello = { pid: process.pid, directory: this.directory, project: this.project,
        opencode: await this.opencodeVersion(), bridge: BRIDGE_VERSION, server_url: this.serverUrl() }
      if (this.socket !== socket) return
      this.queue.unshift(encodeMessage("hello", hello), "control")
      this.ready = true
      this.flush()
    } catch {}
  }

  async opencodeVersion() {
    if (this.version) return this.version
    try {
      // The v1 SDK has no health(); its raw fetch client (`_client`) reaches the same app.
      const res = await withTimeout(this.client._client.get({ url: "/global/health" }), 1000, "health")
      const version = res?.data?.version ?? res?.version
      if (typeof version === "string") this.version = version
    } catch {}
    return this.version
  }

  onClose(socket) {
    if (this.socket !== socket) return
    this.socket = null
    this.connected = false
    this.ready = false
    this.queue.clear()
    for (const [, waiter] of this.pending) waiter(null)
    this.pending.clear()
    this.scheduleReconnect()
  }

  scheduleReconnect() {
    if (this.closed || this.timer) return
    const delay = backoffDelay(this.attempt)
    this.attempt += 1
    this.timer = setTimeout(() => {
      this.timer = null
      this.connect()
    }, delay)
    this.timer.unref?.()
  }

  // Nothing is queued while disconnected: the daemon rebuilds its view from OpenCode's DB.
  send(type, fields, kind = "control") {
    if (!this.connected) return false
    const line = encodeMessage(type, fields)
    if (line.length * 3 >= MAX_LINE_BYTES && Buffer.byteLength(line, "utf8") >= MAX_LINE_BYTES) {
      this.queue.dropped += 1
      return false
    }
    const ok = this.queue.push(line, kind)
    this.scheduleFlush()
    return ok
  }

  // Lines queued in the same tick (a burst of deltas) go out in one write, after the hook
  // has returned: OpenCode never waits for the socket.
  scheduleFlush() {
    if (this.flushPending) return
    this.flushPending = true
    setImmediate(() => {
      this.flushPending = false
      try {
        this.flush()
      } catch {}
    })
  }

  flush() {
    const socket = this.socket
    if (!socket || !this.ready || socket.writableNeedDrain) return
    while (this.queue.length > 0) {
      const batch = []
      let size = 0
      while (this.queue.length > 0 && size < WRITE_BATCH) {
        const item = this.queue.shift()
        batch.push(item.line)
        size += item.line.length
      }
      this.sent += batch.length
      if (!socket.write(batch.join(""))) return
    }
  }

  sendStats() {
    try {
      this.send("stats", { dropped: this.queue.dropped, queued: this.queue.length, sent: this.sent,
        reconnects: this.reconnects, unknown: this.unknown })
    } catch {}
  }

  onData(chunk) {
    this.buffer += chunk
    if (this.buffer.length > MAX_LINE_BYTES && !this.buffer.includes("\n")) {
      this.buffer = ""
      this.unknown += 1
      return
    }
    let index
    while ((index = this.buffer.indexOf("\n")) >= 0) {
      const line = this.buffer.slice(0, index)
      this.buffer = this.buffer.slice(index + 1)
      if (line.trim()) this.handleLine(line)
    }
  }

  handleLine(line) {
    let msg
    try {
      msg = parseLine(line)
    } catch {
      this.unknown += 1
      return
    }
    this.handle(msg).catch(() => {})
  }

  async handle(msg) {
    if (msg.type === "welcome") return
    if (msg.type === "reply") {
      const waiter = this.pending.get(msg.id)
      if (waiter) waiter(msg)
      return
    }
    const run = {
      prompt: () => this.doPrompt(msg),
      abort: () => this.client.session.abort({ path: { id: msg.session_id } }),
      toast: () => this.toast(msg),
      log: () => this.client.app.log({ body: { service: "autoretry", level: msg.level, message: msg.message, extra: msg.extra ?? {} } }),
    }[msg.type]
    if (!run) {
      this.unknown += 1
      if (msg.id) this.ack(msg.id, false, `unsupported request: ${msg.type}`)
      return
    }
    try {
      const res = await withTimeout(Promise.resolve(run()), REQUEST_TIMEOUT_MS, msg.type)
      if (sdkFailed(res)) throw new Error(describeError(res.error))
      if (msg.id) this.ack(msg.id, true, null, res?.result ?? null)
    } catch (err) {
      if (msg.id) this.ack(msg.id, false, String(err?.message ?? err))
    }
  }

  ack(id, ok, error, result = null) {
    this.send("ack", { id, ok, error, result })
  }

  toast(msg) {
    return this.client.tui.showToast({ body: { title: msg.title ?? "autoretry", message: msg.message,
      variant: msg.variant ?? "info", duration: msg.duration ?? undefined } })
  }

  // Fail-closed gate: re-read the session right before prompting; unknown means no.
  async doPrompt(msg) {
    let session
    try {
      session = await this.client.session.get({ path: { id: msg.session_id } })
    } catch {
      throw new Error("unreadable")
    }
    if (sdkFailed(session) || !session?.data?.id) throw new Error("unreadable")
    if (session.data.parentID) throw new Error("child session")
    const res = await this.client.session.promptAsync({ path: { id: msg.session_id }, body: promptBody(msg) })
    if (sdkFailed(res)) throw new Error(describeError(res.error))
    return { result: { status: res?.response?.status ?? null } }
  }

  forwardEvent(event) {
    if (!event || !FORWARDED_EVENTS.has(event.type)) return
    const kind = event.type === "message.part.delta" ? "delta" : "event"
    this.send("event", { t: Date.now(), event: trimEvent(event) }, kind)
  }

  // Asks the daemon about "/autoretry ..."; resolves to the reply, or null (down / timeout).
  askCommand(input) {
    if (!this.connected) return Promise.resolve(null)
    const id = `c-${process.pid}-${this.nextCommand++}`
    return new Promise((resolve) => {
      const timer = setTimeout(() => finish(null), COMMAND_TIMEOUT_MS)
      timer.unref?.()
      const finish = (reply) => {
        clearTimeout(timer)
        this.pending.delete(id)
        resolve(reply)
      }
      this.pending.set(id, finish)
      if (!this.send("command", { id, session_id: input?.sessionID ?? null, name: "autoretry", arguments: String(input?.arguments ?? "") }))
        finish(null)
    })
  }

  close() {
    this.closed = true
    clearInterval(this.statsTimer)
    if (this.timer) clearTimeout(this.timer)
    try {
      this.socket?.destroy()
    } catch {}
    this.socket = null
    this.connected = false
    this.ready = false
  }
}

function describeError(error) {
  if (typeof error === "string") return error
  return String(error?.data?.message ?? error?.message ?? error?.name ?? JSON.stringify(error))
}

export const DAEMON_DOWN_MESSAGE = "autoretry daemon is not running: start it with `autoretry run` (or `systemctl --user start opencode-autoretry`)."
export const HANDLED_MESSAGE = "autoretry: command handled by the autoretry plugin (no model call)"

async function handleAutoretryCommand(bridge, input) {
  let reply = null
  try {
    reply = await bridge.askCommand(input)
  } catch {}
  const body = reply
    ? { title: reply.title ?? "autoretry", message: reply.message, variant: reply.variant ?? "info" }
    : { title: "autoretry", message: DAEMON_DOWN_MESSAGE, variant: "warning" }
  try {
    await withTimeout(bridge.client.tui.showToast({ body }), 2000, "toast")
  } catch {}
}

export const AutoretryBridge = async (input) => {
  let bridge = null
  try {
    bridge = new Bridge(input).start()
  } catch {
    return {}
  }
  return {
    event: async ({ event }) => {
      try {
        bridge.forwardEvent(event)
      } catch {}
    },
    "chat.message": async (hookInput, output) => {
      try {
        bridge.send("chat.message", chatMessageFields(hookInput, output))
      } catch {}
    },
    // Throwing is the only way to stop the model call for a command (reference §6.5).
    "command.execute.before": async (hookInput) => {
      if (hookInput?.command !== "autoretry") return
      await handleAutoretryCommand(bridge, hookInput)
      throw new Error(HANDLED_MESSAGE)
    },
    dispose: async () => {
      try {
        bridge.close()
      } catch {}
    },
  }
}

export default { id: "opencode-autoretry", server: AutoretryBridge }
