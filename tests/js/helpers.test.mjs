// Pure helpers of the bridge plugin.
import assert from "node:assert/strict"
import { test } from "node:test"

import plugin, {
  SendQueue,
  TOOL_OUTPUT_KEEP,
  backoffDelay,
  chatMessageFields,
  processListens,
  promptBody,
  reconnectCap,
  socketPath,
  trimEvent,
} from "../../plugin_bridge/autoretry.js"

test("default export is an OpenCode server plugin object with an id", () => {
  assert.equal(plugin.id, "opencode-autoretry")
  assert.equal(typeof plugin.server, "function")
})

const socketCases = [
  [{ AUTORETRY_SOCKET: "/x/s.sock", XDG_RUNTIME_DIR: "/run/u" }, "/x/s.sock"],
  [{ AUTORETRY_SOCKET: "~/s.sock" }, "/home/u/s.sock"],
  [{ XDG_RUNTIME_DIR: "/run/u", AUTORETRY_HOME: "/h" }, "/run/u/opencode-autoretry/daemon.sock"],
  [{ AUTORETRY_HOME: "/h", XDG_DATA_HOME: "/d" }, "/h/daemon.sock"],
  [{ XDG_DATA_HOME: "/d" }, "/d/opencode-autoretry/daemon.sock"],
  [{}, "/home/u/.local/share/opencode-autoretry/daemon.sock"],
]
for (const [env, expected] of socketCases) {
  test(`socketPath(${JSON.stringify(env)})`, () => assert.equal(socketPath(env, "/home/u"), expected))
}

const listenCases = [
  [["/bin/opencode"], false],
  [["/bin/opencode", "run", "hi"], false],
  [["/bin/opencode", "serve"], true],
  [["/bin/opencode", "--port", "0"], true],
  [["/bin/opencode", "--port=4199"], true],
  [["/bin/opencode", "--hostname", "127.0.0.1"], true],
]
for (const [argv, expected] of listenCases) {
  test(`processListens(${argv.slice(1).join(" ")}) is ${expected}`, () => assert.equal(processListens(argv), expected))
}

test("backoff grows from 0.5 s and caps at 30 s", () => {
  assert.deepEqual([0, 1, 2, 3, 4, 5, 6, 7, 20].map((n) => backoffDelay(n)), [500, 1000, 2000, 4000, 8000, 16000, 30000, 30000, 30000])
})

test("AUTORETRY_BRIDGE_RECONNECT_MAX_MS lowers the cap; nonsense keeps 30 s", () => {
  assert.equal(reconnectCap({}), 30000)
  assert.equal(reconnectCap({ AUTORETRY_BRIDGE_RECONNECT_MAX_MS: "250" }), 250)
  for (const raw of ["50", "abc", "", "-1", "Infinity"]) {
    assert.equal(reconnectCap({ AUTORETRY_BRIDGE_RECONNECT_MAX_MS: raw }), 30000, raw)
  }
  assert.equal(reconnectCap({ AUTORETRY_BRIDGE_RECONNECT_MAX_MS: "99999" }), 30000)
  assert.deepEqual([0, 1, 5].map((n) => backoffDelay(n, 250)), [250, 250, 250])
})

test("trimEvent cuts tool outputs and leaves everything else alone", () => {
  const big = "y".repeat(TOOL_OUTPUT_KEEP + 500)
  const event = { type: "message.part.updated", properties: { sessionID: "s", part: { type: "tool", state: { status: "completed", output: big, metadata: { output: big, exit: 0 } } } } }
  const trimmed = trimEvent(event)
  assert.ok(trimmed.properties.part.state.output.length < TOOL_OUTPUT_KEEP + 60)
  assert.match(trimmed.properties.part.state.output, /trimmed 500 chars/)
  assert.equal(trimmed.properties.part.state.metadata.exit, 0)
  assert.equal(event.properties.part.state.output, big, "the original event is not mutated")
  const delta = { type: "message.part.delta", properties: { delta: big } }
  assert.equal(trimEvent(delta), delta)
})

test("chatMessageFields reports marker, command and a short text", () => {
  const fields = chatMessageFields(
    { sessionID: "ses_a", agent: "build", model: { providerID: "p", modelID: "m" }, messageID: "msg_1" },
    { message: {}, parts: [{ type: "text", text: "/autoretry off " + "z".repeat(900), metadata: { autoretry: { decision: "1" } } }] },
    42,
  )
  assert.equal(fields.t, 42)
  assert.equal(fields.command, true)
  assert.deepEqual(fields.marker, { decision: "1" })
  assert.equal(fields.text.length, 500)
  assert.equal(chatMessageFields({ sessionID: "s" }, { parts: [{ type: "text", text: "/autoretryx" }] }).command, false)
  assert.equal(chatMessageFields({ sessionID: "s" }, { parts: [] }).marker, null)
})

test("promptBody always carries the marker in the text part's metadata", () => {
  assert.deepEqual(promptBody({ text: "Continue.", agent: "build", model: { providerID: "p", modelID: "m" }, variant: null, marker: { decision: "9" } }), {
    parts: [{ type: "text", text: "Continue.", metadata: { autoretry: { decision: "9" } } }],
    agent: "build",
    model: { providerID: "p", modelID: "m" },
  })
  assert.deepEqual(promptBody({ text: "x" }).parts[0].metadata, { autoretry: {} })
})

test("SendQueue drops the oldest delta first, then the oldest event, and counts", () => {
  const q = new SendQueue(6) // room for three 2-char lines
  q.push("e1", "event")
  q.push("d1", "delta")
  q.push("d2", "delta")
  q.push("a1", "control") // evicts d1
  assert.deepEqual(q.items.map((i) => i.line), ["e1", "d2", "a1"])
  q.push("a2", "control") // evicts d2
  q.push("a3", "control") // evicts e1
  assert.deepEqual(q.items.map((i) => i.line), ["a1", "a2", "a3"])
  assert.equal(q.push("d3", "delta"), false) // nothing cheaper to evict: the delta itself goes
  assert.equal(q.push("a4", "control"), false)
  assert.equal(q.dropped, 5)
  assert.deepEqual([q.length, q.size], [3, 6])
  assert.equal(q.shift().line, "a1")
  assert.equal(q.push("big-control", "control"), false) // larger than all the room there is
  assert.equal(q.size, 4)
  q.clear()
  assert.deepEqual([q.length, q.size], [0, 0])
})

test("SendQueue evicts as many small deltas as a large event needs", () => {
  const q = new SendQueue(10)
  for (const d of ["d1", "d2", "d3", "d4", "d5"]) q.push(d, "delta")
  assert.equal(q.push("event-6", "event"), true) // 7 chars: four deltas must go
  assert.deepEqual(q.items.map((i) => i.line), ["d5", "event-6"])
  assert.equal(q.dropped, 4)
})
