/**
 * Every TypeScript example of the KV seed, run against a real 3-member
 * cluster. Each is the seed's text with two changes only: the import (this
 * package for `@laserdata/laser-sdk`) and the connection (`laser` and
 * `connectionString` name this cluster); the FileStore example's directory
 * is a temporary one.
 */

import assert from "node:assert/strict";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";

import { Client, FencedLeaseClient, FileStore, isAmbiguousMutation, type StateStore } from "../src/index.js";
import { Cluster } from "./cluster.js";

let cluster: Cluster;
let connectionString: string;
let laser: Client;

before(async () => {
  cluster = await Cluster.start();
  connectionString = cluster.connectionString();
  laser = Client.connect(connectionString);
});

after(async () => {
  await laser.close();
  await cluster.stop();
});

test("expiry and bulk delete", async () => {
  const kv = laser.kv("config")
  await kv.set(new TextEncoder().encode("service:auth")).json({ log_level: "info" }).send();
  await kv.set(new TextEncoder().encode("session:1")).bytes(new Uint8Array([1])).send();

  const key = new TextEncoder().encode("service:auth")
  await kv.expire(key, 3_600_000) // one hour from now
  await kv.expireAt(key, BigInt(Date.now()) * 1000n + 86_400_000_000n) // an absolute time
  await kv.expire(key) // clear the expiry

  const removed = await kv.deleteMany().prefix(new TextEncoder().encode("session:")).send()

  assert.equal(removed, 1n);
  assert.equal((await kv.getEntry(key))?.expiresAtMicros, undefined);
});

test("locks and fenced writes", async () => {
  await laser.kv("config").set(new TextEncoder().encode("service:auth")).json({ log_level: "info" }).send();

  const kv = laser.kv("config")
  const key = new TextEncoder().encode("service:auth")
  const lock = new TextEncoder().encode("lease:service:auth")
  const holder = "worker-a"
  const lease = await kv.lease(lock, holder, 30_000)
  try {
    const entry = await kv.getEntryAtLeast(key, lease.position)
    if (entry === undefined) throw new Error("config entry missing")
    await kv
      .casFenced(key, "config", lock, lease.token)
      .json({ log_level: "debug" })
      .expectVersion(entry.version)
      .commit()
    await kv.renewLease(lock, holder, lease.token, 30_000)
  } finally {
    await kv.release(lock, holder, lease.token)
  }

  assert.deepEqual(await kv.getTyped(key), { log_level: "debug" });
  assert.equal(await kv.leaseInfo(lock), undefined);
});

test("prepared coordination requests", async () => {
  const client = FencedLeaseClient.connectDedicated(connectionString).withAttemptTimeout(5_000)
  const key = new TextEncoder().encode("lease:service:auth")
  let renewal;
  try {
    const lease = await client.acquire(
      client.prepareAcquire({
        namespace: "config",
        key,
        holderId: "worker-a",
        leaseTtlMicros: 30_000_000n
      })
    )

    renewal = client.prepareRenew({
      namespace: "config",
      key,
      holderId: "worker-a",
      leaseToken: lease.token,
      leaseTtlMicros: 30_000_000n
    })
    try {
      await client.renew(renewal)
    } catch (error) {
      if (!isAmbiguousMutation(error)) throw error
      // renewal.ambiguousRecovery is { kind: "repeatPrepared" }
      await client.renew(renewal)
    }
    assert.deepEqual(renewal.ambiguousRecovery, { kind: "repeatPrepared" });
    assert.equal((await client.renew(renewal)).token, lease.token, "a repeat is answered, not applied twice");
    assert.equal(await client.release(client.prepareRelease({ namespace: "config", key, holderId: "worker-a", leaseToken: lease.token })), true);
  } finally {
    await client.close()
  }
  await assert.rejects(client.renew(renewal), { name: "InvalidError" }, "a closed client sends nothing");
});

test("await using closes the dedicated client", async () => {
  let escaped: FencedLeaseClient;
  {
    await using client = FencedLeaseClient.connectDedicated(connectionString).withAttemptTimeout(5_000);
    escaped = client;
    const lease = await client.acquire(
      client.prepareAcquire({ namespace: "config", key: new TextEncoder().encode("lease:disposed"), holderId: "a", leaseTtlMicros: 1_000_000n }),
    );
    assert.ok(lease.token > 0n);
  }
  await assert.rejects(
    escaped.get({ namespace: "config", key: new TextEncoder().encode("k"), position: 1n }),
    /the client is closed/,
  );
});

test("local state stores", async () => {
  const directory = mkdtempSync(join(tmpdir(), "agent-state-"));
  const store: StateStore = new FileStore(join(directory, "agent-state"))
  await store.set("cursor:metrics", new TextEncoder().encode("42"))
  const saved = await store.get("cursor:metrics")
  await store.delete("cursor:metrics")

  assert.deepEqual(saved, new TextEncoder().encode("42"));
  assert.equal(await store.get("cursor:metrics"), undefined);
});

test("session links", async () => {
  const session = laser.session("agents", "session-7");

  const flags = session.kv("ticket-flags")
  await flags.set(new TextEncoder().encode("ticket:42")).json({ escalated: true }).send()

  const linked = laser.kv("ticket-flags").inSession(session.reference())

  await linked.set(new TextEncoder().encode("ticket:43")).json({ escalated: false }).send();
  assert.deepEqual((await laser.kv("ticket-flags").getEntry(new TextEncoder().encode("ticket:42")))?.session, session.reference());
  const keys = await laser.sessionKeys(session.reference());
  assert.deepEqual(keys.map(([namespace, key]) => [namespace, new TextDecoder().decode(key)]), [
    ["ticket-flags", "ticket:42"],
    ["ticket-flags", "ticket:43"],
  ]);
});
