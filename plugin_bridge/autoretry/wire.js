// opencode-autoretry bridge: wire helpers (protocol table, event trimming, queue).
//
// Pure helpers of the bridge plugin, kept apart so the plugin file stays small. OpenCode 1.18
// loads only `{plugin,plugins}/*.{ts,js}` (one level, no subfolders) as plugins, so this file,
// installed as `plugins/autoretry/wire.js`, is only ever imported by `plugins/autoretry.js`.
export const PROTOCOL_VERSION = 1
export const BRIDGE_VERSION = "0.1.0"
export const MAX_LINE_BYTES = 1024 * 1024
export const QUEUE_LIMIT = 8 * 1024 * 1024 // chars of queued lines (~8 MB)
export const TOOL_OUTPUT_KEEP = 2000
export const TEXT_KEEP = 500
export const WRITE_BATCH = 256 * 1024 // chars per socket write
export const COMMAND_TIMEOUT_MS = 1000 // the command waits this long for the daemon's reply
export const LATE_REPLY_MS = 30000 // a reply after that is still toasted, until this long
export const REQUEST_TIMEOUT_MS = 10000
export const FORWARDED_EVENTS = new Set([
  "session.status", "session.idle", "session.error", "session.created", "session.updated",
  "session.deleted", "message.updated", "message.part.updated", "message.part.delta",
  "permission.asked", "permission.replied", "command.executed", "todo.updated",
  "session.compacted",
])

// Same table as plugin_bridge/protocol.py SCHEMA ("?" = optional / nullable).
export const SCHEMA = {
  hello: { pid: "int", directory: "str", project: "str?", opencode: "str?", bridge: "str?", server_url: "str?", exec: "bool?", sessions: "obj?", prompts: "obj?" },
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
  trim: { id: "str?", session_id: "str", message_id: "str", part_id: "str", keep_chars: "int", excerpt: "str?" },
  config: { id: "str?", penalties: "obj?" },
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
// Cuts the daemon's stream into lines (mirrors the daemon's LineSplitter). A line longer than
// `max` chars is dropped whole and counted once: its tail up to the newline is skipped, not
// parsed as a line of its own (found by fuzzing: one oversized line counted twice).
export class LineBuffer {
  constructor(max) {
    this.max = max
    this.buffer = ""
    this.skipping = false
  }

  feed(chunk) {
    const parts = (this.buffer + chunk).split("\n")
    this.buffer = parts.pop()
    const lines = []
    let oversize = 0
    for (const line of parts) {
      if (this.skipping) this.skipping = false
      else if (line.length > this.max) oversize += 1
      else if (line.trim()) lines.push(line)
    }
    if (this.buffer.length > this.max) {
      if (!this.skipping) oversize += 1
      this.skipping = true
      this.buffer = ""
    }
    return { lines, oversize }
  }
}

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

// `autoretry exec` runs `opencode run` with AUTORETRY_EXEC=1 (the daemon leaves such a
// process's sessions to exec). For a continuation it also sets AUTORETRY_EXEC_SESSION and
// AUTORETRY_EXEC_MARKER (the injection's marker as JSON): `opencode run` has no way to put
// metadata on the message it sends, so the bridge adds the marker in `chat.message` (which
// runs before OpenCode saves the message). Stored in the DB like a daemon injection's marker,
// it keeps the continuation a follow-up of the same user turn: budgets are not reset.

export function isExecRun(env = process.env) {
  return env?.AUTORETRY_EXEC === "1"
}

// The marker this process must put on its continuation, or null.
export function pendingExecMarker(env = process.env) {
  if (!isExecRun(env) || !env.AUTORETRY_EXEC_SESSION || !env.AUTORETRY_EXEC_MARKER) return null
  try {
    const marker = JSON.parse(env.AUTORETRY_EXEC_MARKER)
    if (!marker || typeof marker !== "object" || Array.isArray(marker)) return null
    return { session: String(env.AUTORETRY_EXEC_SESSION), marker }
  } catch {
    return null
  }
}

// Marks the first text part of a user message of the pending session; true when it did.
// `pending.used` makes it once per process: a run sends exactly one message.
export function markContinuation(hookInput, output, pending) {
  if (!pending || pending.used) return false
  const session = hookInput?.sessionID ?? output?.message?.sessionID
  if (session !== pending.session) return false
  const parts = Array.isArray(output?.parts) ? output.parts : []
  const text = parts.find((p) => p?.type === "text")
  if (!text || text.synthetic) return false
  const metadata = text.metadata && typeof text.metadata === "object" ? text.metadata : {}
  if (metadata.autoretry) return false
  text.metadata = { ...metadata, autoretry: pending.marker }
  pending.used = true
  return true
}

// Text deltas arrive one token at a time (tens per second per stream); every line costs the
// daemon a JSON decode, a dataclass and a queue hop, whatever its length. So the deltas of one
// part are held for at most `windowMs` and sent as one delta with the texts joined: the daemon
// sees the same characters in the same order, a few ms later. Anything else that is sent
// flushes the held deltas first, so the order of lines never changes within a session.
//
// One delta is held per session (a session streams one part at a time; another part of the
// same session flushes the held one first), and one timer serves them all: when it fires,
// every held delta is sent in the same tick, so the bridge writes them in one socket write and
// the daemon reads them with one recv (with 20 sessions streaming, a timer per part meant ~400
// writes/s, each waking a daemon thread). No delta waits longer than `windowMs` either way.
export const COALESCE_MS = 50
export const COALESCE_MAX_CHARS = 1024

export function coalesceWindow(options = {}, env = process.env) {
  const raw = Number(options.coalesceMs ?? env.AUTORETRY_BRIDGE_COALESCE_MS ?? COALESCE_MS)
  return Number.isFinite(raw) && raw >= 0 ? Math.min(raw, 1000) : COALESCE_MS
}

function deltaKey(props) {
  return `${props?.sessionID}\u0000${props?.messageID}\u0000${props?.partID}\u0000${props?.field}`
}

export class DeltaCoalescer {
  constructor(emit, windowMs = COALESCE_MS, maxChars = COALESCE_MAX_CHARS, timers = globalThis) {
    this.emit = emit // (event, t) => void
    this.windowMs = windowMs
    this.maxChars = maxChars
    this.timers = timers
    this.held = new Map() // session id -> { key, event, t }, in the order they were first held
    this.timer = null // the one window timer, running while anything is held
    this.joined = 0 // deltas folded into an earlier one (stats)
  }

  // True when the delta is held (it goes out with the next flush); false: send it yourself.
  add(event, t) {
    const delta = event?.properties?.delta
    if (this.windowMs <= 0 || typeof delta !== "string") return false
    const key = deltaKey(event.properties)
    const session = String(event.properties.sessionID)
    const held = this.held.get(session)
    if (held && held.key === key && held.event.properties.delta.length + delta.length <= this.maxChars) {
      held.event.properties.delta += delta
      this.joined += 1
      return true
    }
    if (held) this.release(session, held)
    this.held.set(session, { key, t, event: { ...event, properties: { ...event.properties } } })
    if (this.timer === null) {
      this.timer = this.timers.setTimeout(() => this.flush(), this.windowMs)
      this.timer?.unref?.()
    }
    return true
  }

  release(session, held) {
    this.held.delete(session)
    this.emit(held.event, held.t)
  }

  // Sends every held delta now (oldest first) and stops the window's timer.
  flush() {
    if (this.timer !== null) this.timers.clearTimeout(this.timer)
    this.timer = null
    const held = [...this.held.values()]
    this.held.clear()
    for (const item of held) this.emit(item.event, item.t)
  }

  // The connection is gone: nothing is queued while disconnected, held deltas neither.
  drop() {
    if (this.timer !== null) this.timers.clearTimeout(this.timer)
    this.timer = null
    this.held.clear()
  }
}

// The sessions this process has seen events for, least recent first, with what OpenCode's DB
// does not say: busy / retry / idle and the permission and question asks still open. The hello
// names them (`sessions`), so a daemon that restarted, or lost this connection, knows whose
// they are, and that a session waiting on the user is not idle (issue 11). Events are noted
// whether or not the daemon is connected: what happened while it was away is the point.
// Bounded: a long-lived `opencode serve` may see thousands of sessions, but the daemon looks
// back 15 minutes at most (gap.MAX_AGE) and no process a person drives touches 256 sessions in
// that time; 256 entries keep the hello a few tens of KB, far under MAX_LINE_BYTES.
export const SESSION_BOOK_LIMIT = 256
export const ASKS_LIMIT = 8 // per session and kind; OpenCode asks one at a time

function bookSessionId(props) {
  for (const source of [props, props?.info, props?.part]) {
    const id = source?.sessionID
    if (typeof id === "string" && id.startsWith("ses_")) return id
  }
  return null
}

function noteAsk(list, id, open) {
  if (typeof id !== "string" || !id) return
  const at = list.indexOf(id)
  if (at >= 0) list.splice(at, 1)
  if (open) list.push(id)
  if (list.length > ASKS_LIMIT) list.shift()
}

export class SessionBook {
  constructor(limit = SESSION_BOOK_LIMIT) {
    this.limit = limit
    this.entries = new Map() // session id -> { status, next, permissions, questions }
  }

  note(event) {
    const props = event?.properties
    const id = bookSessionId(props)
    if (!id) return
    if (event.type === "session.deleted") {
      this.entries.delete(id)
      return
    }
    const entry = this.entries.get(id) ?? { status: null, next: null, permissions: [], questions: [] }
    this.entries.delete(id) // re-inserted: the most recent last
    this.entries.set(id, entry)
    this.apply(entry, event.type, props)
    while (this.entries.size > this.limit) this.entries.delete(this.entries.keys().next().value)
  }

  apply(entry, type, props) {
    const status = type === "session.idle" ? "idle" : type === "session.status" ? props?.status?.type : undefined
    if (status === "busy" || status === "retry" || status === "idle") {
      entry.status = status
      entry.next = status === "retry" && Number.isInteger(props.status.next) ? props.status.next : null
      // OpenCode keeps a session busy while it waits on the user: idle means nothing is asked.
      if (status === "idle") entry.permissions = entry.questions = []
    } else if (type === "permission.asked" || type === "permission.replied") {
      noteAsk(entry.permissions, type.endsWith("asked") ? (props.id ?? props.requestID) : (props.requestID ?? props.id), type.endsWith("asked"))
    } else if (type === "question.asked" || type === "question.replied" || type === "question.rejected") {
      noteAsk(entry.questions, type.endsWith("asked") ? (props.id ?? props.requestID) : (props.requestID ?? props.id), type.endsWith("asked"))
    }
  }

  // The hello's `sessions` field: { id: {status, next?, permissions?, questions?} }, oldest first.
  toWire() {
    const wire = {}
    for (const [id, e] of this.entries) {
      const item = { status: e.status }
      if (e.next !== null) item.next = e.next
      if (e.permissions.length) item.permissions = [...e.permissions]
      if (e.questions.length) item.questions = [...e.questions]
      wire[id] = item
    }
    return wire
  }
}

// The marked continuations this process was asked to run, by injection id (the marker's), with
// their session. A cut socket can lose a prompt line after the daemon wrote it, or the ack of
// one this process ran: the hello names the ones it ran (`prompts`), so the daemon sends again
// only what never arrived, and a copy of one that did is refused here, never run twice
// (issue 11). Claimed when the line is read, before the first await: a copy read while the
// first still runs is refused too.
export const PROMPT_BOOK_LIMIT = 256 // = protocol.HELLO_PROMPTS

export class PromptBook {
  constructor(limit = PROMPT_BOOK_LIMIT) {
    this.limit = limit
    this.ids = new Map() // injection id -> session id, oldest first
  }

  // True when the prompt may run: the first time its injection id is seen, or unmarked.
  claim(msg) {
    const id = msg?.marker?.injection
    if (typeof id !== "string" || !id) return true
    if (this.ids.has(id)) return false
    this.ids.set(id, String(msg.session_id))
    while (this.ids.size > this.limit) this.ids.delete(this.ids.keys().next().value)
    return true
  }

  toWire() {
    return Object.fromEntries(this.ids)
  }
}
