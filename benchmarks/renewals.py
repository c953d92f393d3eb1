"""What one renewal of many leases costs the process that sends it (the lease keeper):
its CPU and its round trip against an idle Redis, ``--rooms`` leases held by one
coordinator, renewed ``--times`` times after a warm-up.

    .venv/bin/python -m benchmarks.renewals --rooms 10000 --times 10

The leases live under a key prefix of the run's own on the Redis at ``PARLEY_REDIS_URL``,
deleted at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
import uuid
from typing import Any

import redis.asyncio as aioredis

from parley.coordinator.lease import Lease, Leases
from parley.shared.keys import Keys
from parley.shared.scripts import Scripts
from parley.shared.settings import Settings

WARM_UP = 3


async def measure(rooms: int, times: int) -> dict[str, Any]:
    """Renew ``rooms`` held leases ``times`` times; CPU and wall time per renewal."""
    client = aioredis.Redis.from_url(Settings().redis_url)
    keys = Keys(f"parley-bench-{uuid.uuid4().hex[:8]}")
    leases = Leases(client, keys, Scripts(client), "bench", 5.0)
    held = [Lease(f"room-{i:06d}", "bench", 1) for i in range(rooms)]
    try:
        pipe = client.pipeline(transaction=False)
        for lease in held:
            pipe.set(keys.lease(lease.room), lease.token, px=60_000)
        await pipe.execute()
        for _ in range(WARM_UP):
            await leases.renew(held)
        wall, cpu = time.perf_counter(), time.process_time()
        for _ in range(times):
            renewed = await leases.renew(held)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        assert all(renewed), "every lease is held: every renewal must succeed"
    finally:
        names = [key async for key in client.scan_iter(match=f"{keys.prefix}:*", count=10_000)]
        for start in range(0, len(names), 10_000):
            await client.delete(*names[start:start + 10_000])
        await client.aclose()
    return {"rooms": rooms, "renewals": times,
            "cpu_ms_per_renewal": round(cpu * 1000 / times, 1),
            "wall_ms_per_renewal": round(wall * 1000 / times, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rooms", type=int, default=10_000)
    parser.add_argument("--times", type=int, default=10)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(measure(args.rooms, args.times)), indent=1))


if __name__ == "__main__":
    main()
