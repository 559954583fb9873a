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
// writes/s, each waking a daemon thread).
//
// With many sessions streaming at once, one line per session per window still adds up (20
// sessions: ~400 lines/s, each costing the daemon a decode and a hand-over), so the window
// widens to keep the lines of all sessions near `COALESCE_LINES_PER_S`: the next window is
// as long as the lines the last one sent need at that rate, between `windowMs` and
// `COALESCE_WIDEST` times it. Up to 5 streaming sessions (every single stream, so what the
// repetition guard's catch distance was measured on) keep `windowMs` exactly; 10 get 2x, 20
// or more 4x. A delta waits at most `COALESCE_WIDEST * windowMs`; any other line still
// flushes at once, so a turn's end or error is never held (issue 21). The daemon's CPU
// follows these lines: 100 lines/s instead of 200 took it from 1.13 to 0.82 % of a core with
// 20 sessions streaming (bench/README.md, "Fewer lines with many streams").
export const COALESCE_MS = 50
export const COALESCE_MAX_CHARS = 1024
export const COALESCE_LINES_PER_S = 100
export const COALESCE_WIDEST = 4

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
    this.lines = 0 // lines the current window will send (held deltas started in it)
    this.nextWindowMs = windowMs // the next window's length, from the lines of the last one
  }

  // A window long enough for `lines` lines at COALESCE_LINES_PER_S, within its bounds.
  widen(lines) {
    const wanted = (lines * 1000) / COALESCE_LINES_PER_S
    return Math.min(this.windowMs * COALESCE_WIDEST, Math.max(this.windowMs, wanted))
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
    this.lines += 1
    if (this.timer === null) {
      this.timer = this.timers.setTimeout(() => this.endWindow(), this.nextWindowMs)
      this.timer?.unref?.()
    }
    return true
  }

  // The window's timer fired: what it held goes out, and its lines size the next window. An
  // early flush (another line) leaves the next window as it was: it saw only part of one.
  endWindow() {
    this.nextWindowMs = this.widen(this.lines)
    this.flush()
  }

  release(session, held) {
    this.held.delete(session)
    this.emit(held.event, held.t)
  }

  // Sends every held delta now (oldest first) and stops the window's timer.
  flush() {
    if (this.timer !== null) this.timers.clearTimeout(this.timer)
    this.timer = null
    this.lines = 0
    const held = [...this.held.values()]
    this.held.clear()
    for (const item of held) this.emit(item.event, item.t)
  }

  // The connection is gone: nothing is queued while disconnected, held deltas neither.
  drop() {
    if (this.timer !== null) this.timers.clearTimeout(this.timer)
    this.timer = null
    this.lines = 0
    this.held.clear()
  }
}
