// The bridge's prompt book: a marked continuation runs once per process, and the hello names
// the ones that ran, so the daemon sends again only what a cut socket lost (issue 11).
import assert from "node:assert/strict"
import { test } from "node:test"

import { Bridge, encodeMessage, parseLine, PromptBook } from "../../plugin_bridge/autoretry.js"

const prompt = (id, injection, session = "ses_a") => ({
  type: "prompt", id, session_id: session, text: "Continue.",
  marker: injection === undefined ? undefined : { decision: "3", injection, kind: "blank" },
})

test("an injection id is claimed once; unmarked prompts always run; the book is bounded", () => {
  const book = new PromptBook(2)
  assert.equal(book.claim(prompt("r-1", "7")), true)
  assert.equal(book.claim(prompt("r-2", "7")), false, "a copy of a continuation never runs")
  assert.equal(book.claim(prompt("r-3", undefined)), true)
  assert.equal(book.claim(prompt("r-4", undefined)), true)
  book.claim(prompt("r-5", "8", "ses_b"))
  book.claim(prompt("r-6", "9", "ses_c"))
  assert.deepEqual(book.toWire(), { 8: "ses_b", 9: "ses_c" }, "the oldest is dropped past the limit")
})

test("the same injection id for another session is another store's continuation: it runs", () => {
  const book = new PromptBook()
  assert.equal(book.claim(prompt("r-1", "1", "ses_old")), true)
  assert.equal(book.claim(prompt("r-1", "1", "ses_new")), true, "a new store counts from 1 again")
  assert.equal(book.claim(prompt("r-2", "1", "ses_new")), false, "and its copy still never runs")
  assert.deepEqual(book.toWire(), { 1: "ses_new" }, "the hello names the newer")
})

test("a hello with prompts is a valid v1 line; prompts must be an object", () => {
  const book = new PromptBook()
  book.claim(prompt("r-1", "12"))
  const line = encodeMessage("hello", { pid: 1, directory: "/p", prompts: book.toWire() })
  assert.deepEqual(parseLine(line.trimEnd()).prompts, { 12: "ses_a" })
  assert.throws(() => parseLine(JSON.stringify({ v: 1, type: "hello", pid: 1, directory: "/p", prompts: ["12"] })),
    (err) => err.reason === "bad_field")
})

test("a copy of a prompt the bridge ran is acknowledged, not run again", async () => {
  const ran = []
  const client = {
    _client: { get: () => Promise.resolve({ data: { version: "1.18.33" } }) },
    session: {
      get: ({ path }) => Promise.resolve({ data: { id: path.id } }),
      promptAsync: ({ path }) => { ran.push(path.id); return Promise.resolve({ response: { status: 204 } }) },
    },
  }
  const bridge = new Bridge({ client, directory: "/proj", project: { id: "p" }, serverUrl: new URL("http://localhost:4096") },
    { socketPath: "/nonexistent/ar.sock" })
  const acks = []
  bridge.ack = (id, ok, error, result) => acks.push({ id, ok, error, result })
  try {
    await bridge.handle(prompt("r-1", "7"))
    await bridge.handle(prompt("r-2", "7")) // the daemon's copy after a cut lost the ack
    assert.deepEqual(ran, ["ses_a"])
    assert.deepEqual(acks.map((a) => [a.id, a.ok, a.result]),
      [["r-1", true, { status: 204 }], ["r-2", true, { duplicate: true }]])
    assert.deepEqual(bridge.prompts.toWire(), { 7: "ses_a" })
  } finally {
    bridge.close()
  }
})
