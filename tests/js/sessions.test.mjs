// The bridge's session book: what its hello names after a daemon restart or a cut (issue 11).
import assert from "node:assert/strict"
import fs from "node:fs"
import net from "node:net"
import os from "node:os"
import path from "node:path"
import { after, test } from "node:test"

import { ASKS_LIMIT, Bridge, encodeMessage, parseLine, SessionBook } from "../../plugin_bridge/autoretry.js"

const status = (id, type, extra = {}) => ({ type: "session.status", properties: { sessionID: id, status: { type, ...extra } } })
const ask = (kind, id, requestId) => ({ type: `${kind}.asked`, properties: { id: requestId, sessionID: id } })
const reply = (kind, id, requestId) => ({ type: `${kind}.replied`, properties: { requestID: requestId, sessionID: id } })

test("the book keeps each session's status and the asks still open", () => {
  const book = new SessionBook()
  book.note(status("ses_a", "busy"))
  book.note(ask("permission", "ses_a", "per_1"))
  book.note(ask("question", "ses_a", "que_1"))
  book.note(status("ses_b", "retry", { next: 1796040585530, attempt: 2 }))
  book.note(status("ses_c", "busy"))
  book.note({ type: "session.idle", properties: { sessionID: "ses_c" } })
  book.note(status("ses_d", "busy"))
  book.note(ask("permission", "ses_d", "per_2"))
  book.note(reply("permission", "ses_d", "per_2"))
  book.note({ type: "message.updated", properties: { info: { sessionID: "ses_e", role: "user" } } })
  book.note({ type: "session.status", properties: { sessionID: "not-a-session", status: { type: "busy" } } })
  assert.deepEqual(book.toWire(), {
    ses_a: { status: "busy", permissions: ["per_1"], questions: ["que_1"] },
    ses_b: { status: "retry", next: 1796040585530 },
    ses_c: { status: "idle" },
    ses_d: { status: "busy" },
    ses_e: { status: null },
  })
})

test("idle means nothing is asked any more, and a deleted session is forgotten", () => {
  const book = new SessionBook()
  book.note(status("ses_a", "busy"))
  book.note(ask("permission", "ses_a", "per_1"))
  book.note(status("ses_a", "idle"))
  book.note(status("ses_b", "busy"))
  book.note({ type: "session.deleted", properties: { sessionID: "ses_b", info: { id: "ses_b" } } })
  assert.deepEqual(book.toWire(), { ses_a: { status: "idle" } })
})

test("the book is bounded: the most recently active sessions stay, asks are capped", () => {
  const book = new SessionBook(3)
  for (const id of ["ses_1", "ses_2", "ses_3"]) book.note(status(id, "busy"))
  book.note(status("ses_1", "idle")) // touched again: now the most recent
  book.note(status("ses_4", "busy"))
  assert.deepEqual(Object.keys(book.toWire()), ["ses_3", "ses_1", "ses_4"])
  for (let i = 0; i < ASKS_LIMIT + 3; i++) book.note(ask("permission", "ses_4", `per_${i}`))
  const asks = book.toWire().ses_4.permissions
  assert.equal(asks.length, ASKS_LIMIT)
  assert.equal(asks.at(-1), `per_${ASKS_LIMIT + 2}`)
})

test("a hello with sessions is a valid v1 line; sessions must be an object", () => {
  const book = new SessionBook()
  book.note(status("ses_a", "busy"))
  const line = encodeMessage("hello", { pid: 1, directory: "/p", sessions: book.toWire() })
  assert.deepEqual(parseLine(line.trimEnd()).sessions, { ses_a: { status: "busy" } })
  assert.throws(() => parseLine(JSON.stringify({ v: 1, type: "hello", pid: 1, directory: "/p", sessions: ["ses_a"] })),
    (err) => err.reason === "bad_field")
})

const dir = fs.mkdtempSync(path.join(os.tmpdir(), "ar-js-book-"))
after(() => fs.rmSync(dir, { recursive: true, force: true }))

function listen(socketPath) {
  const hellos = []
  let wake = () => {}
  const conns = []
  const server = net.createServer((conn) => {
    conns.push(conn)
    let buffer = ""
    conn.setEncoding("utf8")
    conn.on("data", (chunk) => {
      buffer += chunk
      let i
      while ((i = buffer.indexOf("\n")) >= 0) {
        const msg = JSON.parse(buffer.slice(0, i))
        buffer = buffer.slice(i + 1)
        if (msg.type === "hello") hellos.push(msg)
        wake()
      }
    })
    conn.on("error", () => {})
  })
  const nextHello = (count, ms = 10000) => new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`timed out waiting for hello ${count}`)), ms)
    timer.unref()
    wake = () => hellos.length >= count && (clearTimeout(timer), resolve(hellos[count - 1]))
    wake()
  })
  const close = () => {
    conns.forEach((c) => c.destroy())
    return new Promise((resolve) => server.close(resolve))
  }
  return new Promise((resolve) => server.listen(socketPath, () => resolve({ nextHello, close })))
}

const fakeInput = () => ({
  client: { _client: { get: () => Promise.resolve({ data: { version: "1.18.33" } }) } },
  directory: "/proj", project: { id: "p" }, serverUrl: new URL("http://localhost:4096"),
})

test("what happens while the daemon is away is in the next hello", async () => {
  const socketPath = path.join(dir, "d.sock")
  let daemon = await listen(socketPath)
  const bridge = new Bridge(fakeInput(), { socketPath }).start()
  try {
    const first = await daemon.nextHello(1)
    assert.deepEqual(first.sessions, {}, "a fresh process has seen no session")
    bridge.forwardEvent(status("ses_old", "busy"))
    await daemon.close() // the daemon is SIGKILLed ...
    bridge.forwardEvent({ type: "session.created", properties: { sessionID: "ses_new", info: { id: "ses_new" } } })
    bridge.forwardEvent(status("ses_new", "busy"))
    bridge.forwardEvent({ type: "session.error", properties: { sessionID: "ses_new", error: { name: "APIError" } } })
    bridge.forwardEvent({ type: "session.idle", properties: { sessionID: "ses_new" } })
    bridge.forwardEvent(ask("permission", "ses_old", "per_9"))
    daemon = await listen(socketPath) // ... and restarted
    const second = await daemon.nextHello(1)
    assert.deepEqual(second.sessions, {
      ses_old: { status: "busy", permissions: ["per_9"] },
      ses_new: { status: "idle" },
    })
  } finally {
    bridge.close()
    await daemon.close()
  }
})
