/** Failure paths of the TypeScript SDK against real processes: conflicts,
 * lost leases, stale reads, input refused before sending, unsupported
 * capabilities, unknown tokens, a leader SIGKILLed during writes, and HTTP
 * connections cut mid-request (ambiguous, then repeated: applied once). */

import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { after, before, test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";

import {
  AmbiguousMutationError,
  Client,
  FencedLeaseClient,
  InvalidError,
  KvExecutionError,
  UnsupportedError,
  isAmbiguousMutation,
  isLeaseLost,
  isStale,
  isVersionConflict,
} from "../src/index.js";
import { ACCESS_TOKEN, Cluster, freePort } from "./cluster.js";
import { CuttingProxy } from "./proxy.js";

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

async function rejection(promise: Promise<unknown>): Promise<unknown> {
  try {
    await promise;
  } catch (error) {
    return error;
  }
  assert.fail("expected a rejection");
}

test("a version conflict carries the current version", async () => {
  const kv = laser.kv(fresh("cas"));
  const first = await kv.set(bytes("k")).bytes(bytes("1")).expectAbsent().commit();
  const second = await kv.set(bytes("k")).bytes(bytes("2")).expectVersion(first).commit();
  const conflict = await rejection(kv.set(bytes("k")).bytes(bytes("3")).expectVersion(first).commit());
  assert.ok(isVersionConflict(conflict) && !isLeaseLost(conflict));
  assert.ok(conflict instanceof KvExecutionError);
  assert.equal(conflict.detail.kind, "versionConflict");
  assert.equal(conflict.detail.currentVersion, second);
  await assert.rejects(kv.set(bytes("k")).bytes(bytes("3")).expectVersion(second).send(), /call \.commit\(\)/);
  await assert.rejects(kv.set(bytes("k")).bytes(bytes("3")).commit(), /needs expectVersion or expectAbsent/);
  assert.deepEqual(await kv.get(bytes("k")), bytes("2"));
});

test("a lease is lost after expiry and after another holder acquires", async () => {
  const kv = laser.kv(fresh("leases"));
  const version = await kv.set(bytes("guarded")).bytes(bytes("0")).send();
  const lease = await kv.lease(bytes("lock"), "worker-a", 300);
  assert.ok(isVersionConflict(await rejection(kv.lease(bytes("lock"), "worker-b", 30_000))));
  const deadline = Date.now() + 30_000;
  while ((await kv.leaseInfo(bytes("lock"))) !== undefined) {
    assert.ok(Date.now() < deadline, "the lease never expired");
    await sleep(50);
  }
  const fenced = (token: bigint) => kv.casFenced(bytes("guarded"), kv.namespace, bytes("lock"), token).bytes(bytes("x")).expectVersion(version).commit();
  assert.ok(isLeaseLost(await rejection(fenced(lease.token))), "after expiry");
  assert.ok(isLeaseLost(await rejection(kv.renewLease(bytes("lock"), "worker-a", lease.token, 30_000))));
  const successor = await kv.lease(bytes("lock"), "worker-b", 30_000);
  assert.ok(successor.token > lease.token);
  assert.ok(isLeaseLost(await rejection(fenced(lease.token))), "after another holder acquired");
  assert.ok((await fenced(successor.token)) > version);
});

test("a barriered read that cannot catch up is stale", async () => {
  const kv = laser.kv(fresh("barrier"));
  const version = await kv.set(bytes("k")).bytes(bytes("v")).send();
  assert.ok((await kv.getEntryAtLeast(bytes("k"), version)) !== undefined);
  assert.ok(isStale(await rejection(kv.getEntryAtLeast(bytes("k"), version + 1_000_000_000n))));
});

test("bad input is refused before anything is sent", async () => {
  // Nothing listens here: a call that sent anything would fail otherwise.
  const nowhere = new Client(`127.0.0.1:${await freePort()}`, { callTimeoutMs: 5_000 });
  const kv = nowhere.kv("config");
  const started = Date.now();
  assert.throws(() => kv.set(new Uint8Array(2049).fill(107)), /key_bytes_max = 2048/);
  await assert.rejects(kv.set(bytes("k")).bytes(new Uint8Array(65_537)).send(), /value_bytes_max = 65536/);
  await assert.rejects(nowhere.kv("n".repeat(257)).get(bytes("k")), /namespace_bytes_max = 256/);
  await assert.rejects(kv.lease(bytes("lock"), "h".repeat(257), 1000), /holder_bytes_max/);
  assert.throws(() => kv.set("text" as unknown as Uint8Array), /must be a Uint8Array/);
  assert.throws(() => kv.set(bytes("k")).expectVersion(-1n), /outside the unsigned 64-bit range/);
  assert.ok(Date.now() - started < 1000, "refusals came without waiting on the network");
  assert.throws(() => Client.connect("http://"), InvalidError);
  assert.throws(() => Client.connect("http://127.0.0.1:1?colour=red"), /none of token, default_stream/);
  await nowhere.close();
});

test("an unsupported capability and an unknown token", async () => {
  assert.deepEqual(new Set(await laser.capabilities()), new Set(["kv", "cas", "fenced_leases"]));
  await assert.rejects(laser.require("forks"), UnsupportedError);
  await using stranger = Client.connect(cluster.connectionString().split("?")[0]!, { token: `not-${ACCESS_TOKEN}` });
  const refused = await rejection(stranger.kv("config").get(bytes("k")));
  assert.ok(refused instanceof KvExecutionError && refused.detail.kind === "unauthorized", String(refused));
});

test("prepared mutations are bound to their client and call", async () => {
  await using client = FencedLeaseClient.connectDedicated(cluster.connectionString());
  await using other = FencedLeaseClient.connectDedicated(cluster.connectionString());
  const acquire = client.prepareAcquire({ namespace: fresh("prepared"), key: bytes("lock"), holderId: "a", leaseTtlMicros: 5_000_000n });
  assert.deepEqual(acquire.ambiguousRecovery, { kind: "waitOutLeaseTtl", ttlMicros: 5_000_000n });
  await assert.rejects(other.acquire(acquire), /another client/);
  await assert.rejects(client.renew(acquire), /not renew/);
  assert.throws(() => client.prepareAcquire({ v: 2, namespace: "n", key: bytes("k"), holderId: "a", leaseTtlMicros: 1n }), /KV_LEASE_OP_VERSION/);
  await assert.rejects(FencedLeaseClient.connectDedicated(cluster.connectionString()).withAttemptTimeout(0).acquire(acquire), /above zero/);
  assert.ok((await client.acquire(acquire)).token > 0n);
});

test("a leader killed during writes applies each write once", async () => {
  const own = await Cluster.start();
  try {
    await using client = Client.connect(own.connectionString());
    const namespace = fresh("failover");
    const kv = client.kv(namespace);
    const outcomes: string[] = [];
    const writer = async (worker: number): Promise<void> => {
      for (let index = 0; index < 40; index++) {
        try {
          // Applied twice, an expectAbsent write would conflict with
          // itself; applied once, a retry is answered with its first outcome.
          await kv.set(bytes(`w${worker}-${index}`)).bytes(bytes("v")).expectAbsent().commit();
          outcomes.push("applied");
        } catch (error) {
          if (!isAmbiguousMutation(error)) throw error;
          outcomes.push("ambiguous");
        }
      }
    };
    const writers = Promise.all([0, 1, 2, 3].map(writer));
    while (outcomes.length < 20) await sleep(10);
    await own.kill(await own.leader());
    await writers;
    assert.ok(outcomes.filter((outcome) => outcome === "applied").length >= 150, outcomes.join(","));
    await kv.set(bytes("sentinel")).bytes(bytes("end")).send();
    const created = new Map<string, number>();
    for await (const event of client.changes([0n, 0], namespace)) {
      const key = new TextDecoder().decode(event.key);
      if (key === "sentinel") break;
      created.set(key, (created.get(key) ?? 0) + 1);
    }
    assert.deepEqual(new Set(created.values()), new Set([1]), "every key was created exactly once");
  } finally {
    await own.stop();
  }
});

test("a connection cut mid-request is ambiguous, then applied once when repeated", async () => {
  const member = [...cluster.members.values()][0]!;
  const proxy = new CuttingProxy(member.http);
  const address = await proxy.start();
  const namespace = fresh("cut");
  try {
    await using client = Client.connect(`http://${address}?token=${ACCESS_TOKEN}`, { callTimeoutMs: 1_500 });
    const kv = client.kv(namespace);
    await kv.set(bytes("k")).bytes(bytes("0")).send();
    proxy.cutting = true;
    const operation = { op: "set", namespace, key: "k", value: "1" };
    const ambiguous = await rejection(client.write([operation]));
    assert.ok(ambiguous instanceof AmbiguousMutationError, String(ambiguous));
    const recovery = ambiguous.ambiguousRecovery;
    assert.equal(recovery.kind, "retrySameOperation");
    assert.ok(proxy.cut >= 1);
    proxy.cutting = false;
    const opId = recovery.kind === "retrySameOperation" ? recovery.opId : "";
    const repeated = await client.write([operation], opId);
    assert.equal(repeated.op_id, opId);
    assert.equal((await kv.getEntry(bytes("k")))?.version, BigInt(repeated.position));

    const base = await kv.set(bytes("guarded")).bytes(bytes("0")).send();
    const lease = await kv.lease(bytes("lock"), "worker-a", 30_000);
    await using fenced = FencedLeaseClient.connectDedicated(`http://${address}?token=${ACCESS_TOKEN}`).withAttemptTimeout(1_000);
    const write = fenced.prepareCasFenced({
      namespace, key: bytes("guarded"), value: bytes("fenced"), expectVersion: base,
      fenceNamespace: namespace, fenceKey: bytes("lock"), leaseToken: lease.token,
    });
    proxy.cutting = true;
    const cut = await rejection(fenced.casFenced(write));
    assert.ok(cut instanceof AmbiguousMutationError);
    assert.deepEqual(cut.ambiguousRecovery, { kind: "repeatPrepared" });
    proxy.cutting = false;
    const version = await fenced.casFenced(write);
    assert.equal((await kv.getEntry(bytes("guarded")))?.version, version);

    proxy.cutting = true;
    const started = Date.now();
    const unknown = await rejection(kv.lease(bytes("other-lock"), "worker-a", 1_500));
    assert.ok(unknown instanceof AmbiguousMutationError);
    assert.deepEqual(unknown.ambiguousRecovery, { kind: "waitOutLeaseTtl", ttlMicros: 1_500_000n });
    assert.ok(Date.now() - started >= 1_500, "the acquisition waited out its TTL");
    proxy.cutting = false;
    assert.ok((await kv.lease(bytes("other-lock"), "worker-b", 1_000)).token > 0n);
  } finally {
    await proxy.stop();
  }
  const changes: string[] = [];
  for await (const event of laser.changes([0n, 0], namespace)) {
    const key = new TextDecoder().decode(event.key);
    if (key === "k" || key === "guarded") changes.push(`${key}:${event.kind}`);
    if (changes.length === 4) break;
  }
  assert.deepEqual(changes, ["k:created", "k:updated", "guarded:created", "guarded:updated"]);
});
