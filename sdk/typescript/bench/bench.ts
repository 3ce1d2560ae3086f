/**
 * Puts and linearizable gets through the TypeScript SDK: ops/s, p50 and p99.
 *
 *     node dist/bench/bench.js --url "http://127.0.0.1:7201,127.0.0.1:7202,127.0.0.1:7203?token=lode-dev-token" \
 *         --workload put --concurrency 64 --seconds 5
 *
 * Mirrors `lode bench` (256-byte values over 10,000 keys) so the figures sit
 * beside the Rust SDK's. Each of `--concurrency` tasks runs calls back to
 * back until the time is up; the run is bounded by `--seconds` and
 * `--calls-max`.
 */

import { parseArgs } from "node:util";

import { Client, type Kv } from "../src/index.js";

const KEYS = 10_000;
const VALUE = new Uint8Array(256).fill(0x76);
const encoder = new TextEncoder();

function keyOf(index: number): Uint8Array {
  return encoder.encode(`bench/${String(index).padStart(5, "0")}`);
}

interface Run {
  workload: "put" | "get";
  deadline: number;
  budget: number;
  latenciesMs: number[];
}

async function worker(kv: Kv, run: Run): Promise<void> {
  while (performance.now() < run.deadline && run.budget > 0) {
    run.budget -= 1;
    const key = keyOf(Math.floor(Math.random() * KEYS));
    const started = performance.now();
    if (run.workload === "put") await kv.set(key).bytes(VALUE).send();
    else await kv.get(key);
    run.latenciesMs.push(performance.now() - started);
  }
}

function percentile(sorted: number[], fraction: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * fraction))] ?? 0;
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      url: { type: "string" },
      workload: { type: "string", default: "put" },
      concurrency: { type: "string", default: "1" },
      seconds: { type: "string", default: "5" },
      "calls-max": { type: "string", default: "1000000" },
    },
  });
  if (values.url === undefined) throw new Error("--url is required");
  if (values.workload !== "put" && values.workload !== "get") throw new Error("--workload is put or get");
  const concurrency = Number(values.concurrency);
  await using client = Client.connect(values.url);
  const kv = client.kv("bench");
  if (values.workload === "get") {
    // Every key read holds a value, as in `lode bench`.
    for (let start = 0; start < KEYS; start += 500) {
      const writes = [];
      for (let index = start; index < start + 500; index++) writes.push(kv.set(keyOf(index)).bytes(VALUE).send());
      await Promise.all(writes);
    }
  }
  const started = performance.now();
  const run: Run = {
    workload: values.workload,
    deadline: started + Number(values.seconds) * 1000,
    budget: Number(values["calls-max"]),
    latenciesMs: [],
  };
  await Promise.all(Array.from({ length: concurrency }, () => worker(kv, run)));
  const elapsedS = (performance.now() - started) / 1000;
  const sorted = run.latenciesMs.sort((left, right) => left - right);
  console.log(
    JSON.stringify({
      sdk: "typescript",
      workload: values.workload,
      concurrency,
      calls: sorted.length,
      ops_per_s: Math.round(sorted.length / elapsedS),
      p50_ms: Number(percentile(sorted, 0.5).toFixed(2)),
      p99_ms: Number(percentile(sorted, 0.99).toFixed(2)),
    }),
  );
}

await main();
