// @deno/kv on Node against a Lode cluster over KV Connect (HTTP/1.1):
// set, get, atomic with checks, list with cursors, watch, and an enqueue.
// `node/tests/deno_kv.rs` runs it with LODE_KV_URL and DENO_KV_ACCESS_TOKEN
// set; any failed expectation exits non-zero with the reason.

import assert from "node:assert/strict";
import { openKv } from "@deno/kv";

const kv = await openKv(process.env.LODE_KV_URL);

// set and get
const written = await kv.set(["node", "greeting"], { text: "hello", at: new Date(0) });
assert.equal(written.ok, true);
assert.equal(written.versionstamp.length, 20);
const read = await kv.get(["node", "greeting"]);
assert.deepEqual(read.value, { text: "hello", at: new Date(0) });
assert.equal(read.versionstamp, written.versionstamp);
assert.equal((await kv.get(["node", "absent"])).versionstamp, null);

// an eventual read is served by the member's own state, which catches up
let eventual = null;
for (let attempt = 0; attempt < 200 && eventual?.versionstamp !== written.versionstamp; attempt++) {
  eventual = await kv.get(["node", "greeting"], { consistency: "eventual" });
  if (eventual.versionstamp !== written.versionstamp) await new Promise((resolve) => setTimeout(resolve, 10));
}
assert.equal(eventual.versionstamp, written.versionstamp);

// atomic with checks: the first commit wins, the stale one is refused
const first = await kv.atomic()
  .check(read)
  .check({ key: ["node", "fresh"], versionstamp: null })
  .set(["node", "greeting"], "replaced")
  .set(["node", "fresh"], 1n)
  .commit();
assert.equal(first.ok, true);
const stale = await kv.atomic().check(read).set(["node", "greeting"], "lost").commit();
assert.equal(stale.ok, false);
assert.equal((await kv.get(["node", "greeting"])).value, "replaced");

// sum, min and max on KvU64 counters
await kv.atomic().sum(["node", "count"], 40n).sum(["node", "high"], 1n).commit();
await kv.atomic().sum(["node", "count"], 2n).max(["node", "high"], 9n).min(["node", "low"], 7n).commit();
assert.equal((await kv.get(["node", "count"])).value.value, 42n);
assert.equal((await kv.get(["node", "high"])).value.value, 9n);
assert.equal((await kv.get(["node", "low"])).value.value, 7n);

// list with cursors: pages of two, resumed by cursor, in key order
for (let index = 0; index < 5; index++) {
  await kv.set(["node", "list", index], `item ${index}`);
}
const seen = [];
let cursor = undefined;
for (let page = 0; page < 10; page++) {
  const iterator = kv.list({ prefix: ["node", "list"] }, { limit: 2, cursor });
  let count = 0;
  for await (const entry of iterator) {
    seen.push(entry.key[2]);
    count++;
  }
  if (count < 2) break;
  cursor = iterator.cursor;
}
assert.deepEqual(seen, [0, 1, 2, 3, 4]);
const reversed = [];
for await (const entry of kv.list({ prefix: ["node", "list"] }, { reverse: true, limit: 3 })) {
  reversed.push(entry.key[2]);
}
assert.deepEqual(reversed, [4, 3, 2]);

// watch: the current state first, then the change (@deno/kv holds back a
// first state in which every key is absent, so the key exists first)
await kv.set(["node", "watched"], "before");
const stream = kv.watch([["node", "watched"]]);
const reader = stream.getReader();
const initial = await reader.read();
assert.equal(initial.value[0].value, "before");
await kv.set(["node", "watched"], "changed");
const next = await reader.read();
assert.equal(next.value[0].value, "changed");
await reader.cancel();

// an enqueue, stored by the cluster for Rust SDK listeners (@deno/kv sends
// a backoff schedule of its own)
const enqueued = await kv.enqueue({ task: "from node" }, { keysIfUndelivered: [["node", "undelivered"]] });
assert.equal(enqueued.ok, true);

kv.close();
console.log(JSON.stringify({ ok: true, listed: seen }));
