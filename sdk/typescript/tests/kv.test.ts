/** The TypeScript SDK's KV surface against a real cluster: every operation
 * and read, binary keys, codecs, bulk deletes and scans with cursors,
 * stream scoping, the change feed and the managed state store. */

import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { after, before, test } from "node:test";

import { Client, KvStore, msgpackCodec, type ChangeEvent } from "../src/index.js";
import { Cluster } from "./cluster.js";

const bytes = (text: string): Uint8Array => new TextEncoder().encode(text);
const fresh = (name: string): string => `${name}-${randomBytes(4).toString("hex")}`;

let cluster: Cluster;
let laser: Client;

before(async () => {
  cluster = await Cluster.start();
  laser = Client.connect(cluster.connectionString());
});

after(async () => {
  await laser.close();
  await cluster.stop();
});

test("values, entries and codecs", async () => {
  const kv = laser.kv(fresh("values"));
  const version = await kv.set(bytes("text")).bytes(bytes("plain")).send();
  const entry = await kv.getEntry(bytes("text"));
  assert.equal(typeof version, "bigint");
  assert.deepEqual([entry?.value, entry?.encoding, entry?.version, entry?.sourceIndex], [bytes("plain"), "bytes", version, version]);
  const binary = Uint8Array.from([0, 0xff, 1]);
  await kv.set(binary).bytes(Uint8Array.from([0x80])).send();
  assert.deepEqual(await kv.get(binary), Uint8Array.from([0x80]));
  await kv.set(bytes("packed")).msgpack({ big: 2n ** 63n, small: 7 }).send();
  assert.deepEqual(await kv.getAs(bytes("packed"), msgpackCodec), { big: 2n ** 63n, small: 7 });
  await kv.set(bytes("doc")).json({ a: 1 }).ttl(60_000).send();
  const checked = await kv.getTyped(bytes("doc"), (value) => {
    assert.equal(typeof value, "object");
    return value as { a: number };
  });
  assert.equal(checked?.a, 1);
  const meta = await kv.exists(bytes("doc"));
  assert.equal(meta?.sizeBytes, 7n);
  assert.ok(meta?.expiresAtMicros !== undefined);
  assert.equal(await kv.exists(bytes("nobody")), undefined);
  const far = (1n << 62n) + 1n;
  await kv.expireAt(bytes("doc"), far);
  assert.equal((await kv.exists(bytes("doc")))?.expiresAtMicros, far, "micros past 2^53 arrive exactly");
  assert.deepEqual(await kv.getMany([bytes("text"), bytes("nobody")]), [bytes("plain"), undefined]);
  assert.equal(await kv.delete(bytes("text")), true);
  assert.equal(await kv.delete(bytes("text")), false);
});

test("patch, copy, move and namespaces", async () => {
  const source = fresh("source");
  const target = fresh("target");
  const kv = laser.kv(source);
  await kv.set(bytes("config")).json({ level: "info" }).send();
  const patched = await kv.patch(bytes("config"), bytes('{"level":"debug"}'));
  assert.equal((await kv.getEntry(bytes("config")))?.version, patched);
  await kv.copyTo(bytes("config"), bytes("copy")).send();
  await kv.moveTo(bytes("copy"), bytes("moved")).intoNamespace(target).send();
  assert.equal(await kv.get(bytes("copy")), undefined);
  assert.deepEqual(await laser.kv(target).getTyped(bytes("moved")), { level: "debug" });
  const names = await laser.kvNamespaces();
  assert.ok(names.includes(source) && names.includes(target));
  await assert.rejects(kv.copyTo(bytes("nobody"), bytes("x")).send(), (error) => error instanceof Error && (error as { detail?: { kind?: string } }).detail?.kind === "notFound");
});

test("bulk deletes and scans page by cursor", async () => {
  const kv = laser.kv(fresh("pages"));
  for (let index = 0; index < 7; index++) await kv.set(bytes(`k${index}`)).bytes(bytes("v")).send();
  const first = await kv.scan().prefix(bytes("k")).limit(3).fetch();
  assert.deepEqual(first.entries.map((entry) => new TextDecoder().decode(entry.key)), ["k0", "k1", "k2"]);
  const second = await kv.scan().prefix(bytes("k")).limit(3).cursor(first.cursor!).fetch();
  assert.deepEqual(second.entries.map((entry) => new TextDecoder().decode(entry.key)), ["k3", "k4", "k5"]);
  const walked: string[] = [];
  for await (const entry of kv.scan().limit(2).entries()) walked.push(new TextDecoder().decode(entry.key));
  assert.deepEqual(walked, ["k0", "k1", "k2", "k3", "k4", "k5", "k6"]);
  assert.equal(await kv.deleteMany().range(bytes("k1"), bytes("k3")).send(), 2n);
  assert.equal(await kv.deleteMany().keyContains("6").send(), 1n);
  assert.equal(await kv.deleteMany().send(), 4n);
  assert.throws(() => kv.scan().limit(0), { name: "InvalidError" });
});

test("a default stream scopes names", async () => {
  const stream = fresh("stream");
  await using scoped = Client.connect(cluster.connectionString(), { defaultStream: stream });
  const kv = scoped.kv("config");
  assert.deepEqual([kv.namespace, kv.resourceNamespace], ["config", `stream:${stream}/config`]);
  await kv.set(bytes("k")).bytes(bytes("v")).send();
  assert.deepEqual(await scoped.kvNamespaces(), ["config"]);
  assert.deepEqual(await laser.kvUnscoped(`stream:${stream}/config`).get(bytes("k")), bytes("v"));
});

test("the change feed resumes after a position", async () => {
  const namespace = fresh("feed");
  const kv = laser.kv(namespace);
  const first = await kv.set(bytes("a")).bytes(bytes("1")).send();
  await kv.set(bytes("a")).bytes(bytes("2")).send();
  await kv.delete(bytes("a"));
  const seen: ChangeEvent[] = [];
  for await (const event of laser.changes([first - 1n, 2 ** 32 - 1], namespace)) {
    seen.push(event);
    if (seen.length === 3) break;
  }
  assert.deepEqual(seen.map((event) => event.kind), ["created", "updated", "deleted"]);
  assert.deepEqual([seen[1]?.oldValue, seen[1]?.newValue], [bytes("1"), bytes("2")]);
  for await (const event of laser.changes(seen[1]!.position, namespace)) {
    assert.deepEqual(event.position, seen[2]?.position);
    break;
  }
});

test("a namespace as a state store never expires its values", async () => {
  const kv = laser.kv(fresh("state"));
  const store = new KvStore(kv);
  await store.set("checkpoint", bytes("7"));
  assert.deepEqual(await store.get("checkpoint"), bytes("7"));
  assert.equal((await kv.getEntry(bytes("checkpoint")))?.expiresAtMicros, undefined);
  assert.equal(await store.delete("checkpoint"), true);
});
