// opencode-autoretry bridge: line framing and the bounded send queue.
//
// Pure helpers, imported only by `plugins/autoretry.js` (OpenCode 1.18 loads only
// `{plugin,plugins}/*.{ts,js}`, one level deep: files in `plugins/autoretry/` are never loaded
// as plugins).
// @ts-check

export const QUEUE_LIMIT = 8 * 1024 * 1024 // chars of queued lines (~8 MB)
export const WRITE_BATCH = 256 * 1024 // chars per socket write

// Cuts the daemon's stream into lines (mirrors the daemon's LineSplitter). A line longer than
// `max` chars is dropped whole and counted once: its tail up to the newline is skipped, not
// parsed as a line of its own (found by fuzzing: one oversized line counted twice).
export class LineBuffer {
  /** @param {number} max the longest line kept, in chars */
  constructor(max) {
    this.max = max
    this.buffer = ""
    this.skipping = false
  }

  /** @param {string} chunk @returns {{ lines: string[], oversize: number }} */
  feed(chunk) {
    const parts = (this.buffer + chunk).split("\n")
    this.buffer = parts.pop() ?? ""
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

// Bounded FIFO of encoded lines (by size, in UTF-16 units ~ bytes): when full, drop the
// oldest delta, then the oldest event; control lines (hello, acks, commands) go last.
/** @typedef {"control" | "event" | "delta"} LineKind what may be dropped first: delta, then event */
/** @typedef {{ line: string, kind: LineKind }} QueueItem */

export class SendQueue {
  constructor(limit = QUEUE_LIMIT) {
    this.limit = limit
    /** @type {QueueItem[]} */
    this.items = []
    this.size = 0
    this.dropped = 0
  }
  /** @param {string} line @param {LineKind} kind @returns {boolean} false: dropped */
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
  /** @param {string} line @param {LineKind} kind */
  unshift(line, kind) {
    this.items.unshift({ line, kind })
    this.size += line.length
  }
  /** @param {LineKind} incoming @returns {boolean} true when room was made */
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
  /** @returns {QueueItem | undefined} */
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
