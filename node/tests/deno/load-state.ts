// Load for the State API over HTTP: WORKERS concurrent calls of FN (update:
// an increment and a nested append; get) for SECONDS against STATE_URL
// (http://127.0.0.1:7201/state/v1 under lode dev); prints ops/s, p50, p99.
const base = Deno.env.get("STATE_URL")!;
const workers = Number(Deno.env.get("WORKERS") ?? "1");
const seconds = Number(Deno.env.get("SECONDS") ?? "10");
const fn = Deno.env.get("FN") ?? "update";
const headers = { authorization: "Bearer lode-dev-token", "content-type": "application/json" };
const latencies: number[] = [];
const end = performance.now() + seconds * 1000;
async function worker(id: number) {
  let i = 0;
  while (performance.now() < end) {
    const body = fn === "update"
      ? { scope: "bench", key: `k${id}-${i++ % 100}`, ops: [{ type: "increment", path: "count", by: 1 }, { type: "append", path: ["log", "events"], value: i }] }
      : { scope: "bench", key: `k${id}-${i++ % 100}` };
    const start = performance.now();
    const response = await fetch(`${base}/${fn}`, { method: "POST", headers, body: JSON.stringify(body) });
    await response.text();
    if (!response.ok) throw new Error(`status ${response.status}`);
    latencies.push(performance.now() - start);
  }
}
await Promise.all([...Array(workers).keys()].map(worker));
latencies.sort((a, b) => a - b);
const p = (q: number) => latencies[Math.floor(q * (latencies.length - 1))].toFixed(2);
console.log(JSON.stringify({ fn, workers, per_second: Math.round(latencies.length / seconds), p50_ms: p(0.5), p99_ms: p(0.99) }));
