// The bridge's delta coalescer: same characters, same order, fewer lines.
import assert from "node:assert/strict"
import { test } from "node:test"

import {
  COALESCE_LINES_PER_S, COALESCE_MS, COALESCE_WIDEST, coalesceWindow, DeltaCoalescer,
} from "../../plugin_bridge/autoretry.js"

class FakeTimers {
  constructor() {
    this.due = new Map()
    this.next = 1
    this.waits = [] // the length asked for by every setTimeout, in order
  }
  setTimeout(fn, ms) {
    const id = this.next++
    this.due.set(id, fn)
    this.waits.push(ms)
    return id
  }
  clearTimeout(id) {
    this.due.delete(id)
  }
  fire() {
    const pending = [...this.due.values()]
    this.due.clear()
    for (const fn of pending) fn()
  }
}

function delta(text, part = "p1", field = "text") {
  return { type: "message.part.delta", properties: { sessionID: "s", messageID: "m", partID: part, field, delta: text } }
}

function coalescer(windowMs = 50, maxChars = 1024) {
  const out = []
  const timers = new FakeTimers()
  const c = new DeltaCoalescer((event, t) => out.push([event.properties.partID, event.properties.field, event.properties.delta, t]), windowMs, maxChars, timers)
  return { c, out, timers }
}

test("deltas of one part within the window go out as one, at the first delta's time", () => {
  const { c, out, timers } = coalescer()
  assert.equal(c.add(delta("Hel"), 10), true)
  assert.equal(c.add(delta("lo "), 20), true)
  assert.equal(c.add(delta("world"), 30), true)
  assert.deepEqual(out, [])
  timers.fire()
  assert.deepEqual(out, [["p1", "text", "Hello world", 10]])
  assert.equal(c.joined, 2)
})

test("another part, another field or a full buffer flushes first: the order never changes", () => {
  const { c, out, timers } = coalescer(50, 6)
  c.add(delta("ab"), 1)
  c.add(delta("cd", "p2"), 2)
  c.add(delta("ef", "p2", "reasoning"), 3)
  c.add(delta("gh", "p2", "reasoning"), 4)
  c.add(delta("ijklm", "p2", "reasoning"), 5) // 4 + 5 > 6 chars: a new line
  timers.fire()
  assert.deepEqual(out, [
    ["p1", "text", "ab", 1], ["p2", "text", "cd", 2], ["p2", "reasoning", "efgh", 3],
    ["p2", "reasoning", "ijklm", 5],
  ])
})

test("flush sends the held delta at once; drop forgets it; the caller's event is not mutated", () => {
  const { c, out, timers } = coalescer()
  const first = delta("x")
  c.add(first, 1)
  c.add(delta("y"), 2)
  c.flush()
  assert.deepEqual(out, [["p1", "text", "xy", 1]])
  assert.equal(first.properties.delta, "x")
  c.add(delta("z"), 3)
  c.drop()
  timers.fire()
  assert.equal(out.length, 1)
})

test("a zero window or a delta without text is not held", () => {
  assert.equal(coalescer(0).c.add(delta("a"), 1), false)
  assert.equal(coalescer().c.add({ type: "message.part.delta", properties: {} }, 1), false)
})

test("the window comes from the options, then AUTORETRY_BRIDGE_COALESCE_MS, else the default", () => {
  assert.equal(coalesceWindow({}, {}), COALESCE_MS)
  assert.equal(coalesceWindow({}, { AUTORETRY_BRIDGE_COALESCE_MS: "0" }), 0)
  assert.equal(coalesceWindow({ coalesceMs: 20 }, { AUTORETRY_BRIDGE_COALESCE_MS: "0" }), 20)
  assert.equal(coalesceWindow({}, { AUTORETRY_BRIDGE_COALESCE_MS: "junk" }), COALESCE_MS)
  assert.equal(coalesceWindow({}, { AUTORETRY_BRIDGE_COALESCE_MS: "99999" }), 1000)
})

function sessionDelta(session, text, part = `p-${session}`) {
  return { type: "message.part.delta", properties: { sessionID: session, messageID: "m", partID: part, field: "text", delta: text } }
}

test("the deltas of many sessions share one window: one timer, all sent in the same tick", () => {
  const { c, out, timers } = coalescer()
  c.add(sessionDelta("a", "a1"), 1)
  c.add(sessionDelta("b", "b1"), 2)
  c.add(sessionDelta("a", "a2"), 3)
  c.add(sessionDelta("c", "c1"), 4)
  c.add(sessionDelta("b", "b2"), 5)
  assert.equal(timers.due.size, 1)
  assert.deepEqual(out, [])
  timers.fire()
  assert.deepEqual(out.map(([part, , text, t]) => [part, text, t]),
    [["p-a", "a1a2", 1], ["p-b", "b1b2", 2], ["p-c", "c1", 4]])
  assert.equal(timers.due.size, 0)
})

test("another part of one session flushes only that session's held delta, at once", () => {
  const { c, out, timers } = coalescer()
  c.add(sessionDelta("a", "x", "p1"), 1)
  c.add(sessionDelta("b", "y"), 2)
  c.add(sessionDelta("a", "z", "p2"), 3)
  assert.deepEqual(out.map(([part, , text]) => [part, text]), [["p1", "x"]])
  timers.fire()
  assert.deepEqual(out.map(([part, , text]) => [part, text]), [["p1", "x"], ["p-b", "y"], ["p2", "z"]])
})

test("flush sends every held delta and stops the timer; a new delta starts a new window", () => {
  const { c, out, timers } = coalescer()
  c.add(sessionDelta("a", "1"), 1)
  c.add(sessionDelta("b", "2"), 2)
  c.flush()
  assert.equal(out.length, 2)
  assert.equal(timers.due.size, 0)
  c.add(sessionDelta("a", "3"), 3)
  assert.equal(timers.due.size, 1)
  c.drop()
  assert.equal(timers.due.size, 0)
  timers.fire()
  assert.equal(out.length, 2)
})

// One window with a delta from each of `sessions` sessions, ended by its timer.
function streamWindow(c, timers, sessions, t) {
  for (let i = 0; i < sessions; i++) c.add(sessionDelta(`s${i}`, "w "), t)
  timers.fire()
}

test("a few streams keep the window; many widen it to bound the lines per second", () => {
  const { c, out, timers } = coalescer()
  const few = (COALESCE_MS * COALESCE_LINES_PER_S) / 1000 // sessions that fit one window
  assert.equal(few, 5)
  streamWindow(c, timers, 1, 1)
  streamWindow(c, timers, few, 2)
  streamWindow(c, timers, 2 * few, 3) // sized by the window before it: still the base
  streamWindow(c, timers, 2 * few, 4)
  streamWindow(c, timers, 10 * few, 5)
  streamWindow(c, timers, 1, 6)
  streamWindow(c, timers, 1, 7)
  assert.deepEqual(timers.waits, [
    COALESCE_MS, COALESCE_MS, COALESCE_MS, 2 * COALESCE_MS, 2 * COALESCE_MS,
    COALESCE_WIDEST * COALESCE_MS, COALESCE_MS,
  ])
  assert.equal(out.length, 1 + few + 2 * few + 2 * few + 10 * few + 1 + 1) // nothing lost
})

test("an early flush neither widens nor narrows the next window; drop forgets its lines", () => {
  const { c, timers } = coalescer()
  const few = (COALESCE_MS * COALESCE_LINES_PER_S) / 1000 // sessions that fit one window
  streamWindow(c, timers, 2 * few, 1) // sizes the next window: 2x
  for (let i = 0; i < 3 * few; i++) c.add(sessionDelta(`s${i}`, "w "), 2)
  c.flush() // another line went out: the window ended early
  c.add(sessionDelta("a", "w "), 3)
  c.drop()
  streamWindow(c, timers, 1, 4)
  streamWindow(c, timers, 1, 5)
  assert.deepEqual(timers.waits, [COALESCE_MS, 2 * COALESCE_MS, 2 * COALESCE_MS,
    2 * COALESCE_MS, COALESCE_MS])
})
