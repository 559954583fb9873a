// opencode-autoretry bridge: what the model is sent (history trims, sampling penalties).
//
// Pure helpers, imported only by `plugins/autoretry.js` (OpenCode does not load subfolders of
// `plugins/` as plugins). "Truncate the history, not the screen": when the daemon stops a
// looping stream it sends a trim; on every later step `experimental.chat.messages.transform`
// cuts that part down to the loop's first copy in what the provider receives, while OpenCode's
// DB, and so the TUI, keep the full text.
// @ts-check

/** @typedef {Record<string, Record<string, number>>} Penalties provider id ("*" = any) -> options */
/** @typedef {{ message_id: string, keep_chars: number, excerpt: string | null }} Trim */

export const TRIM_NOTICE = "[autoretry: repeated text trimmed]" // = repetition.TRIM_NOTICE
export const TRIM_LIMIT = 2000 // trims remembered; the daemon re-sends its recent ones on hello
export const CUT_SLACK = 256 // how far before keep_chars the excerpt is searched for
export const PENALTY_KEYS = new Set(["frequency_penalty", "presence_penalty", "repetition_penalty"])

// Trims by part id (part ids are unique across sessions); the oldest is dropped past the limit.
export class TrimBook {
  constructor(limit = TRIM_LIMIT) {
    this.limit = limit
    /** @type {Map<string, Trim>} */
    this.parts = new Map()
  }
  /** @param {any} trim a `trim` line @returns {boolean} false: malformed, ignored */
  add(trim) {
    if (!trim || typeof trim.part_id !== "string" || !Number.isInteger(trim.keep_chars) || trim.keep_chars < 0)
      return false
    this.parts.delete(trim.part_id)
    this.parts.set(trim.part_id, {
      message_id: trim.message_id, keep_chars: trim.keep_chars,
      excerpt: typeof trim.excerpt === "string" ? trim.excerpt : null,
    })
    // size > limit: there is an oldest key
    while (this.parts.size > this.limit) this.parts.delete(/** @type {string} */ (this.parts.keys().next().value))
    return true
  }
  /** @param {string} partId */
  get(partId) {
    return this.parts.get(partId)
  }
  get size() {
    return this.parts.size
  }
}

// Where to cut: keep_chars when the excerpt (the repeated block ending there) is found right
// before it; else just after the excerpt's first copy near it (the stored text may differ from
// the streamed one by a few chars); else keep_chars as sent.
/** @param {string} text @param {number} keep @param {string | null} excerpt */
export function cutPoint(text, keep, excerpt) {
  if (!excerpt) return keep
  if (keep >= excerpt.length && text.slice(keep - excerpt.length, keep) === excerpt) return keep
  const found = text.indexOf(excerpt, Math.max(0, keep - excerpt.length - CUT_SLACK))
  return found >= 0 ? found + excerpt.length : keep
}

/** @param {unknown} text @param {Trim} trim */
export function trimText(text, trim) {
  if (typeof text !== "string") return text
  const cut = cutPoint(text, trim.keep_chars, trim.excerpt)
  if (cut >= text.length) return text
  const kept = text.slice(0, cut)
  const separator = kept === "" || /[\n ]$/.test(kept) ? "" : " "
  return `${kept}${separator}${TRIM_NOTICE}`
}

// Mutates `messages` ([{info, parts}]) by replacing trimmed parts with shortened copies (the
// part objects themselves are never changed). Returns how many parts were trimmed.
/** @param {any} messages @param {TrimBook} book */
export function applyTrims(messages, book) {
  if (!Array.isArray(messages) || book.size === 0) return 0
  let trimmed = 0
  for (const message of messages) {
    const parts = message?.parts
    if (!Array.isArray(parts)) continue
    for (let i = 0; i < parts.length; i++) {
      const part = parts[i]
      const trim = part && typeof part.id === "string" ? book.get(part.id) : undefined
      if (!trim || (part.type !== "text" && part.type !== "reasoning")) continue
      const text = trimText(part.text, trim)
      if (text === part.text) continue
      parts[i] = { ...part, text }
      trimmed += 1
    }
  }
  return trimmed
}

// {provider: {frequency_penalty: 0.3, ...}} -> only known keys with finite numbers; "*" = any.
/** @param {any} raw @returns {Penalties} */
export function normalisePenalties(raw) {
  /** @type {Penalties} */
  const out = {}
  if (!raw || typeof raw !== "object") return out
  for (const [provider, values] of Object.entries(raw)) {
    if (!values || typeof values !== "object") continue
    const kept = Object.fromEntries(
      Object.entries(values).filter(([k, v]) => PENALTY_KEYS.has(k) && typeof v === "number" && Number.isFinite(v)))
    if (Object.keys(kept).length > 0) out[provider] = kept
  }
  return out
}

// chat.params: `output.options` become the provider options of the call; an OpenAI-compatible
// provider passes unknown keys through into the request body. What the user configured in
// OpenCode itself wins: a key already set is left alone. Returns the keys added.
/** @param {any} input @param {any} output @param {Penalties} penalties @returns {string[]} */
export function applyPenalties(input, output, penalties) {
  const provider = input?.model?.providerID ?? input?.provider?.info?.id ?? input?.provider?.id
  const wanted = (typeof provider === "string" && penalties[provider]) || penalties["*"]
  if (!wanted || !output || typeof output !== "object") return []
  if (!output.options || typeof output.options !== "object") output.options = {}
  /** @type {string[]} */
  const added = []
  for (const [key, value] of Object.entries(wanted)) {
    if (output.options[key] !== undefined) continue
    output.options[key] = value
    added.push(key)
  }
  return added
}
