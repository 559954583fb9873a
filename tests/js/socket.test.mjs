// The socket check the bridge runs before every connect (plugin_bridge/autoretry/socket.js):
// only a socket of our own user, in a directory only we can enter, is connected to.
import assert from "node:assert/strict"
import fs from "node:fs"
import net from "node:net"
import os from "node:os"
import path from "node:path"
import { after, test } from "node:test"

import { Bridge, checkSocket } from "../../plugin_bridge/autoretry.js"

const root = fs.mkdtempSync(path.join(os.tmpdir(), "ar-js-sock-"))
after(() => fs.rmSync(root, { recursive: true, force: true }))
let counter = 0
const me = process.getuid()

// A private directory (0700, ours) holding a live socket: the case that must connect.
async function liveSocket(mode = 0o700) {
  const dir = fs.mkdtempSync(path.join(root, `d${++counter}-`))
  fs.chmodSync(dir, mode)
  const file = path.join(dir, "daemon.sock")
  const server = net.createServer((conn) => {
    conn.on("error", () => {})
    conn.setEncoding("utf8")
    conn.once("data", (chunk) => server.emit("first-line", chunk))
  })
  await new Promise((resolve) => server.listen(file, resolve))
  const firstLine = new Promise((resolve) => server.once("first-line", resolve))
  return { dir, file, server, firstLine }
}

const refusal = (check) => (check.ok ? "ok" : check.reason)

test("our socket in our 0700 directory may be connected to", async () => {
  const live = await liveSocket()
  try {
    assert.deepEqual(checkSocket(live.file), { ok: true })
  } finally {
    live.server.close()
  }
})

test("a directory with group or other bits is refused (0755, 0750, 0701, 1777)", async () => {
  const live = await liveSocket()
  try {
    for (const mode of [0o755, 0o750, 0o701, 0o1777]) {
      fs.chmodSync(live.dir, mode)
      const check = checkSocket(live.file)
      assert.equal(refusal(check), "dir_shared", mode.toString(8))
      assert.match(check.message, new RegExp(`mode ${mode.toString(8).padStart(4, "0")}`))
    }
    fs.chmodSync(live.dir, 0o700)
    assert.equal(refusal(checkSocket(live.file)), "ok")
  } finally {
    live.server.close()
  }
})

test("a symlink in place of the socket is refused, even to our own live socket", async () => {
  const live = await liveSocket()
  try {
    const link = path.join(live.dir, "link.sock")
    fs.symlinkSync(live.file, link)
    assert.equal(refusal(checkSocket(link)), "symlink")
    assert.equal(refusal(checkSocket(live.file)), "ok")
  } finally {
    live.server.close()
  }
})

test("a regular file or a directory in place of the socket is refused", async () => {
  const live = await liveSocket()
  try {
    fs.writeFileSync(path.join(live.dir, "file.sock"), "")
    fs.mkdirSync(path.join(live.dir, "dir.sock"))
    assert.equal(refusal(checkSocket(path.join(live.dir, "file.sock"))), "not_socket")
    assert.equal(refusal(checkSocket(path.join(live.dir, "dir.sock"))), "not_socket")
  } finally {
    live.server.close()
  }
})

test("nothing there yet is 'absent' (no daemon), not a refusal worth a log line", () => {
  assert.equal(refusal(checkSocket(path.join(root, "nowhere", "daemon.sock"))), "absent")
  assert.equal(refusal(checkSocket(path.join(root, "daemon.sock"))), "absent")
})

// Another user cannot be created in a test: the current uid is injected instead, which makes
// every real file "someone else's"; a fake lstat gives a socket of another user in our directory.
test("a directory or a socket of another user is refused", async () => {
  const live = await liveSocket()
  try {
    assert.equal(refusal(checkSocket(live.file, { uid: me + 1 })), "dir_owner")
    const theirs = (file) => {
      const info = fs.lstatSync(file)
      return file === live.file ? Object.assign(Object.create(Object.getPrototypeOf(info)), info, { uid: me + 1 }) : info
    }
    assert.equal(refusal(checkSocket(live.file, { lstat: theirs })), "socket_owner")
    assert.equal(refusal(checkSocket(live.file, { lstat: fs.lstatSync })), "ok")
  } finally {
    live.server.close()
  }
})

test("a symlinked directory counts only when the link is ours and its target private", async () => {
  const live = await liveSocket()
  try {
    const link = path.join(root, `link${++counter}`)
    fs.symlinkSync(live.dir, link)
    const viaLink = path.join(link, "daemon.sock")
    assert.equal(refusal(checkSocket(viaLink)), "ok")
    const linkOfOther = (file) => {
      const info = fs.lstatSync(file)
      return file === link ? Object.assign(Object.create(Object.getPrototypeOf(info)), info, { uid: me + 1 }) : info
    }
    assert.equal(refusal(checkSocket(viaLink, { lstat: linkOfOther })), "dir_owner")
    fs.chmodSync(live.dir, 0o755)
    assert.equal(refusal(checkSocket(viaLink)), "dir_shared")
  } finally {
    live.server.close()
  }
})

test("no user id to compare (a platform without getuid) fails closed", async () => {
  const live = await liveSocket()
  try {
    assert.equal(refusal(checkSocket(live.file, { uid: null })), "no_uid")
  } finally {
    live.server.close()
  }
})

test("the bridge refuses another user's socket (uid injected) and connects to the same one of ours", async () => {
  const live = await liveSocket()
  const logs = []
  const client = {
    _client: { get: () => Promise.resolve({ data: { version: "1.18.33" } }) },
    app: { log: (args) => logs.push(args.body) },
  }
  const input = { client, directory: "/proj", project: { id: "pid" }, serverUrl: new URL("http://localhost:4096") }
  const bridge = new Bridge(input, { socketPath: live.file, checkSocket: (file) => checkSocket(file, { uid: me + 1 }) }).start()
  try {
    assert.equal(bridge.socket, null, "no connection attempt was made")
    assert.equal(logs.length, 1)
    assert.match(logs[0].message, /belongs to uid \d+, not to us/)
    bridge.checkSocket = checkSocket
    bridge.connect()
    assert.match(await live.firstLine, /"type":"hello"/)
  } finally {
    bridge.close()
    live.server.close()
  }
})
