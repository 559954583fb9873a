// opencode-autoretry bridge: an OpenCode server plugin (plain ES module, node:net only).
//
// It runs inside every OpenCode process, connects to the autoretry daemon over a Unix socket,
// streams the bus events the daemon needs and executes the daemon's requests (prompt, abort,
// toast, log, trim, config) through the in-process `client` and its hooks: a `trim` keeps a
// stopped loop out of the model's later context (experimental.chat.messages.transform), a
// `config` may add sampling penalties per provider (chat.params; none by default).
// It must never slow down, block or crash OpenCode: every error is caught, nothing is
// printed, the send queue is bounded, and with no daemon it only retries the connection with
// backoff (0.5 s -> 30 s).
//
// OpenCode 1.18 loads a file whose default export is `{id, server}` through `server()` only,
// so the named exports below (pure helpers, used by the node --test suite) are not plugins.
// @ts-check
/** @typedef {import("./autoretry/types.js").OpenCodeClient} OpenCodeClient */
/** @typedef {import("./autoretry/types.js").PluginInput} PluginInput */
/** @typedef {import("./autoretry/types.js").WireMessage} WireMessage */
/** @typedef {import("./autoretry/types.js").PromptRequest} PromptRequest */
/** @typedef {import("./autoretry/types.js").ReplyMessage} ReplyMessage */
/** @typedef {import("./autoretry/types.js").BusEvent} BusEvent */
/** @typedef {import("./autoretry/framing.js").LineKind} LineKind */
/** @typedef {import("./autoretry/socket.js").SocketCheck} SocketCheck */
/**
 * @typedef {object} BridgeOptions (tests set them; OpenCode passes none)
 * @property {string} [socketPath]
 * @property {(file: string) => SocketCheck} [checkSocket]
 * @property {number} [queueLimit]
 * @property {number} [trimLimit]
 * @property {number} [sessionLimit]
 * @property {number} [promptLimit]
 * @property {number} [statsMs]
 * @property {number} [coalesceMs]
 */
import net from "node:net"

import { PromptBook, SessionBook } from "./autoretry/books.js"
import { coalesceWindow, DeltaCoalescer } from "./autoretry/coalesce.js"
import { LineBuffer, QUEUE_LIMIT, SendQueue, WRITE_BATCH } from "./autoretry/framing.js"
import { applyPenalties, applyTrims, normalisePenalties, TrimBook } from "./autoretry/history.js"
import { chatMessageFields, isExecRun, markContinuation, pendingExecMarker, promptBody, trimEvent } from "./autoretry/messages.js"
import { backoffDelay, checkSocket, processListens, reconnectCap, socketPath } from "./autoretry/socket.js"
import {
  BRIDGE_VERSION, COMMAND_TIMEOUT_MS, encodeMessage, FORWARDED_EVENTS, LATE_REPLY_MS, MAX_LINE_BYTES, parseLine,
  REQUEST_TIMEOUT_MS,
} from "./autoretry/wire.js"

// Pure helpers live in ./autoretry/ (OpenCode loads only `plugins/*.js`, one level deep).
export * from "./autoretry/books.js"
export * from "./autoretry/coalesce.js"
export * from "./autoretry/framing.js"
export * from "./autoretry/history.js"
export * from "./autoretry/messages.js"
export * from "./autoretry/socket.js"
export * from "./autoretry/wire.js"

// AUTORETRY_BRIDGE_STATS_MS lets tests see stats without waiting 15 s.
/** @param {BridgeOptions} options */
function statsInterval(options, env = process.env) {
  const raw = Number(options.statsMs ?? env.AUTORETRY_BRIDGE_STATS_MS)
  return Number.isFinite(raw) && raw >= 100 ? raw : 15000
}

/** @template T @param {Promise<T>} promise @param {number} ms @param {string} what @returns {Promise<T>} */
function withTimeout(promise, ms, what) {
  let timer
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} timed out`)), ms)
    timer.unref?.()
  })
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer))
}

// Socket callbacks run outside any OpenCode try/catch: an exception there would crash it.
/** @template {unknown[]} A @param {(...args: A) => void} fn @returns {(...args: A) => void} */
function safe(fn) {
  return (...args) => {
    try {
      fn(...args)
    } catch {}
  }
}

/** @param {any} res an SDK result: `{data}` or `{error}` */
function sdkFailed(res) {
  return res && typeof res === "object" && res.error !== undefined && res.error !== null
}

export class Bridge {
  /** @param {PluginInput} input @param {BridgeOptions} [options] */
  constructor(input, options = {}) {
    /** @type {OpenCodeClient} */
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
    this.checkSocket = options.checkSocket ?? checkSocket // injectable: tests simulate another user
    /** @type {string | null} */
    this.refusal = null // the refusal last logged, so each is logged once
    this.queue = new SendQueue(options.queueLimit ?? QUEUE_LIMIT)
    /** @type {import("node:net").Socket | null} */
    this.socket = null
    this.connected = false // socket open: lines are queued
    this.ready = false // hello written first: lines are flushed
    this.attempt = 0
    this.reconnectCap = reconnectCap()
    this.connections = 0
    this.reconnects = 0
    this.sent = 0
    this.unknown = 0
    this.buffer = new LineBuffer(MAX_LINE_BYTES)
    /** @type {Map<string, (reply: ReplyMessage | null) => void>} */
    this.pending = new Map()
    /** @type {Set<(ok: boolean) => void>} */
    this.readyWaiters = new Set()
    this.nextCommand = 1
    this.closed = false
    this.flushPending = false
    /** @type {string | null} */
    this.version = null
    /** @type {ReturnType<typeof setTimeout> | null} */
    this.timer = null
    this.trims = new TrimBook(options.trimLimit)
    this.book = new SessionBook(options.sessionLimit) // what the hello names (issue 11)
    this.prompts = new PromptBook(options.promptLimit) // the continuations run here (issue 11)
    /** @type {Record<string, Record<string, number>>} */
    this.penalties = {}
    this.deltas = new DeltaCoalescer((event, t) => this.send("event", { t, event }, "delta"),
      coalesceWindow(options))
    this.statsTimer = setInterval(() => this.sendStats(), statsInterval(options))
    this.statsTimer.unref?.()
  }

  start() {
    this.connect()
    return this
  }

  connect() {
    if (this.closed || this.socket) return
    if (!this.socketIsSafe()) return this.scheduleReconnect()
    try {
      const socket = net.createConnection({ path: this.path })
      this.socket = socket
      socket.setEncoding("utf8")
      socket.on("connect", () => this.onConnect(socket))
      // setEncoding("utf8"): every chunk is a string
      socket.on("data", safe((/** @type {string} */ chunk) => this.onData(chunk)))
      socket.on("drain", safe(() => this.flush()))
      socket.on("error", () => {})
      socket.on("close", safe(() => this.onClose(socket)))
    } catch {
      this.socket = null
      this.scheduleReconnect()
    }
  }

  // Checked before every connect (see socket.js): a refusal is retried with the usual
  // backoff and logged once in OpenCode's log (never on the terminal); "absent" is just a
  // daemon that is not running.
  socketIsSafe() {
    const check = this.checkSocket(this.path)
    if (check.ok) {
      this.refusal = null
      return true
    }
    if (check.reason !== "absent" && check.message !== this.refusal) {
      this.refusal = check.message
      this.logQuietly("warn", `autoretry: not connecting to the daemon's socket: ${check.message}`)
    }
    return false
  }

  // Fire and forget: a log call must never throw into, or hold up, the connect path.
  /** @param {string} level @param {string} message */
  logQuietly(level, message) {
    try {
      Promise.resolve(this.client.app.log({ body: { service: "autoretry", level, message } })).catch(() => {})
    } catch {}
  }

  /** @param {import("node:net").Socket} socket */
  async onConnect(socket) {
    try {
      socket.unref?.() // an idle bridge must never keep `opencode run` alive
      this.connections += 1
      this.reconnects = this.connections - 1
      this.attempt = 0
      this.connected = true
      this.buffer = new LineBuffer(MAX_LINE_BYTES)
      const hello = { pid: process.pid, directory: this.directory, project: this.project,
        opencode: await this.opencodeVersion(), bridge: BRIDGE_VERSION, server_url: this.serverUrl(),
        exec: isExecRun(), sessions: this.book.toWire(), prompts: this.prompts.toWire() }
      if (this.socket !== socket) return
      this.queue.unshift(encodeMessage("hello", hello), "control")
      this.ready = true
      this.flush()
      this.wakeReadyWaiters(true)
    } catch {}
  }

  async opencodeVersion() {
    if (this.version) return this.version
    try {
      // The v1 SDK has no health(); its raw fetch client (`_client`) reaches the same app.
      /** @type {any} */ // an older SDK answered the body itself, without `data`
      const res = await withTimeout(this.client._client.get({ url: "/global/health" }), 1000, "health")
      const version = res?.data?.version ?? res?.version
      if (typeof version === "string") this.version = version
    } catch {}
    return this.version
  }

  /** @param {import("node:net").Socket} socket */
  onClose(socket) {
    if (this.socket !== socket) return
    this.socket = null
    this.connected = false
    this.ready = false
    this.queue.clear()
    this.deltas.drop()
    for (const [, waiter] of this.pending) waiter(null)
    this.pending.clear()
    this.wakeReadyWaiters(false)
    this.scheduleReconnect()
  }

  scheduleReconnect() {
    if (this.closed || this.timer) return
    const delay = backoffDelay(this.attempt, this.reconnectCap)
    this.attempt += 1
    this.timer = setTimeout(() => {
      this.timer = null
      this.connect()
    }, delay)
    this.timer.unref?.()
  }

  // Nothing is queued while disconnected: the daemon rebuilds its view from OpenCode's DB.
  /** @param {string} type @param {Record<string, unknown>} fields @param {LineKind} [kind] @returns {boolean} false: not sent */
  send(type, fields, kind = "control") {
    if (!this.connected) return false
    if (kind !== "delta") this.deltas.flush() // a held delta goes first: order is kept
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
        if (!item) break
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

  /** @param {string} chunk */
  onData(chunk) {
    if (this.closed) return // disposed: see endSocket
    const { lines, oversize } = this.buffer.feed(chunk)
    this.unknown += oversize
    for (const line of lines) this.handleLine(line)
  }

  /** @param {string} line */
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

  /** @param {WireMessage} msg a validated daemon line */
  async handle(msg) {
    if (msg.type === "welcome") return
    if (msg.type === "config") {
      this.penalties = normalisePenalties(msg.penalties)
      if (msg.id) this.ack(msg.id, true, null, { providers: Object.keys(this.penalties) })
      return
    }
    if (msg.type === "reply") {
      const waiter = this.pending.get(msg.id)
      if (waiter) waiter(/** @type {ReplyMessage} */ (msg))
      return
    }
    if (msg.type === "prompt" && !this.prompts.claim(msg)) {
      if (msg.id) this.ack(msg.id, true, null, { duplicate: true }) // it ran (or runs) already
      return
    }
    /** @type {Record<string, () => unknown>} */
    const runners = {
      prompt: () => this.doPrompt(/** @type {PromptRequest} */ (msg)),
      abort: () => this.client.session.abort({ path: { id: msg.session_id } }),
      toast: () => this.toast(msg),
      trim: () => this.addTrim(msg),
      log: () => this.client.app.log({ body: { service: "autoretry", level: msg.level, message: msg.message, extra: msg.extra ?? {} } }),
    }
    // Own keys only: a type like "constructor" must not find Object.prototype (found by fuzzing).
    const run = Object.hasOwn(runners, msg.type) ? runners[msg.type] : undefined
    if (!run) {
      this.unknown += 1
      if (msg.id) this.ack(msg.id, false, `unsupported request: ${msg.type}`)
      return
    }
    try {
      /** @type {any} */
      const res = await withTimeout(Promise.resolve(run()), REQUEST_TIMEOUT_MS, msg.type)
      if (sdkFailed(res)) throw new Error(describeError(res.error))
      if (msg.id) this.ack(msg.id, true, null, res?.result ?? null)
    } catch (/** @type {any} */ err) {
      if (msg.id) this.ack(msg.id, false, String(err?.message ?? err))
    }
  }

  /** @param {WireMessage} msg */
  addTrim(msg) {
    if (!this.trims.add(msg)) throw new Error("bad trim")
    return { result: { trims: this.trims.size } }
  }

  /**
   * @param {string} id @param {boolean} ok @param {string | null} error
   * @param {Record<string, unknown> | null} [result]
   */
  ack(id, ok, error, result = null) {
    this.send("ack", { id, ok, error, result })
  }

  /** @param {WireMessage} msg */
  toast(msg) {
    return this.client.tui.showToast({ body: { title: msg.title ?? "autoretry", message: msg.message,
      variant: msg.variant ?? "info", duration: msg.duration ?? undefined } })
  }

  // Fail-closed gate: re-read the session right before prompting; unknown means no.
  /** @param {PromptRequest} msg */
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

  /** @param {BusEvent} event */
  forwardEvent(event) {
    try {
      this.book.note(event) // connected or not: the next hello says what happened meanwhile
    } catch {}
    if (!event || !FORWARDED_EVENTS.has(event.type)) return
    const t = Date.now()
    if (event.type === "message.part.delta") {
      if (this.connected && this.deltas.add(event, t)) return
      this.send("event", { t, event }, "delta")
      return
    }
    this.send("event", { t, event: trimEvent(event) }, "event")
  }

  // Asks the daemon about "/autoretry ..."; resolves to the reply, or null (down / timeout).
  // A reply that comes after the command's wait is handed to `onLate` (a daemon loop held up
  // on a loaded machine still carries the command out: the user is told what it did).
  // A command typed while the first connection is still being made (OpenCode just started)
  // waits for it: the daemon is not "down" then.
  /**
   * @param {{ sessionID?: string, arguments?: string }} input the command hook's input
   * @param {((reply: ReplyMessage) => void) | null} [onLate]
   * @returns {Promise<ReplyMessage | null>}
   */
  async askCommand(input, onLate = null) {
    if (!(await this.whenReady(COMMAND_TIMEOUT_MS))) return null
    const id = `c-${process.pid}-${this.nextCommand++}`
    return new Promise((resolve) => {
      let waiting = true
      const forget = () => {
        clearTimeout(timer)
        this.pending.delete(id)
      }
      let timer = setTimeout(() => {
        waiting = false
        resolve(null)
        if (!onLate) return forget()
        timer = setTimeout(forget, LATE_REPLY_MS) // the late reply's own wait, cleared by it
        timer.unref?.()
      }, COMMAND_TIMEOUT_MS)
      timer.unref?.()
      const finish = (reply) => {
        forget()
        if (waiting) resolve(reply)
        else if (reply && onLate) onLate(reply)
      }
      this.pending.set(id, finish)
      if (!this.send("command", { id, session_id: input?.sessionID ?? null, name: "autoretry", arguments: String(input?.arguments ?? "") }))
        finish(null)
    })
  }

  // True once the hello is queued; false at once when no connection attempt is in flight,
  // or when the one in flight fails or takes longer than `ms`.
  /** @param {number} ms @returns {Promise<boolean>} */
  whenReady(ms) {
    if (this.ready) return Promise.resolve(true)
    if (!this.socket) return Promise.resolve(false)
    return new Promise((resolve) => {
      const done = (ok) => {
        clearTimeout(timer)
        this.readyWaiters.delete(done)
        resolve(ok)
      }
      const timer = setTimeout(() => done(false), ms)
      timer.unref?.()
      this.readyWaiters.add(done)
    })
  }

  /** @param {boolean} ok */
  wakeReadyWaiters(ok) {
    for (const waiter of [...this.readyWaiters]) waiter(ok)
  }

  close() {
    this.closed = true
    this.wakeReadyWaiters(false)
    clearInterval(this.statsTimer)
    if (this.timer) clearTimeout(this.timer)
    this.endSocket()
    this.socket = null
    this.connected = false
    this.ready = false
  }

  // `opencode run` disposes its plugins as soon as its session has ended, then exits: the
  // lines still queued (that very end: the idle status, the session's error) are written now,
  // and end() lets the written ones reach the daemon, where destroy() dropped them (a CI
  // run's daemon never saw a headless run's failure). Nothing is read after this
  // (`onData`): a shutting-down OpenCode takes no prompt.
  endSocket() {
    const socket = this.socket
    if (!socket) return
    try {
      if (!this.ready) { // no hello written: nothing of ours to deliver
        socket.destroy()
        return
      }
      this.deltas.flush()
      this.flush()
      socket.end()
    } catch {
      socket.destroy()
    }
  }
}

/** @param {any} error an SDK error: a string, or `{data: {message}}`, `{message}`, `{name}` */
function describeError(error) {
  if (typeof error === "string") return error
  return String(error?.data?.message ?? error?.message ?? error?.name ?? JSON.stringify(error))
}

// `autoretry start` whatever runs the daemon (systemd, launchd or a detached process; issue 24):
// `autoretry run` in a shell would hold that shell and die with it.
export const DAEMON_DOWN_MESSAGE = "autoretry daemon is not running: start it with `autoretry start` in a shell (`autoretry doctor` checks the set-up)."
export const HANDLED_MESSAGE = "autoretry: command handled by the autoretry plugin (no model call)"

export const SLOW_DAEMON_MESSAGE = "autoretry: the daemon has not answered yet; its answer follows"

/** @param {Bridge} bridge @param {{ sessionID?: string, arguments?: string }} input */
async function handleAutoretryCommand(bridge, input) {
  const show = (body) => withTimeout(bridge.client.tui.showToast({ body }), 2000, "toast").catch(() => {})
  const asReply = (reply) => ({ title: reply.title ?? "autoretry", message: reply.message, variant: reply.variant ?? "info" })
  let reply = null
  try {
    reply = await bridge.askCommand(input, (late) => show(asReply(late)))
  } catch {}
  if (reply) return show(asReply(reply))
  const message = bridge.connected ? SLOW_DAEMON_MESSAGE : DAEMON_DOWN_MESSAGE
  return show({ title: "autoretry", message, variant: "warning" })
}

/** @param {PluginInput} input */
export const AutoretryBridge = async (input) => {
  let bridge = null
  try {
    bridge = new Bridge(input).start()
  } catch {
    return {}
  }
  const execMarker = pendingExecMarker()
  return {
    event: async ({ event }) => {
      try {
        bridge.forwardEvent(event)
      } catch {}
    },
    "chat.message": async (hookInput, output) => {
      try {
        markContinuation(hookInput, output, execMarker)
      } catch {}
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
    // Runs before every LLM step; the DB (and so the TUI) keeps the full text.
    "experimental.chat.messages.transform": async (_hookInput, output) => {
      try {
        applyTrims(output?.messages, bridge.trims)
      } catch {}
    },
    "chat.params": async (hookInput, output) => {
      try {
        applyPenalties(hookInput, output, bridge.penalties)
      } catch {}
    },
    dispose: async () => {
      try {
        bridge.close()
      } catch {}
    },
  }
}

export default { id: "opencode-autoretry", server: AutoretryBridge }
