// Load for KV Connect: WRITERS concurrent sets (READS=1: strong gets) of
// 256-byte values for SECONDS, through LODE_KV_URL; prints ops/s, p50, p99.
// DENO_KV_ACCESS_TOKEN=lode-dev-token deno run --unstable-kv --allow-env --allow-net load-kv.ts
const url = Deno.env.get("LODE_KV_URL")!;
const reads = Deno.env.get("READS") === "1";
const writers = Number(Deno.env.get("WRITERS") ?? "1");
const seconds = Number(Deno.env.get("SECONDS") ?? "10");
const kv = await Deno.openKv(url);
const latencies: number[] = [];
const end = performance.now() + seconds * 1000;
async function writer(id: number) {
  let i = 0;
  while (performance.now() < end) {
    const start = performance.now();
    const r = reads
      ? { ok: (await kv.get(["bench", id % 64, i++ % 1000])).versionstamp !== undefined }
      : await kv.set(["bench", id, i++ % 1000], "x".repeat(256));
    if (!r.ok) throw new Error("refused");
    latencies.push(performance.now() - start);
  }
}
await Promise.all([...Array(writers).keys()].map(writer));
latencies.sort((a, b) => a - b);
const p = (q: number) => latencies[Math.floor(q * (latencies.length - 1))].toFixed(2);
console.log(JSON.stringify({ writers, ops: latencies.length, per_second: Math.round(latencies.length / seconds), p50_ms: p(0.5), p99_ms: p(0.99) }));
kv.close();
