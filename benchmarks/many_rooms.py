"""Many rooms live at once: aggregate turns per second, per-turn latency under that load and
the coordinators' resident memory, with one coordinator and then with two.

    .venv/bin/python -m benchmarks.many_rooms --rooms 100 --window 5

Each room has 4 scripted agents whose every call sleeps 200 ms (standing in for an LLM's
latency). The workers start only once the coordinators have leased every room, so all
rooms are live from the first measured second instead of trickling in.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import urllib.request
from collections import Counter
from typing import Any

from benchmarks.harness import Deployment, cpu_s, memory_kb, p95, rotating_spec
from parley.processes import free_port
from parley.shared.keys import Keys

AGENTS = 4
SLEEP_S = 0.2
# Long enough that no room runs out of script within the warm-up and the window.
TURNS = 40


def wait_until(condition, timeout_s: float, what: str) -> None:  # noqa: ANN001
    """Poll ``condition`` until true; raise TimeoutError naming ``what`` otherwise."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} did not happen within {timeout_s:g}s")
        time.sleep(0.2)


def run(rooms: int, coordinators: int, workers: int, concurrency: int, warmup_s: float,
        window_s: float, env: dict[str, str] | None = None,
        workers_first: bool = False) -> dict[str, Any]:
    """One deployment (its processes started with ``env``): ``rooms`` live rooms on
    ``coordinators``, measured over a window. With ``workers_first`` the workers start
    before the rooms are leased: leasing 10,000 rooms takes minutes, longer than a room's
    first turn waits for its answers."""
    with Deployment(env=env) as deployment:
        client = deployment.client()
        redis = deployment.redis()
        keys = Keys(deployment.prefix)
        ports = [free_port() for _ in range(coordinators)]
        started = [deployment.group.coordinator("--health-port", str(port)) for port in ports]
        wait_until(lambda: redis.zcard(keys.coordinators) >= coordinators, 60, "coordinators up")
        idle_kb = [memory_kb(p.pid)["VmRSS"] for p in started]
        spec = rotating_spec(AGENTS, TURNS, SLEEP_S)
        ids = [client.create_room(spec) for _ in range(rooms)]
        for room in ids:
            client.post(room, "go")

        def leased() -> int:
            return sum(1 for owner in redis.mget([keys.lease(r) for r in ids]) if owner)

        def start_workers() -> None:
            for _ in range(workers):
                deployment.group.worker("-Q", "parley.agents",
                                        env={"PARLEY_WORKER_CONCURRENCY": str(concurrency)})

        if workers_first:
            start_workers()
        # Creating and leasing take about a millisecond a room each (more under load).
        wait_until(lambda: leased() == rooms, 120 + rooms / 20, f"{rooms} rooms leased")
        if not workers_first:
            start_workers()
        wait_until(lambda: redis.xlen(keys.bids(ids[-1])) > 0, 120, "first bids")
        time.sleep(warmup_s)
        pids = {"redis": deployment.redis_process.pid,
                **{f"coordinator{i}": p.pid for i, p in enumerate(started)},
                **{f"worker{i}": p.pid for i, p in enumerate(deployment.group.processes[coordinators:])}}
        cpu_before = {name: cpu_s(pid) for name, pid in pids.items()}
        renewed_before = sum(map(lease_renewals, ports))
        opened = time.time()
        time.sleep(window_s)
        closed = time.time()
        renewed = sum(map(lease_renewals, ports)) - renewed_before
        messages, calls = (sum(metric(port, name) for port in ports)
                           for name in ("parley_call_messages_total", "parley_calls_sent_total"))
        cpu = {name: round((cpu_s(pid) - cpu_before[name]) / (closed - opened), 2)
               for name, pid in pids.items()}
        memory = {f"coordinator{i}": memory_kb(p.pid) for i, p in enumerate(started)}
        owners = redis.mget([keys.lease(r) for r in ids])
        holders = Counter(owner.decode().rsplit(":", 1)[0] for owner in owners if owner)
        pipe = redis.pipeline(transaction=False)
        for room in ids:
            pipe.xrange(keys.log(room))
        committed, gaps = window_turns(pipe.execute(), opened, closed)
        churn = lease_losses(deployment, started)
        unheld = unheld_running(redis, keys, ids, owners)
    return {
        "rooms": rooms, "coordinators": coordinators, "workers": workers,
        "worker_concurrency": concurrency, "window_s": round(closed - opened, 1),
        "turns": committed, "turns_per_s": round(committed / (closed - opened), 1),
        "latency_median_ms": round(statistics.median(gaps), 1) if gaps else None,
        "latency_p95_ms": round(p95(gaps), 1) if gaps else None,
        "coordinator_idle_rss_mb": [round(kb / 1024, 1) for kb in idle_kb],
        "coordinator_rss_mb": [round(m["VmRSS"] / 1024, 1) for m in memory.values()],
        "coordinator_peak_rss_mb": [round(m["VmHWM"] / 1024, 1) for m in memory.values()],
        "rooms_per_coordinator": sorted(holders.values(), reverse=True),
        "rooms_without_lease": unheld,
        "lease_churn": churn,
        "lease_renewals_per_s": round(renewed / (closed - opened), 1),
        # Since the coordinators started; 4 (one room's calls) when no message is shared.
        "calls_per_message": round(calls / messages, 2) if messages else None,
        "settings": env or {},
        "cpu_cores": cpu,
    }


def lease_renewals(port: int) -> float:
    """The leases a coordinator has renewed so far, from its metrics page."""
    return metric(port, "parley_lease_renewals_total")


def metric(port: int, name: str) -> float:
    """A coordinator's unlabelled counter, from its metrics page (0 if it has none)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as page:
        for line in page.read().decode().splitlines():
            if line.startswith(f"{name} "):
                return float(line.split()[1])
    return 0.0


def unheld_running(redis: Any, keys: Keys, ids: list[str], owners: list) -> int:
    """Rooms whose run is still going but that no coordinator holds right now."""
    unheld = [room for room, owner in zip(ids, owners, strict=True) if not owner]
    pipe = redis.pipeline(transaction=False)
    for room in unheld:
        pipe.hget(keys.state(room), "status")
    return sum(1 for status in pipe.execute() if status == b"running")


def lease_losses(deployment: Deployment, coordinators: list) -> int:
    """How many times a coordinator stopped work on a room for its lease: dropped because
    it could not renew the lease in time, or refused at a fenced write."""
    logs = [deployment.group.logs[p.pid].read_text(errors="replace") for p in coordinators]
    return sum(text.count(f'"event": "{event}"') for text in logs
               for event in ("room_dropped", "lease_lost"))


def window_turns(logs: list[list], opened: float, closed: float) -> tuple[int, list[float]]:
    """Agent messages committed inside the window, and each room's gaps between them
    (a turn's latency under load: how long a room waited for its next message)."""
    committed = 0
    gaps: list[float] = []
    for entries in logs:
        stamps = [float(fields[b"ts"]) for _, fields in entries[1:]]
        committed += sum(1 for ts in stamps if opened <= ts < closed)
        gaps += [(later - earlier) * 1000 for earlier, later in zip(stamps, stamps[1:], strict=False)
                 if opened <= later < closed]
    return committed, gaps


def main(argv: list[str] | None = None) -> None:
    """Run one configuration from the command line and print its JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rooms", type=int, default=1000)
    parser.add_argument("--coordinators", type=int, default=1)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=128)
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--window", type=float, default=20.0)
    args = parser.parse_args(argv)
    print(json.dumps(run(args.rooms, args.coordinators, args.workers, args.concurrency,
                         args.warmup, args.window), indent=1))


if __name__ == "__main__":
    main()
