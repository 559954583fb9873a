// History trims and sampling penalties (plugin_bridge/autoretry/history.js).
import assert from "node:assert/strict"
import { test } from "node:test"

import {
  TRIM_NOTICE,
  TrimBook,
  applyPenalties,
  applyTrims,
  cutPoint,
  normalisePenalties,
  trimText,
} from "../../plugin_bridge/autoretry.js"

const LOOP = "The same sentence comes again and again. "
const TEXT = `Intro line. ${LOOP.repeat(40)}`
const KEEP = "Intro line. ".length + LOOP.length // loop start + one period

const cutCases = [
  ["excerpt right before keep_chars", TEXT, KEEP, LOOP, KEEP],
  ["no excerpt: keep_chars as sent", TEXT, 20, null, 20],
  ["stored text shifted by 3 chars: the excerpt is found", `abc${TEXT}`, KEEP, LOOP, KEEP + 3],
  ["excerpt nowhere: keep_chars as sent", TEXT, KEEP, "never there", KEEP],
  ["excerpt longer than keep_chars", TEXT, 5, LOOP, KEEP],
]
for (const [name, text, keep, excerpt, expected] of cutCases) {
  test(`cutPoint: ${name}`, () => assert.equal(cutPoint(text, keep, excerpt), expected))
}

test("trimText keeps the loop's first copy and says it trimmed", () => {
  assert.equal(trimText(TEXT, { keep_chars: KEEP, excerpt: LOOP }), `Intro line. ${LOOP}${TRIM_NOTICE}`)
  assert.equal(trimText("short", { keep_chars: 10, excerpt: null }), "short", "nothing past the cut")
  assert.equal(trimText("word loop", { keep_chars: 4, excerpt: null }), `word ${TRIM_NOTICE}`)
  assert.equal(trimText(undefined, { keep_chars: 4 }), undefined)
})

test("TrimBook refuses bad trims and forgets the oldest past its limit", () => {
  const book = new TrimBook(2)
  assert.equal(book.add({ part_id: "p1", keep_chars: -1 }), false)
  assert.equal(book.add({ keep_chars: 3 }), false)
  assert.equal(book.add({ part_id: "p1", message_id: "m", keep_chars: 3 }), true)
  book.add({ part_id: "p2", keep_chars: 4 })
  book.add({ part_id: "p1", keep_chars: 5 }) // re-sent: now the newest
  book.add({ part_id: "p3", keep_chars: 6 })
  assert.deepEqual([...book.parts.keys()], ["p1", "p3"])
  assert.equal(book.get("p1").keep_chars, 5)
})

function history() {
  const looping = { id: "prt_loop", type: "text", text: TEXT, messageID: "msg_a" }
  const thinking = { id: "prt_think", type: "reasoning", text: TEXT }
  const tool = { id: "prt_tool", type: "tool", text: TEXT }
  return [
    { info: { id: "msg_u", role: "user" }, parts: [{ id: "prt_u", type: "text", text: "go" }] },
    { info: { id: "msg_a", role: "assistant" }, parts: [thinking, looping, tool] },
    { info: { id: "msg_x", role: "assistant" } }, // no parts: skipped
  ]
}

test("applyTrims shortens only the trimmed text/reasoning parts, as copies", () => {
  const messages = history()
  const original = messages[1].parts[1]
  const book = new TrimBook()
  for (const part_id of ["prt_loop", "prt_think", "prt_tool"])
    book.add({ part_id, message_id: "msg_a", keep_chars: KEEP, excerpt: LOOP })
  assert.equal(applyTrims(messages, book), 2)
  assert.equal(messages[1].parts[0].text, `Intro line. ${LOOP}${TRIM_NOTICE}`)
  assert.equal(messages[1].parts[1].text, `Intro line. ${LOOP}${TRIM_NOTICE}`)
  assert.equal(messages[1].parts[2].text, TEXT, "tool parts are never cut")
  assert.equal(original.text, TEXT, "the part object itself (OpenCode's) is untouched")
  assert.equal(messages[0].parts[0].text, "go")
  assert.equal(applyTrims(messages, book), 0, "already trimmed: nothing more to cut")
  assert.equal(applyTrims(null, book), 0)
  assert.equal(applyTrims(history(), new TrimBook()), 0)
})

test("normalisePenalties keeps only known keys with finite numbers", () => {
  assert.deepEqual(
    normalisePenalties({
      fake: { frequency_penalty: 0.3, presence_penalty: "high", temperature: 2 },
      other: { repetition_penalty: Number.NaN },
      "*": { presence_penalty: 0.1 },
      bad: null,
    }),
    { fake: { frequency_penalty: 0.3 }, "*": { presence_penalty: 0.1 } },
  )
  assert.deepEqual(normalisePenalties(null), {})
})

const penaltyCases = [
  ["provider match", { model: { providerID: "fake" } }, { options: {} }, { frequency_penalty: 0.3 }],
  ["wildcard for others", { model: { providerID: "zzz" } }, { options: {} }, { presence_penalty: 0.1 }],
  ["user's own value wins", { model: { providerID: "fake" } }, { options: { frequency_penalty: 0 } }, { frequency_penalty: 0 }],
  ["options created when missing", { model: { providerID: "fake" } }, {}, { frequency_penalty: 0.3 }],
]
for (const [name, input, output, expected] of penaltyCases) {
  test(`applyPenalties: ${name}`, () => {
    applyPenalties(input, output, { fake: { frequency_penalty: 0.3 }, "*": { presence_penalty: 0.1 } })
    assert.deepEqual(output.options, expected)
  })
}

test("applyPenalties adds nothing by default (no config)", () => {
  const output = { temperature: 0.5, options: {} }
  assert.deepEqual(applyPenalties({ model: { providerID: "fake" } }, output, {}), [])
  assert.deepEqual(output, { temperature: 0.5, options: {} })
})
