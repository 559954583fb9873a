// opencode-autoretry bridge: what is sent to the daemon (events, chat messages) and what is
// prompted (prompt bodies, the marker of an `autoretry exec` continuation).
//
// Pure helpers, imported only by `plugins/autoretry.js` (OpenCode 1.18 loads only
// `{plugin,plugins}/*.{ts,js}`, one level deep: files in `plugins/autoretry/` are never loaded
// as plugins).
// @ts-check

export const TOOL_OUTPUT_KEEP = 2000
export const TEXT_KEEP = 500

/** @template T @param {T} text @param {number} keep @returns {T | string} */
function cut(text, keep) {
  if (typeof text !== "string" || text.length <= keep) return text
  return `${text.slice(0, keep)}…[autoretry trimmed ${text.length - keep} chars]`
}

// Tool outputs can be megabytes; the daemon needs their state, not their bytes.
/** @param {import("./types.js").BusEvent} event */
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

/**
 * The `chat.message` line's fields, from the hook's input and output.
 * @param {any} input @param {any} output @param {number} [now]
 */
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

/** @param {import("./types.js").PromptRequest} req @returns {import("./types.js").PromptBody} */
export function promptBody(req) {
  const marker = req.marker && typeof req.marker === "object" ? req.marker : {}
  /** @type {import("./types.js").PromptBody} */
  const body = { parts: [{ type: "text", text: req.text, metadata: { autoretry: marker } }] }
  if (req.agent) body.agent = req.agent
  if (req.model) body.model = req.model
  if (req.variant) body.variant = req.variant
  return body
}

// `autoretry exec` runs `opencode run` with AUTORETRY_EXEC=1 (the daemon leaves such a
// process's sessions to exec). For a continuation it also sets AUTORETRY_EXEC_SESSION and
// AUTORETRY_EXEC_MARKER (the injection's marker as JSON): `opencode run` has no way to put
// metadata on the message it sends, so the bridge adds the marker in `chat.message` (which
// runs before OpenCode saves the message). Stored in the DB like a daemon injection's marker,
// it keeps the continuation a follow-up of the same user turn: budgets are not reset.

/** @param {Record<string, string | undefined>} [env] */
export function isExecRun(env = process.env) {
  return env?.AUTORETRY_EXEC === "1"
}

// The marker this process must put on its continuation, or null.
/** @typedef {{ session: string, marker: Record<string, unknown>, used?: boolean }} ExecMarker */

/** @param {Record<string, string | undefined>} [env] @returns {ExecMarker | null} */
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
/** @param {any} hookInput @param {any} output @param {ExecMarker | null} pending */
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
