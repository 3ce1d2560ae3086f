// Sets and reads back one key with the token in DENO_KV_ACCESS_TOKEN, and
// prints "allowed", or "refused: <reason>" when the cluster refuses it.
// `node/tests/deno_kv.rs` runs it with tokens of users with and without a
// grant on the Deno KV namespace.

const url = Deno.env.get("LODE_KV_URL")!;
try {
  using kv = await Deno.openKv(url);
  const commit = await kv.set(["profile", "p1"], "mine");
  if (!commit.ok) throw new Error("the write was not committed");
  const read = await kv.get(["profile", "p1"]);
  console.log(read.value === "mine" ? "allowed" : `read back ${String(read.value)}`);
} catch (error) {
  console.log(`refused: ${error}`);
}
