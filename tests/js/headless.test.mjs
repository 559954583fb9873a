// The bridge's part of `autoretry exec`: the hello flag and the continuation's marker.
import assert from "node:assert/strict"
import { test } from "node:test"

import { isExecRun, markContinuation, pendingExecMarker } from "../../plugin_bridge/autoretry.js"

const MARKER = { decision: "7", injection: "3", kind: "blank" }
const ENV = { AUTORETRY_EXEC: "1", AUTORETRY_EXEC_SESSION: "ses_a", AUTORETRY_EXEC_MARKER: JSON.stringify(MARKER) }

function userMessage(session = "ses_a", parts = [{ type: "text", text: "Continue." }]) {
  return [{ sessionID: session }, { message: { sessionID: session }, parts }]
}

test("isExecRun only for AUTORETRY_EXEC=1", () => {
  assert.equal(isExecRun({ AUTORETRY_EXEC: "1" }), true)
  assert.equal(isExecRun({ AUTORETRY_EXEC: "0" }), false)
  assert.equal(isExecRun({}), false)
})

test("pendingExecMarker needs exec, a session and a JSON object", () => {
  assert.deepEqual(pendingExecMarker(ENV), { session: "ses_a", marker: MARKER })
  assert.equal(pendingExecMarker({ ...ENV, AUTORETRY_EXEC: undefined }), null)
  assert.equal(pendingExecMarker({ ...ENV, AUTORETRY_EXEC_SESSION: "" }), null)
  assert.equal(pendingExecMarker({ ...ENV, AUTORETRY_EXEC_MARKER: "not json" }), null)
  assert.equal(pendingExecMarker({ ...ENV, AUTORETRY_EXEC_MARKER: "[1]" }), null)
})

test("markContinuation marks the first text part of that session's message, once", () => {
  const pending = pendingExecMarker(ENV)
  const [input, output] = userMessage()
  assert.equal(markContinuation(input, output, pending), true)
  assert.deepEqual(output.parts[0].metadata, { autoretry: MARKER })
  const [again, second] = userMessage()
  assert.equal(markContinuation(again, second, pending), false, "one message per run")
  assert.equal(second.parts[0].metadata, undefined)
})

test("markContinuation leaves other sessions, synthetic parts and marked parts alone", () => {
  const [otherIn, otherOut] = userMessage("ses_b")
  assert.equal(markContinuation(otherIn, otherOut, pendingExecMarker(ENV)), false)
  const [synIn, synOut] = userMessage("ses_a", [{ type: "text", text: "x", synthetic: true }])
  assert.equal(markContinuation(synIn, synOut, pendingExecMarker(ENV)), false)
  const own = { autoretry: { injection: "9" } }
  const [ownIn, ownOut] = userMessage("ses_a", [{ type: "text", text: "x", metadata: own }])
  assert.equal(markContinuation(ownIn, ownOut, pendingExecMarker(ENV)), false)
  assert.equal(markContinuation(...userMessage(), null), false)
})
