// opencode-autoretry bridge: what the hello says (sessions seen, continuations run).
//
// Pure helpers, imported only by `plugins/autoretry.js` (OpenCode 1.18 loads only
// `{plugin,plugins}/*.{ts,js}`, one level deep: files in `plugins/autoretry/` are never loaded
// as plugins).
// @ts-check

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

  // True when the prompt may run: the first time its injection id is seen for its session, or
  // unmarked. The id alone is not enough: a daemon whose store was made anew (a wiped state
  // directory) counts its injections from 1 again, for other sessions, while this process still
  // remembers the old ones; the newer claim replaces the older.
  claim(msg) {
    const id = msg?.marker?.injection
    if (typeof id !== "string" || !id) return true
    const session = String(msg.session_id)
    if (this.ids.get(id) === session) return false
    this.ids.delete(id) // set again below: the newest, last to be dropped
    this.ids.set(id, session)
    while (this.ids.size > this.limit) this.ids.delete(this.ids.keys().next().value)
    return true
  }

  toWire() {
    return Object.fromEntries(this.ids)
  }
}
