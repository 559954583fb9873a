// opencode-autoretry bridge: text deltas joined per part for a few ms.
//
// Pure helpers, imported only by `plugins/autoretry.js` (OpenCode 1.18 loads only
// `{plugin,plugins}/*.{ts,js}`, one level deep: files in `plugins/autoretry/` are never loaded
// as plugins).
// @ts-check

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
