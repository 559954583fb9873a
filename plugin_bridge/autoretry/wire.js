// opencode-autoretry bridge: the wire format (protocol table, validation, line encoding).
//
// Pure helpers, imported only by `plugins/autoretry.js` (OpenCode 1.18 loads only
// `{plugin,plugins}/*.{ts,js}`, one level deep: files in `plugins/autoretry/` are never loaded
// as plugins).
// @ts-check

/** @typedef {import("./types.js").WireMessage} WireMessage */

export const PROTOCOL_VERSION = 1
export const BRIDGE_VERSION = "0.1.0"
export const MAX_LINE_BYTES = 1024 * 1024
export const COMMAND_TIMEOUT_MS = 1000 // the command waits this long for the daemon's reply
export const LATE_REPLY_MS = 30000 // a reply after that is still toasted, until this long
export const REQUEST_TIMEOUT_MS = 10000
export const FORWARDED_EVENTS = new Set([
  "session.status", "session.idle", "session.error", "session.created", "session.updated",
  "session.deleted", "message.updated", "message.part.updated", "message.part.delta",
  "permission.asked", "permission.replied", "command.executed", "todo.updated",
  "session.compacted", "question.asked", "question.replied", "question.rejected",
])

// Same table as plugin_bridge/protocol.py SCHEMA ("?" = optional / nullable).
/** @type {Record<string, Record<string, string>>} */
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
  /** @param {string} reason a stable code (bad_json, too_long, ...) @param {string} detail */
  constructor(reason, detail) {
    super(`${reason}: ${detail}`)
    this.reason = reason
  }
}

/** @param {string} kind @param {unknown} value */
function kindOk(kind, value) {
  if (kind === "str") return typeof value === "string"
  if (kind === "int") return Number.isInteger(value)
  if (kind === "num") return typeof value === "number" && Number.isFinite(value)
  if (kind === "bool") return typeof value === "boolean"
  return value !== null && typeof value === "object" && !Array.isArray(value)
}

/** @param {any} obj @returns {WireMessage} */
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

/** @param {string} line one line, without its newline @returns {WireMessage} */
export function parseLine(line) {
  if (Buffer.byteLength(line, "utf8") > MAX_LINE_BYTES) throw new ProtocolError("too_long", "line over 1 MiB")
  let obj
  try {
    obj = JSON.parse(line)
  } catch (/** @type {any} */ err) {
    throw new ProtocolError("bad_json", String(err?.message ?? err))
  }
  return validate(obj)
}

/** @param {string} type @param {Record<string, unknown>} fields @returns {string} the line, newline included */
export function encodeMessage(type, fields) {
  return JSON.stringify({ v: PROTOCOL_VERSION, type, ...fields }) + "\n"
}
