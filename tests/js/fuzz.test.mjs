// Fuzzing the bridge protocol, JS side (issue 11): parseLine and the bridge's line handling
// against random, mutated and schema-shaped lines. Deterministic (a seeded PRNG); run by
// tests/test_protocol.py through `node --test tests/js/`. The property: parseLine returns a
// validated object or throws a ProtocolError with a stable reason; the bridge never throws,
// never rejects unhandled, answers every request id at most once and counts every line it
// drops or does not know in `unknown`.
import assert from "node:assert/strict"
import fs from "node:fs"
import path from "node:path"
import { test } from "node:test"
import { fileURLToPath } from "node:url"

import { Bridge, ProtocolError, SCHEMA, parseLine } from "../../plugin_bridge/autoretry.js"

const REASONS = new Set(["bad_json", "not_object", "bad_version", "bad_type", "missing_field", "bad_field", "too_long"])
const here = path.dirname(fileURLToPath(import.meta.url))
const VALID = fs.readFileSync(path.join(here, "..", "fixtures", "bridge", "valid.jsonl"), "utf8")
  .split("\n").filter(Boolean).map((l) => JSON.parse(l).line)
const TYPES = [...Object.keys(SCHEMA), "", "nope", "__proto__", "constructor", "toString", "hasOwnProperty"]
const tally = {}
const tried = (name, n = 1) => { tally[name] = (tally[name] ?? 0) + n }

function rng(seed) { // mulberry32
  return () => {
    seed = (seed + 0x6d2b79f5) | 0
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed)
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}
const pick = (r, list) => list[Math.floor(r() * list.length)]
const int = (r, n) => Math.floor(r() * n)

function randomString(r, max = 20) {
  const units = ["a", "\"", "\\", "{", "}", "[", "]", ":", ",", "\n", "\u0000", "\ud800", "\udfff", "😀", "é", " ", "1", "-", "e", "n"]
  let s = ""
  for (let i = int(r, max); i > 0; i--) s += r() < 0.5 ? pick(r, units) : String.fromCharCode(int(r, 0x10000))
  return s
}

function randomValue(r, depth = 0) {
  const k = int(r, depth > 2 ? 6 : 8)
  if (k === 0) return null
  if (k === 1) return r() < 0.5
  if (k === 2) return pick(r, [0, -1, 1, 1.5, 2 ** 53, -(2 ** 63), 1e308, Number.MAX_SAFE_INTEGER + 2])
  if (k === 3) return randomString(r)
  if (k === 4) return pick(r, ["", "ses_1", "info", "warning", "fake", "*"])
  if (k === 5) return int(r, 5000)
  if (k === 6) return Array.from({ length: int(r, 4) }, () => randomValue(r, depth + 1))
  const obj = {}
  for (let i = int(r, 4); i > 0; i--) obj[pick(r, ["x", "providerID", "frequency_penalty", "__proto__", "constructor", randomString(r, 4)])] = randomValue(r, depth + 1)
  return obj
}

function shapedLine(r) {
  const type = pick(r, TYPES)
  const fields = {}
  for (const name of Object.keys(SCHEMA[type] ?? { x: "" })) if (r() < 0.8) fields[name] = randomValue(r)
  return JSON.stringify({ ...fields, v: pick(r, [1, 1, 1, 2, "1", null]), type })
}

function mutate(r, line) {
  let s = line
  for (let i = 1 + int(r, 3); i > 0; i--) {
    const at = int(r, s.length + 1)
    const op = int(r, 3)
    if (op === 0) s = s.slice(0, at) + s.slice(at + 1 + int(r, 6))
    else if (op === 1) s = s.slice(0, at) + pick(r, ["{", "}", "\"", "\\u", ",", "9", "null", "\ud800"]) + s.slice(at)
    else s = s.slice(0, at)
  }
  return s
}

function checkParse(line) {
  tried("parseLine")
  try {
    const msg = parseLine(line)
    assert.equal(typeof msg.type, "string")
    assert.equal(msg.v, 1)
    return msg
  } catch (err) {
    assert.ok(err instanceof ProtocolError, `not a ProtocolError: ${err?.stack}`)
    assert.ok(REASONS.has(err.reason), err.reason)
    return null
  }
}

test("parseLine: random text, mutated fixtures and schema-shaped lines", () => {
  const r = rng(11)
  for (let i = 0; i < 1500; i++) checkParse(randomString(r, 60))
  for (let i = 0; i < 1500; i++) checkParse(mutate(r, pick(r, VALID)))
  for (let i = 0; i < 2000; i++) checkParse(shapedLine(r))
  for (const line of ["[".repeat(100000) + "]".repeat(100000), "{\"v\":1,\"type\":\"x\",\"a\":" + "9".repeat(5000) + "}",
    "{\"v\":1e400,\"type\":\"x\"}", "\ufeff{\"v\":1,\"type\":\"welcome\",\"daemon\":\"x\"}", "x".repeat(1024 * 1024 + 1)]) checkParse(line)
})

function fakeClient(r) {
  const answer = () => pick(r, [
    () => Promise.resolve({ data: { id: "ses_1" } }), () => Promise.resolve({ error: { name: "X" } }),
    () => Promise.resolve(null), () => Promise.resolve(undefined), () => Promise.reject(new Error("boom")),
    () => Promise.resolve({ data: { id: "ses_1", parentID: "p" } }), () => { throw new Error("sync boom") },
  ])()
  return {
    _client: { get: () => Promise.resolve({ data: { version: "1.18.33" } }) },
    session: { get: answer, promptAsync: answer, abort: answer },
    tui: { showToast: answer },
    app: { log: answer },
  }
}

// Mostly the right kind for the field (so requests get past validation), sometimes anything.
function fieldValue(r, spec) {
  if (r() < 0.25) return randomValue(r)
  const kind = spec.replace("?", "")
  if (kind === "str") return pick(r, ["ses_1", "m", "info", "warning", "", randomString(r, 8)])
  if (kind === "int") return pick(r, [0, 1, 5, 100, -1, 2 ** 40])
  if (kind === "bool") return r() < 0.5
  return randomValue(r, 1) ?? {}
}

const DAEMON_TYPES = ["welcome", "prompt", "abort", "toast", "log", "reply", "trim", "config"]

function daemonLine(r, id) {
  const k = int(r, 10)
  if (k < 2) return randomString(r, 40).replaceAll("\n", " ")
  if (k < 4) return mutate(r, pick(r, VALID)).replaceAll("\n", " ")
  const type = k < 9 ? pick(r, DAEMON_TYPES) : pick(r, TYPES)
  const fields = {}
  for (const [name, spec] of Object.entries(SCHEMA[type] ?? {})) if (r() < 0.9) fields[name] = fieldValue(r, spec)
  if (r() < 0.8) fields.id = id
  if (type === "trim" && r() < 0.7) Object.assign(fields, { session_id: "ses_1", message_id: "m", part_id: `p${int(r, 50)}`, keep_chars: int(r, 100) })
  if (type === "config" && r() < 0.7) fields.penalties = { [pick(r, ["*", "fake", "__proto__"])]: { frequency_penalty: randomValue(r) } }
  return JSON.stringify({ ...fields, v: 1, type })
}

test("Bridge.onData: random chunks of daemon traffic never throw and every drop is counted", async () => {
  const r = rng(5)
  const unhandled = []
  const onUnhandled = (err) => unhandled.push(err)
  process.on("unhandledRejection", onUnhandled)
  let lines = 0
  let requests = 0
  let known = 0
  try {
    for (let round = 0; round < 60; round++) {
      const bridge = new Bridge({ client: fakeClient(r), directory: "/p", project: { id: "x" } }, { statsMs: 1e9 })
      const acks = []
      bridge.send = (type, fields) => { if (type === "ack") acks.push(fields.id); return true }
      const batch = Array.from({ length: 40 }, (_, i) => daemonLine(r, `r-${round}-${i}`))
      let expectUnknown = 0
      for (const line of batch) {
        const msg = (() => { try { return parseLine(line) } catch { return null } })()
        if (msg === null || !line.trim()) expectUnknown += line.trim() ? 1 : 0
        else if (!DAEMON_TYPES.includes(msg.type)) expectUnknown += 1
        else known += 1
        if (msg?.id && typeof msg.id === "string") requests += 1
      }
      const stream = batch.join("\n") + "\n"
      for (let at = 0; at < stream.length;) {
        const size = 1 + int(r, 200)
        bridge.onData(stream.slice(at, at + size))
        at += size
      }
      lines += batch.length
      await new Promise((resolve) => setImmediate(resolve))
      await new Promise((resolve) => setTimeout(resolve, 0))
      assert.equal(bridge.unknown, expectUnknown, `round ${round}: unknown lines counted`)
      const ours = acks.filter((id) => typeof id === "string" && id.startsWith(`r-${round}-`))
      assert.equal(new Set(ours).size, ours.length, "at most one ack per request")
      assert.ok(acks.length <= requests, "no ack without a request")
      bridge.close()
    }
  } finally {
    process.off("unhandledRejection", onUnhandled)
  }
  tried("bridge.lines", lines)
  assert.deepEqual(unhandled, [])
  console.log(`# fuzz js: ${JSON.stringify(tally)} (requests with an id ${requests}, known ${known})`)
})

test("regression: a daemon message typed like an Object.prototype key is not a request", async () => {
  const acks = []
  const bridge = new Bridge({ client: fakeClient(rng(1)), directory: "/p" }, { statsMs: 1e9 })
  bridge.send = (type, fields) => { if (type === "ack") acks.push(fields); return true }
  for (const type of ["constructor", "toString", "__proto__", "hasOwnProperty"]) bridge.onData(JSON.stringify({ v: 1, type, id: type }) + "\n")
  await new Promise((resolve) => setTimeout(resolve, 0))
  assert.equal(bridge.unknown, 4)
  assert.deepEqual(acks.map((a) => [a.id, a.ok]), [["constructor", false], ["toString", false], ["__proto__", false], ["hasOwnProperty", false]])
  bridge.close()
})

test("regression: one oversized daemon line is dropped whole and counted once", () => {
  const bridge = new Bridge({ client: fakeClient(rng(2)), directory: "/p" }, { statsMs: 1e9 })
  const handled = []
  bridge.handleLine = (line) => handled.push(line)
  const big = JSON.stringify({ v: 1, type: "log", level: "info", message: "x".repeat(1024 * 1024 + 300000) })
  for (let i = 0; i < big.length; i += 65536) bridge.onData(big.slice(i, i + 65536))
  bridge.onData("\n{\"v\":1,\"type\":\"welcome\",\"daemon\":\"x\"}\n")
  assert.equal(bridge.unknown, 1)
  assert.deepEqual(handled, ["{\"v\":1,\"type\":\"welcome\",\"daemon\":\"x\"}"])
  bridge.close()
})

test("LineBuffer against a model: random lines, random cuts", async () => {
  const { LineBuffer } = await import("../../plugin_bridge/autoretry.js")
  const r = rng(9)
  for (let round = 0; round < 300; round++) {
    const max = 16
    const lines = Array.from({ length: int(r, 8) }, () => "ab \u00e9{".repeat(int(r, 8)).slice(0, int(r, 40)))
    const stream = lines.map((l) => l + "\n").join("")
    const buffer = new LineBuffer(max)
    const got = []
    let oversize = 0
    for (let at = 0; at < stream.length;) {
      const size = 1 + int(r, 30)
      const out = buffer.feed(stream.slice(at, at + size))
      got.push(...out.lines)
      oversize += out.oversize
      at += size
    }
    tried("LineBuffer.lines", lines.length)
    assert.deepEqual(got, lines.filter((l) => l.length <= max && l.trim()))
    assert.equal(oversize, lines.filter((l) => l.length > max).length)
  }
})
