// Writes ["writer", i] = i for i in 0..COUNT through one KV Connect URL,
// one commit at a time, printing each committed key and versionstamp as a
// JSON line. `node/tests/deno_kv.rs` kills the leader while this runs: the
// Deno client must carry on after its retries, and every line printed must
// be in the cluster afterwards.

const url = Deno.env.get("LODE_KV_URL")!;
const count = Number(Deno.env.get("LODE_WRITES") ?? "200");
using kv = await Deno.openKv(url);
for (let index = 0; index < count; index++) {
  const commit = await kv.set(["writer", index], index);
  if (!commit.ok) throw new Error(`write ${index} was refused`);
  console.log(JSON.stringify({ index, versionstamp: commit.versionstamp }));
}
