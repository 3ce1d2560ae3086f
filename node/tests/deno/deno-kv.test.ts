// The Deno KV seed's examples (../shared/seeds/004_…), run by the real
// Deno runtime against a Lode cluster over KV Connect. The only change is
// the database they open: the cluster's URL instead of ":memory:" (the
// queue example needs ":memory:"; the Rust SDK's queue tests cover queues).
// `node/tests/deno_kv.rs` starts the cluster and sets LODE_KV_URL and
// DENO_KV_ACCESS_TOKEN.

import {
  assert,
  assertEquals,
  assertFalse,
  assertNotStrictEquals,
  assertRejects,
} from "@std/assert";

const url = Deno.env.get("LODE_KV_URL")!;

Deno.test("Deno.openKv is behind a flag", async () => {
  using kv = await Deno.openKv(url);
  const commit = await kv.set(["greeting"], "hello");

  assert(commit.ok);
});

Deno.test("absence is an answer, not an error", async () => {
  using kv = await Deno.openKv(url);
  await kv.set(["greeting"], "hello");

  const present = await kv.get<string>(["greeting"]);
  assertEquals(present.key, ["greeting"]);
  assertEquals(present.value, "hello");
  assert(present.versionstamp !== null);

  await kv.delete(["greeting"]);

  const absent = await kv.get<string>(["greeting"]);
  assertEquals(absent.value, null);
  assertEquals(absent.versionstamp, null);
});

Deno.test("a key is an array of typed parts", async () => {
  using kv = await Deno.openKv(url);
  await kv.set(["user", 1], "by number");
  await kv.set(["user", "1"], "by string");
  await kv.set(["user", 1n], "by bigint");

  assertEquals((await kv.get(["user", 1])).value, "by number");
  assertEquals((await kv.get(["user", "1"])).value, "by string");
  assertEquals((await kv.get(["user", 1n])).value, "by bigint");

  await assertRejects(
    () =>
      // @ts-expect-error: Object literal may only specify known properties, and 'id' does not exist in type 'Uint8Array<ArrayBufferLike>'.
      kv.set([{ id: 1 }], "by object"),
    TypeError,
    "expected string, number, bigint, ArrayBufferView, boolean",
  );
});

Deno.test("a value comes back as a copy", async () => {
  using kv = await Deno.openKv(url);
  const original = {
    name: "Robin",
    roles: new Set(["admin"]),
    since: new Date(0),
  };
  await kv.set(["profile"], original);
  original.name = "changed";

  const entry = await kv.get<typeof original>(["profile"]);
  assert(entry.value !== null);
  assertEquals(entry.value.name, "Robin");
  assertEquals(entry.value.roles, new Set(["admin"]));
  assertEquals(entry.value.since, new Date(0));
  assertNotStrictEquals(entry.value, original);

  await assertRejects(
    () => kv.set(["callback"], () => {}),
    TypeError,
    "could not be cloned",
  );
});

Deno.test("keys and values are bounded", async () => {
  using kv = await Deno.openKv(url);

  await assertRejects(
    () => kv.set(["blob"], new Uint8Array(70_000)),
    TypeError,
    "Value too large (max 65536 bytes)",
  );
  await assertRejects(
    () => kv.set(["k".repeat(3000)], "anything"),
    TypeError,
    "Key too large for write (max 2048 bytes)",
  );
});

Deno.test("every write advances the versionstamp", async () => {
  using kv = await Deno.openKv(url);

  const first = await kv.set(["counter"], 1);
  const second = await kv.set(["counter"], 2);

  assertEquals(first.versionstamp.length, 20);
  assert(second.versionstamp > first.versionstamp);

  const entry = await kv.get<number>(["counter"]);
  assertEquals(entry.value, 2);
  assertEquals(entry.versionstamp, second.versionstamp);
});

Deno.test("list walks a prefix in key order", async () => {
  using kv = await Deno.openKv(url);
  await kv.set(["users", "robin"], 1);
  await kv.set(["users"], "the collection itself");
  await kv.set(["usersextra"], "a different first part");
  await kv.set(["users", "ada"], 2);

  const keys: Deno.KvKey[] = [];
  for await (const entry of kv.list({ prefix: ["users"] })) {
    keys.push(entry.key);
  }

  assertEquals(keys, [["users", "ada"], ["users", "robin"]]);
});

Deno.test("numbers only sort numerically when they are numbers", async () => {
  using kv = await Deno.openKv(url);
  for (const id of [10, 9, 2.5]) await kv.set(["by-number", id], id);
  for (const id of ["10", "9", "2.5"]) await kv.set(["by-string", id], id);

  const numbers: unknown[] = [];
  for await (const entry of kv.list({ prefix: ["by-number"] })) {
    numbers.push(entry.key[1]);
  }
  const strings: unknown[] = [];
  for await (const entry of kv.list({ prefix: ["by-string"] })) {
    strings.push(entry.key[1]);
  }

  assertEquals(numbers, [2.5, 9, 10]);
  assertEquals(strings, ["10", "2.5", "9"]);

  await kv.set(["mixed", 0n], "bigint zero");
  await kv.set(["mixed", -1], "number minus one");
  const mixed: unknown[] = [];
  for await (const entry of kv.list({ prefix: ["mixed"] })) {
    mixed.push(entry.value);
  }
  assertEquals(mixed, ["bigint zero", "number minus one"]);
});

Deno.test("getMany reads several keys at one moment", async () => {
  using kv = await Deno.openKv(url);
  await kv.set(["config", "retries"], 3);
  await kv.set(["config", "verbose"], true);

  const [retries, verbose, theme] = await kv.getMany<
    [number, boolean, string]
  >([
    ["config", "retries"],
    ["config", "verbose"],
    ["config", "theme"],
  ]);

  assertEquals(retries.value, 3);
  assertEquals(verbose.value, true);
  assertEquals(theme.value, null);
});

Deno.test("check makes a write conditional on what was read", async () => {
  using kv = await Deno.openKv(url);
  await kv.set(["balance"], 100);

  const read = await kv.get<number>(["balance"]);
  assert(read.value !== null);

  const commit = await kv.atomic()
    .check(read)
    .set(["balance"], read.value - 30)
    .commit();
  assert(commit.ok);

  const stale = await kv.atomic()
    .check(read)
    .set(["balance"], read.value - 30)
    .commit();
  assertFalse(stale.ok);

  assertEquals((await kv.get(["balance"])).value, 70);
});

Deno.test("one commit keeps two keys telling one story", async () => {
  using kv = await Deno.openKv(url);
  const user = { id: 1, email: "robin@example.com", name: "Robin" };

  const commit = await kv.atomic()
    .check({ key: ["users", user.id], versionstamp: null })
    .check({ key: ["users_by_email", user.email], versionstamp: null })
    .set(["users", user.id], user)
    .set(["users_by_email", user.email], user.id)
    .commit();
  assert(commit.ok);

  const byEmail = await kv.get<number>(["users_by_email", user.email]);
  assert(byEmail.value !== null);
  const found = await kv.get<typeof user>(["users", byEmail.value]);
  assertEquals(found.value?.name, "Robin");

  const duplicate = await kv.atomic()
    .check({ key: ["users_by_email", user.email], versionstamp: null })
    .set(["users", 2], { ...user, id: 2 })
    .set(["users_by_email", user.email], 2)
    .commit();
  assertFalse(duplicate.ok);
});

Deno.test("sum counts without a read", async () => {
  using kv = await Deno.openKv(url);

  await kv.atomic().sum(["visits"], 5n).commit();
  await kv.atomic().sum(["visits"], 3n).commit();

  const entry = await kv.get<Deno.KvU64>(["visits"]);
  assertEquals(entry.value, new Deno.KvU64(8n));
  assertEquals(entry.value?.value, 8n);
});

Deno.test("expiry is a deadline, not a schedule", async () => {
  using kv = await Deno.openKv(url);
  await kv.set(["session"], "token", { expireIn: 100 });

  assertEquals((await kv.get(["session"])).value, "token");

  await new Promise((resolve) => setTimeout(resolve, 250));
  assertEquals((await kv.get(["session"])).value, "token");
});

Deno.test("watch turns a key into a stream", async () => {
  using kv = await Deno.openKv(url);
  const reader = kv.watch<[string]>([["status"]]).getReader();

  const initial = await reader.read();
  assert(!initial.done);
  assertEquals(initial.value[0].versionstamp, null);

  await kv.set(["status"], "deploying");

  const next = await reader.read();
  assert(!next.done);
  assertEquals(next.value[0].value, "deploying");

  await reader.cancel();
});
