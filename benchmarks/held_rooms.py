"""Many rooms held by one coordinator: how soon it leases them all, its memory, and whether
it keeps every lease through minutes of turns and forced full garbage collections.

    .venv/bin/python -m benchmarks.held_rooms --rooms 10000 --minutes 10

The rooms (4 scripted agents each, every call sleeping 200 ms, a bid timeout long enough
for the calls queued behind the workers) are created and posted to
before the coordinator starts (``PARLEY_COORDINATOR_CAPACITY`` = the rooms, debug signals
on); two workers run from the start. Leased is the time from the coordinator's start to
every room holding its lease. Then turns run for ``--minutes`` while the benchmark sends
the coordinator a SIGUSR1 (a full collection of its heap, coordinator/debug.py) every
``--gc-every`` seconds, waiting each time for the coordinator to log it. Lease churn counts
the rooms it stopped serving for their lease (``room_dropped``, ``lease_lost``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import statistics
import time
from functools import partial
from typing import Any

from benchmarks.harness import Deployment, children, memory_kb, rotating_spec
from benchmarks.many_rooms import lease_losses, unheld_running, wait_until, window_turns
from parley.shared.keys import Keys

AGENTS = 4
SLEEP_S = 0.2
WORKERS = 2
WORKER_CONCURRENCY = 128
# Turns a second all rooms together are assumed to reach at most: each room's script is
# long enough for its share of them over the run, so no room ends before the window does
# (rooms_finished says whether one did); longer scripts only cost Redis and worker memory.
MOST_TURNS_PER_S = 1000
# Two workers answer about 1,300 calls a second, so 10,000 rooms' 40,000 calls of a turn
# wait about 30 s in the queue: long enough bid timeouts keep every room running (with the
# default 30 s most runs would end for want of answers, and their rooms be let go).
BID_TIMEOUT_S = 300


def script_turns(rooms: int, seconds: float) -> int:
    """Turns each room's script holds for a run of ``seconds`` plus its warm-up."""
    return math.ceil(MOST_TURNS_PER_S * seconds / rooms) + 20


def run(rooms: int, minutes: float, gc_every_s: float) -> dict[str, Any]:
    """``rooms`` rooms on one coordinator, then ``minutes`` of turns with forced GCs."""
    window_s = minutes * 60
    env = {"PARLEY_COORDINATOR_CAPACITY": str(rooms), "PARLEY_COORDINATOR_DEBUG_SIGNALS": "true"}
    with Deployment(env=env) as deployment:
        client = deployment.client()
        redis = deployment.redis()
        keys = Keys(deployment.prefix)
        spec = rotating_spec(AGENTS, script_turns(rooms, window_s), SLEEP_S,
                             bid_timeout_s=BID_TIMEOUT_S)
        ids = [client.create_room(spec) for _ in range(rooms)]
        for room in ids:
            client.post(room, "go")
        for _ in range(WORKERS):
            deployment.group.worker("-Q", "parley.agents",
                                    env={"PARLEY_WORKER_CONCURRENCY": str(WORKER_CONCURRENCY)})

        def leased() -> int:
            return sum(1 for owner in redis.mget([keys.lease(r) for r in ids]) if owner)

        started_at = time.monotonic()
        coordinator = deployment.group.coordinator()
        wait_until(lambda: leased() == rooms, 120 + rooms / 20, f"{rooms} rooms leased")
        leased_s = time.monotonic() - started_at
        wait_until(lambda: children(coordinator.pid), 30, "the lease keeper up")
        keeper = children(coordinator.pid)[0]
        log = deployment.group.logs[coordinator.pid]
        opened = time.time()
        gcs = forced_gcs(coordinator.pid, log, window_s, gc_every_s)
        closed = time.time()
        memory, keeper_memory = memory_kb(coordinator.pid), memory_kb(keeper)
        owners = redis.mget([keys.lease(r) for r in ids])
        pipe = redis.pipeline(transaction=False)
        for room in ids:
            pipe.xrange(keys.log(room))
        committed, gaps = window_turns(pipe.execute(), opened, closed)
        pipe = redis.pipeline(transaction=False)
        for room in ids:
            pipe.hmget(keys.state(room), "status", "stop_reason")
        states = pipe.execute()
        # A run ended (its script ran out), or none began: the post still waits in the inbox.
        finished = sum(1 for _, stop_reason in states if stop_reason)
        not_started = sum(1 for status, stop_reason in states
                          if status != b"running" and not stop_reason)
        churn = lease_losses(deployment, [coordinator])
        unheld = unheld_running(redis, keys, ids, owners)
        keeper_starts = log.read_text(errors="replace").count('"event": "keeper_started"')
    return {
        "rooms": rooms, "agents": AGENTS, "sleep_s": SLEEP_S, "workers": WORKERS,
        "minutes": minutes, "gc_every_s": gc_every_s,
        "command": f"python -m benchmarks.held_rooms --rooms {rooms} --minutes {minutes:g} "
                   f"--gc-every {gc_every_s:g}",
        "leased_s": round(leased_s, 1), "window_s": round(closed - opened, 1),
        "turns": committed, "turns_per_s": round(committed / (closed - opened), 1),
        "latency_median_ms": round(statistics.median(gaps), 1) if gaps else None,
        "coordinator_rss_mb": round(memory["VmRSS"] / 1024, 1),
        "coordinator_peak_rss_mb": round(memory["VmHWM"] / 1024, 1),
        "keeper_rss_mb": round(keeper_memory["VmRSS"] / 1024, 1),
        "keeper_peak_rss_mb": round(keeper_memory["VmHWM"] / 1024, 1),
        "peak_rss_mb": round((memory["VmHWM"] + keeper_memory["VmHWM"]) / 1024, 1),
        "forced_gcs": len(gcs), "gc_s": gcs, "gc_max_s": max(gcs, default=0.0),
        "lease_churn": churn, "rooms_without_lease": unheld, "rooms_finished": finished,
        "rooms_not_started": not_started,
        "keeper_starts": keeper_starts,
    }


def forced_gcs(pid: int, log: Any, window_s: float, every_s: float) -> list[float]:
    """Over ``window_s``, a SIGUSR1 to the coordinator every ``every_s`` (the first after
    half a period); the seconds each forced collection took, as the coordinator logged."""
    until = time.monotonic() + window_s
    seconds: list[float] = []
    next_at = time.monotonic() + every_s / 2
    while next_at < until:
        time.sleep(max(0.0, next_at - time.monotonic()))  # the workload's pace, not a wait
        os.kill(pid, signal.SIGUSR1)
        wait_until(partial(more_gcs_than, log, len(seconds)), 60, "the forced GC logged")
        seconds = gc_seconds(log)
        next_at += every_s
    time.sleep(max(0.0, until - time.monotonic()))
    return seconds


def more_gcs_than(log: Any, count: int) -> bool:
    """Whether the coordinator has logged more than ``count`` forced collections."""
    return len(gc_seconds(log)) > count


def gc_seconds(log: Any) -> list[float]:
    """The seconds of each ``debug_gc`` the coordinator's JSON log holds."""
    found = []
    for line in log.read_text(errors="replace").splitlines():
        if '"debug_gc"' in line:
            found.append(float(json.loads(line)["seconds"]))
    return found


def main(argv: list[str] | None = None) -> None:
    """Run from the command line and print the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rooms", type=int, default=10_000)
    parser.add_argument("--minutes", type=float, default=10.0, help="of turns after leasing")
    parser.add_argument("--gc-every", type=float, default=60.0, help="seconds between SIGUSR1s")
    args = parser.parse_args(argv)
    print(json.dumps(run(args.rooms, args.minutes, args.gc_every), indent=1))


if __name__ == "__main__":
    main()
