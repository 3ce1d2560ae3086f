"""Puts and linearizable gets through the Python SDK: ops/s, p50 and p99.

    python bench.py --url "http://127.0.0.1:7201,127.0.0.1:7202,127.0.0.1:7203?token=lode-dev-token" \
        --workload put --concurrency 64 --seconds 5

Mirrors `lode bench` (256-byte values over 10,000 keys) so the figures sit
beside the Rust SDK's. Each of `--concurrency` tasks runs calls back to back
until the time is up; the run is bounded by `--seconds` and `--calls-max`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time

from lode_sdk import Client
from lode_sdk.kv import Kv

KEYS = 10_000
VALUE = b"v" * 256


async def worker(kv: Kv, workload: str, deadline: float, latencies: list[float], budget: list[int]) -> None:
    rng = random.Random()
    while time.monotonic() < deadline and budget[0] > 0:
        budget[0] -= 1
        key = f"bench/{rng.randrange(KEYS):05}"
        started = time.perf_counter()
        if workload == "put":
            await kv.set(key).bytes(VALUE).send()
        else:
            await kv.get(key)
        latencies.append(time.perf_counter() - started)


def percentile(sorted_values: list[float], fraction: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(len(sorted_values) * fraction))]


async def main() -> None:
    parser = argparse.ArgumentParser(description="Puts and linearizable gets through the Python SDK")
    parser.add_argument("--url", required=True)
    parser.add_argument("--workload", choices=["put", "get"], required=True)
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--calls-max", type=int, default=1_000_000)
    arguments = parser.parse_args()
    async with Client.connect(arguments.url) as client:
        kv = client.kv("bench")
        if arguments.workload == "get":
            # Every key gets read holds a value, as in `lode bench`.
            for index in range(0, KEYS, 500):
                await asyncio.gather(*(kv.set(f"bench/{key:05}").bytes(VALUE).send() for key in range(index, index + 500)))
        latencies: list[float] = []
        budget = [arguments.calls_max]
        started = time.monotonic()
        deadline = started + arguments.seconds
        await asyncio.gather(
            *(worker(kv, arguments.workload, deadline, latencies, budget) for _ in range(arguments.concurrency))
        )
        elapsed = time.monotonic() - started
    latencies.sort()
    print(
        json.dumps(
            {
                "sdk": "python",
                "workload": arguments.workload,
                "concurrency": arguments.concurrency,
                "calls": len(latencies),
                "ops_per_s": round(len(latencies) / elapsed),
                "p50_ms": round(percentile(latencies, 0.50) * 1000, 2),
                "p99_ms": round(percentile(latencies, 0.99) * 1000, 2),
            }
        )
    )


if __name__ == "__main__":
    asyncio.run(main())
