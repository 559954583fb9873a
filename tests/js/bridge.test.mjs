// The bridge against a real Unix socket and a fake OpenCode client (no OpenCode needed).
import assert from "node:assert/strict"
import fs from "node:fs"
import net from "node:net"
import os from "node:os"
import path from "node:path"
import { after, test } from "node:test"

import { AutoretryBridge, Bridge, DAEMON_DOWN_MESSAGE, HANDLED_MESSAGE, SLOW_DAEMON_MESSAGE } from "../../plugin_bridge/autoretry.js"

const dir = fs.mkdtempSync(path.join(os.tmpdir(), "ar-js-"))
after(() => fs.rmSync(dir, { recursive: true, force: true }))
let counter = 0
const freshPath = () => path.join(dir, `d${++counter}.sock`)

function deadline(ms, what) {
  // unref: a pending deadline must not keep node --test alive after the test passed
  return new Promise((_, reject) => setTimeout(() => reject(new Error(`timed out waiting for ${what}`)), ms).unref())
}

// The plugin's hooks, its bridge on `socketPath` (the plugin reads it from the environment).
async function hooksOn(socketPath, client) {
  const previous = process.env.AUTORETRY_SOCKET
  process.env.AUTORETRY_SOCKET = socketPath
  try {
    return await AutoretryBridge(input(client))
  } finally {
    process.env.AUTORETRY_SOCKET = previous ?? ""
  }
}

// Polls a condition the test cannot await directly (a toast from a late socket reply).
async function until(condition, what, ms = 5000) {
  const end = Date.now() + ms
  while (!condition()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`)
    await new Promise((resolve) => setTimeout(resolve, 10))
  }
}

// A daemon stand-in: collects parsed lines, lets the test write lines back.
class FakeDaemon {
  constructor(socketPath) {
    this.path = socketPath
    this.lines = []
    this.waiters = []
    this.conns = []
  }
  listen() {
    this.server = net.createServer((conn) => {
      this.conns.push(conn)
      let buffer = ""
      conn.setEncoding("utf8")
      conn.on("data", (chunk) => {
        buffer += chunk
        let i
        while ((i = buffer.indexOf("\n")) >= 0) {
          this.lines.push(JSON.parse(buffer.slice(0, i)))
          buffer = buffer.slice(i + 1)
          this.waiters.forEach((w) => w())
        }
      })
      conn.on("error", () => {})
    })
    return new Promise((resolve) => this.server.listen(this.path, resolve))
  }
  write(obj) {
    this.conns.at(-1).write(JSON.stringify({ v: 1, ...obj }) + "\n")
  }
  waitFor(predicate, what, ms = 5000) {
    const found = () => this.lines.find(predicate)
    if (found()) return Promise.resolve(found())
    return Promise.race([
      new Promise((resolve) => this.waiters.push(() => found() && resolve(found()))),
      deadline(ms, what),
    ])
  }
  close() {
    this.conns.forEach((c) => c.destroy())
    return new Promise((resolve) => this.server.close(resolve))
  }
}

function fakeClient({ sessions = {}, failPrompt = false } = {}) {
  const calls = []
  const record = (name, result) => (args) => {
    calls.push([name, args])
    return Promise.resolve(result)
  }
  return {
    calls,
    _client: { get: record("health", { data: { healthy: true, version: "1.18.33" } }) },
    session: {
      get: ({ path: { id } }) => {
        calls.push(["get", id])
        if (id === "ses_throws") return Promise.reject(new Error("boom"))
        return Promise.resolve(id in sessions ? { data: sessions[id] } : { error: { name: "NotFoundError" } })
      },
      promptAsync: record("promptAsync", failPrompt ? { error: { data: { message: "bad" } } } : { data: undefined, response: { status: 204 } }),
      abort: record("abort", { data: true }),
    },
    tui: { showToast: record("toast", { data: true }) },
    app: { log: record("log", { data: true }) },
  }
}

const input = (client) => ({ client, directory: "/proj", project: { id: "pid" }, serverUrl: new URL("http://localhost:4096") })

test("says hello first, then forwards events and acks requests", async () => {
  const daemon = new FakeDaemon(freshPath())
  await daemon.listen()
  const client = fakeClient({ sessions: { ses_root: { id: "ses_root" }, ses_child: { id: "ses_child", parentID: "ses_root" } } })
  const bridge = new Bridge(input(client), { socketPath: daemon.path }).start()
  try {
    const hello = await daemon.waitFor((l) => l.type === "hello", "hello")
    assert.equal(daemon.lines[0].type, "hello")
    assert.deepEqual([hello.pid, hello.directory, hello.project, hello.opencode, hello.bridge], [process.pid, "/proj", "pid", "1.18.33", "0.1.0"])
    assert.equal(hello.server_url, null, "node --test does not listen: the 4096 URL is bogus")

    bridge.forwardEvent({ type: "session.status", properties: { sessionID: "ses_root", status: { type: "busy" } } })
    bridge.forwardEvent({ type: "server.heartbeat", properties: {} })
    await daemon.waitFor((l) => l.type === "event", "event")
    assert.deepEqual(daemon.lines.filter((l) => l.type === "event").map((l) => l.event.type), ["session.status"])

    daemon.write({ type: "prompt", id: "r-1", session_id: "ses_root", text: "Continue.", agent: "build", marker: { decision: "3" } })
    daemon.write({ type: "prompt", id: "r-2", session_id: "ses_child", text: "Continue." })
    daemon.write({ type: "prompt", id: "r-3", session_id: "ses_missing", text: "Continue." })
    daemon.write({ type: "prompt", id: "r-4", session_id: "ses_throws", text: "Continue." })
    daemon.write({ type: "toast", id: "r-5", message: "hi" })
    daemon.write({ type: "log", id: "r-6", level: "info", message: "m" })
    daemon.write({ type: "abort", id: "r-7", session_id: "ses_root" })
    daemon.write({ type: "trim", id: "r-8", session_id: "s", message_id: "m", part_id: "p", keep_chars: 1 })
    daemon.write({ type: "mystery", id: "r-9" })
    const acks = {}
    for (const id of ["r-1", "r-2", "r-3", "r-4", "r-5", "r-6", "r-7", "r-8", "r-9"]) {
      const ack = await daemon.waitFor((l) => l.type === "ack" && l.id === id, `ack ${id}`)
      acks[id] = ack.ok ? "ok" : ack.error
    }
    assert.deepEqual(acks, {
      "r-1": "ok", "r-2": "child session", "r-3": "unreadable", "r-4": "unreadable", "r-5": "ok",
      "r-6": "ok", "r-7": "ok", "r-8": "ok", "r-9": "unsupported request: mystery",
    })
    const prompts = client.calls.filter(([name]) => name === "promptAsync")
    assert.equal(prompts.length, 1, "only the root session is prompted")
    assert.deepEqual(prompts[0][1].body.parts[0].metadata, { autoretry: { decision: "3" } })
    assert.deepEqual(client.calls.find(([n]) => n === "log")[1].body.service, "autoretry")
  } finally {
    bridge.close()
    await daemon.close()
  }
})

test("/autoretry asks the daemon, toasts the reply and throws to stop the model call", async () => {
  const daemon = new FakeDaemon(freshPath())
  await daemon.listen()
  const client = fakeClient()
  const hooks = await hooksOn(daemon.path, client)
  try {
    await daemon.waitFor((l) => l.type === "hello", "hello")
    const pending = hooks["command.execute.before"]({ command: "autoretry", sessionID: "ses_a", arguments: "off here" }, { parts: [] })
    const command = await daemon.waitFor((l) => l.type === "command", "command")
    assert.deepEqual([command.name, command.arguments, command.session_id], ["autoretry", "off here", "ses_a"])
    daemon.write({ type: "reply", id: command.id, ok: true, title: "autoretry", message: "off for this session", variant: "success" })
    await assert.rejects(pending, { message: HANDLED_MESSAGE })
    assert.deepEqual(client.calls.find(([n]) => n === "toast")[1].body, { title: "autoretry", message: "off for this session", variant: "success" })
    await hooks["command.execute.before"]({ command: "review", arguments: "" }, { parts: [] }) // other commands pass
  } finally {
    await hooks.dispose()
    await daemon.close()
  }
})

test("/autoretry with no daemon toasts how to start it, still without a model call", async () => {
  const client = fakeClient()
  const bridge = new Bridge(input(client), { socketPath: freshPath() }).start()
  const hooks = await hooksOn(bridge.path, client)
  try {
    await assert.rejects(hooks["command.execute.before"]({ command: "autoretry", sessionID: "s", arguments: "" }, { parts: [] }), { message: HANDLED_MESSAGE })
    assert.equal(client.calls.find(([n]) => n === "toast")[1].body.message, DAEMON_DOWN_MESSAGE)
    assert.match(DAEMON_DOWN_MESSAGE, /`autoretry start`/) // as README says, whatever runs the daemon
    assert.doesNotMatch(DAEMON_DOWN_MESSAGE, /autoretry run|systemctl/)
    await hooks.event({ event: { type: "session.idle", properties: { sessionID: "s" } } }) // no daemon: silently nothing
  } finally {
    bridge.close()
    await hooks.dispose()
  }
})

test("a reply after the command's wait is still toasted: the daemon carried the command out", async () => {
  const daemon = new FakeDaemon(freshPath())
  await daemon.listen()
  const client = fakeClient()
  const hooks = await hooksOn(daemon.path, client)
  try {
    await daemon.waitFor((l) => l.type === "hello", "hello")
    const pending = hooks["command.execute.before"]({ command: "autoretry", sessionID: "ses_a", arguments: "on" }, { parts: [] })
    const command = await daemon.waitFor((l) => l.type === "command", "command")
    await assert.rejects(pending, { message: HANDLED_MESSAGE }) // the wait is over, no reply yet
    const toasts = () => client.calls.filter(([n]) => n === "toast").map(([, a]) => a.body.message)
    assert.deepEqual(toasts(), [SLOW_DAEMON_MESSAGE], "connected: slow, not down")
    daemon.write({ type: "reply", id: command.id, ok: true, message: "autoretry on for this session" })
    await until(() => toasts().length === 2, "the late reply's toast")
    assert.deepEqual(toasts(), [SLOW_DAEMON_MESSAGE, "autoretry on for this session"])
  } finally {
    await hooks.dispose()
    await daemon.close()
  }
})

// A fake daemon and a bridge started on it, both closed after `body`.
async function withBridge(body) {
  const daemon = new FakeDaemon(freshPath())
  await daemon.listen()
  const bridge = new Bridge(input(fakeClient()), { socketPath: daemon.path }).start()
  try {
    await body(daemon, bridge)
  } finally {
    bridge.close()
    await daemon.close()
  }
}

test("/autoretry typed while the first connection is being made waits for it", () => withBridge(async (daemon, bridge) => {
  assert.equal(bridge.ready, false, "asked before the hello")
  const reply = bridge.askCommand({ sessionID: "ses_a", arguments: "status" })
  const command = await daemon.waitFor((l) => l.type === "command", "command")
  assert.equal(daemon.lines[0].type, "hello", "the hello goes first")
  daemon.write({ type: "reply", id: command.id, ok: true, message: "on" })
  assert.equal((await reply).message, "on")
}))

test("a daemon that never replies costs the command its timeout, then null", () => withBridge(async (daemon, bridge) => {
  await daemon.waitFor((l) => l.type === "hello", "hello")
  const began = Date.now()
  // No upper bound on the clock (a loaded machine is slow): the answer is null, it came no
  // sooner than COMMAND_TIMEOUT_MS, and node's own test timeout catches a command that hangs.
  assert.equal(await bridge.askCommand({ sessionID: "s", arguments: "status" }), null)
  const took = Date.now() - began
  assert.ok(took >= 900, `took ${took} ms`)
}))

// Security: another local user who creates the socket path first (where it points into a
// shared directory) must get nothing, and must not be able to send a prompt the agent runs.
test("never connects to a socket in a directory others can enter; connects once it is private", async () => {
  const shared = fs.mkdtempSync(path.join(dir, "shared-"))
  fs.chmodSync(shared, 0o755)
  const daemon = new FakeDaemon(path.join(shared, "daemon.sock"))
  await daemon.listen()
  const client = fakeClient()
  const bridge = new Bridge(input(client), { socketPath: daemon.path }).start()
  try {
    assert.equal(bridge.socket, null, "no connection attempt was made")
    bridge.connect() // a retry meets the same refusal: logged once, still no connection
    assert.equal(bridge.socket, null)
    const logs = client.calls.filter(([name]) => name === "log").map(([, args]) => args.body)
    assert.equal(logs.length, 1)
    assert.equal(logs[0].level, "warn")
    assert.match(logs[0].message, /not connecting .*open to others \(mode 0755\)/)
    fs.chmodSync(shared, 0o700) // what the daemon itself makes of its directory
    await daemon.waitFor((l) => l.type === "hello", "hello once the directory is private", 10000)
  } finally {
    bridge.close()
    await daemon.close()
  }
})

test("a symlink to a live socket is not followed", async () => {
  const daemon = new FakeDaemon(freshPath())
  await daemon.listen()
  const link = freshPath()
  fs.symlinkSync(daemon.path, link)
  const client = fakeClient()
  const bridge = new Bridge(input(client), { socketPath: link }).start()
  try {
    assert.equal(bridge.socket, null)
    assert.match(client.calls.find(([name]) => name === "log")[1].body.message, /is a symlink/)
    bridge.path = daemon.path // the socket itself, in the same private directory: connects
    bridge.connect()
    await daemon.waitFor((l) => l.type === "hello", "hello on the socket itself")
  } finally {
    bridge.close()
    await daemon.close()
  }
})

test("reconnects with backoff after the daemon restarts, and says hello again", async () => {
  const socketPath = freshPath()
  let daemon = new FakeDaemon(socketPath)
  await daemon.listen()
  const bridge = new Bridge(input(fakeClient()), { socketPath }).start()
  try {
    await daemon.waitFor((l) => l.type === "hello", "first hello")
    await daemon.close()
    daemon = new FakeDaemon(socketPath)
    await daemon.listen()
    await daemon.waitFor((l) => l.type === "hello", "second hello", 10000)
    assert.equal(bridge.reconnects, 1)
  } finally {
    bridge.close()
    await daemon.close()
  }
})

test("garbage from the daemon is counted, never thrown", async () => {
  const daemon = new FakeDaemon(freshPath())
  await daemon.listen()
  const bridge = new Bridge(input(fakeClient()), { socketPath: daemon.path, statsMs: 100 }).start()
  try {
    await daemon.waitFor((l) => l.type === "hello", "hello")
    daemon.conns.at(-1).write("not json\n{\"v\":9,\"type\":\"toast\"}\n\n")
    const stats = await daemon.waitFor((l) => l.type === "stats" && l.unknown === 2, "stats with unknown=2")
    assert.equal(stats.dropped, 0)
  } finally {
    bridge.close()
    await daemon.close()
  }
})

test("trim and config from the daemon reach the transform and chat.params hooks", async () => {
  const daemon = new FakeDaemon(freshPath())
  await daemon.listen()
  const hooks = await hooksOn(daemon.path, fakeClient())
  const loop = "again and again. "
  const messages = () => [{ info: { id: "msg_a", role: "assistant" }, parts: [{ id: "prt_a", type: "text", text: `Hi. ${loop.repeat(30)}` }] }]
  try {
    await daemon.waitFor((l) => l.type === "hello", "hello")
    const untouched = { messages: messages() }
    await hooks["experimental.chat.messages.transform"]({}, untouched)
    assert.equal(untouched.messages[0].parts[0].text, `Hi. ${loop.repeat(30)}`, "no trim yet")

    daemon.write({ type: "trim", id: "r-1", session_id: "ses_a", message_id: "msg_a", part_id: "prt_a", keep_chars: 4 + loop.length, excerpt: loop })
    daemon.write({ type: "trim", id: "r-2", session_id: "ses_a", message_id: "msg_a", part_id: "prt_b", keep_chars: -3 })
    daemon.write({ type: "config", id: "r-3", penalties: { fake: { frequency_penalty: 0.4 } } })
    const acks = {}
    for (const id of ["r-1", "r-2", "r-3"]) {
      const ack = await daemon.waitFor((l) => l.type === "ack" && l.id === id, `ack ${id}`)
      acks[id] = ack.ok ? ack.result : ack.error
    }
    assert.deepEqual(acks, { "r-1": { trims: 1 }, "r-2": "bad trim", "r-3": { providers: ["fake"] } })

    const trimmed = { messages: messages() }
    await hooks["experimental.chat.messages.transform"]({}, trimmed)
    assert.equal(trimmed.messages[0].parts[0].text, `Hi. ${loop}[autoretry: repeated text trimmed]`)
    const params = { temperature: 0, options: {} }
    await hooks["chat.params"]({ sessionID: "ses_a", model: { providerID: "fake" } }, params)
    assert.deepEqual(params.options, { frequency_penalty: 0.4 })
    await hooks["chat.params"]({}, null) // a malformed call never throws into OpenCode
    await hooks["experimental.chat.messages.transform"]({}, null)
  } finally {
    await hooks.dispose()
    await daemon.close()
  }
})

test("a child session may be aborted (a hung subagent) but is never prompted", async () => {
  const daemon = new FakeDaemon(freshPath())
  await daemon.listen()
  const client = fakeClient({ sessions: { ses_child: { id: "ses_child", parentID: "ses_root" } } })
  const bridge = new Bridge(input(client), { socketPath: daemon.path }).start()
  try {
    await daemon.waitFor((l) => l.type === "hello", "hello")
    daemon.write({ type: "abort", id: "a-1", session_id: "ses_child" })
    daemon.write({ type: "prompt", id: "a-2", session_id: "ses_child", text: "Continue." })
    const abort = await daemon.waitFor((l) => l.type === "ack" && l.id === "a-1", "abort ack")
    const prompt = await daemon.waitFor((l) => l.type === "ack" && l.id === "a-2", "prompt ack")
    assert.deepEqual([abort.ok, prompt.ok, prompt.error], [true, false, "child session"])
    assert.deepEqual(client.calls.filter(([n]) => n === "abort").map(([, a]) => a.path.id), ["ses_child"])
    assert.equal(client.calls.filter(([n]) => n === "promptAsync").length, 0)
  } finally {
    bridge.close()
    await daemon.close()
  }
})

test("deltas of a part reach the daemon joined, and before any later line", async () => {
  const daemon = new FakeDaemon(freshPath())
  await daemon.listen()
  const bridge = new Bridge(input(fakeClient()), { socketPath: daemon.path, coalesceMs: 1000 }).start()
  try {
    await daemon.waitFor((l) => l.type === "hello", "hello")
    const part = (delta) => ({ type: "message.part.delta", properties: { sessionID: "s", messageID: "m", partID: "p", field: "text", delta } })
    for (const word of ["one ", "two ", "three"]) bridge.forwardEvent(part(word))
    bridge.forwardEvent({ type: "session.idle", properties: { sessionID: "s" } })
    await daemon.waitFor((l) => l.type === "event" && l.event.type === "session.idle", "idle")
    const events = daemon.lines.filter((l) => l.type === "event").map((l) => [l.event.type, l.event.properties.delta])
    assert.deepEqual(events, [["message.part.delta", "one two three"], ["session.idle", undefined]])
  } finally {
    bridge.close()
    await daemon.close()
  }
})

// `opencode run` disposes its plugins right after its session ends, then exits: the end itself
// (the error, the idle) was still queued and a destroyed socket dropped it (a CI run's daemon
// never saw a headless run's failure).
test("what was forwarded just before the plugin is disposed still reaches the daemon", async () => {
  const daemon = new FakeDaemon(freshPath())
  await daemon.listen()
  const hooks = await hooksOn(daemon.path, fakeClient())
  try {
    await daemon.waitFor((l) => l.type === "hello", "hello")
    const ended = new Promise((resolve) => daemon.conns.at(-1).on("end", resolve))
    const part = { type: "message.part.delta", properties: { sessionID: "s", messageID: "m", partID: "p", field: "text", delta: "held" } }
    await hooks.event({ event: part })
    await hooks.event({ event: { type: "session.error", properties: { sessionID: "s", error: { name: "APIError" } } } })
    await hooks.event({ event: { type: "session.idle", properties: { sessionID: "s" } } })
    await hooks.dispose()
    await Promise.race([ended, deadline(5000, "the bridge to end its connection")])
    const events = daemon.lines.filter((l) => l.type === "event").map((l) => l.event.type)
    assert.deepEqual(events, ["message.part.delta", "session.error", "session.idle"])
  } finally {
    await hooks.dispose()
    await daemon.close()
  }
})

test("a disposed bridge takes no prompt from the daemon while its connection winds down", async () => {
  const daemon = new FakeDaemon(freshPath())
  await daemon.listen()
  const client = fakeClient({ sessions: { ses_root: { id: "ses_root" } } })
  const hooks = await hooksOn(daemon.path, client)
  try {
    await daemon.waitFor((l) => l.type === "hello", "hello")
    const closed = new Promise((resolve) => daemon.conns.at(-1).on("close", resolve))
    await hooks.dispose()
    // Written before the daemon's side sees the bridge's end (and ends too, as a socket that
    // is not half-open does): the bridge has it before the connection closes.
    daemon.write({ type: "prompt", id: "r-1", session_id: "ses_root", text: "Continue." })
    await Promise.race([closed, deadline(5000, "the connection to close")])
    await new Promise((resolve) => setImmediate(resolve))
    assert.deepEqual(client.calls.filter(([name]) => name === "get" || name === "promptAsync"), [])
  } finally {
    await daemon.close()
  }
})
