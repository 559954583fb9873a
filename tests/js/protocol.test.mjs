// The JS side of the bridge protocol against the fixtures shared with tests/test_protocol.py.
import assert from "node:assert/strict"
import fs from "node:fs"
import path from "node:path"
import { test } from "node:test"
import { fileURLToPath } from "node:url"

import {
  MAX_LINE_BYTES,
  ProtocolError,
  SCHEMA,
  encodeMessage,
  parseLine,
} from "../../plugin_bridge/autoretry.js"

const here = path.dirname(fileURLToPath(import.meta.url))
const fixtures = path.join(here, "..", "fixtures", "bridge")
const load = (name) =>
  fs.readFileSync(path.join(fixtures, name), "utf8").split("\n").filter(Boolean).map((l) => JSON.parse(l))

for (const [i, c] of load("valid.jsonl").entries()) {
  test(`valid fixture ${i} (${c.type}) parses`, () => {
    const msg = parseLine(c.line)
    assert.equal(msg.type, c.type)
    assert.equal(c.type in SCHEMA, c.known)
  })
}

for (const [i, c] of load("invalid.jsonl").entries()) {
  test(`invalid fixture ${i} fails with ${c.reason}`, () => {
    assert.throws(() => parseLine(c.line), (err) => err instanceof ProtocolError && err.reason === c.reason)
  })
}

test("encodeMessage writes one versioned line that parses back", () => {
  const line = encodeMessage("ack", { id: "r-1", ok: true, error: null, result: { status: 204 } })
  assert.ok(line.endsWith("\n"))
  assert.equal(line.indexOf("\n"), line.length - 1)
  assert.deepEqual(parseLine(line.trimEnd()), { v: 1, type: "ack", id: "r-1", ok: true, error: null, result: { status: 204 } })
})

test("lines over 1 MiB are refused as too_long", () => {
  const line = JSON.stringify({ v: 1, type: "log", level: "info", message: "x".repeat(MAX_LINE_BYTES) })
  assert.throws(() => parseLine(line), (err) => err.reason === "too_long")
})
