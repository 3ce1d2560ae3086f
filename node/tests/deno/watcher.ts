// Watches ["status"] through one KV Connect URL and prints each state it
// is given as a JSON line, until it has printed LODE_STATES lines.
// `node/tests/deno_kv.rs` restarts the member serving the watch in between:
// the stream must end cleanly and the client reconnect on its own.

const url = Deno.env.get("LODE_KV_URL")!;
const states = Number(Deno.env.get("LODE_STATES") ?? "3");
using kv = await Deno.openKv(url);
let printed = 0;
for await (const [entry] of kv.watch([["status"]])) {
  const value = entry.value instanceof Uint8Array ? new TextDecoder().decode(entry.value) : entry.value;
  console.log(JSON.stringify({ value, versionstamp: entry.versionstamp }));
  printed++;
  if (printed === states) break;
}
