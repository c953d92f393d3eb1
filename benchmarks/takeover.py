"""Takeover latency: from ``kill -9`` of a room's lease holder to the room's next committed
message, at the default lease ttl.

    .venv/bin/python -m benchmarks.takeover [--kills 8] [--rooms 6] [--ttl 5] [--json FILE]

Two coordinators and one worker serve rooms of scripted agents that never lull, on a
redis-server of the benchmark's own. Each round waits a random fraction of a renewal
period, kills the coordinator holding the most rooms with SIGKILL, starts a replacement,
and for every room the victim held takes the time from the kill to the room's next message
(its commit stamp, written by the new holder). "Failover and durability" (docs/operations) states
the bound these are compared with: lease ttl + scan interval + the resumed turn.

    .venv/bin/python -m benchmarks.takeover --active 1000 [--json FILE]

At scale (``--active``): one coordinator holds that many active rooms with a standby
running (and two workers); once every room has had five turns, one ``kill -9`` of the
holder at a random point of its renewal period; per room the time from the kill to its
next committed message, and every room's log checked afterwards for a (run, turn)
committed twice.
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import statistics
import subprocess
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from benchmarks.harness import bench_directory
from parley.client import Client
from parley.processes import ProcessGroup
from parley.shared.settings import Settings
from tests.chaos.harness import PrivateRedis, parley_env, random_scripts
from tests.support.polling import wait_until
from tests.support.rooms import scripted_spec

QUEUE = "parley.takeover-bench"
BID_SLEEP_S = (0.05, 0.2)  # each agent's call; a turn takes about the slowest of three


def holders(client: Client, rooms: list[str]) -> dict[str, str]:
    """Each room's lease holder (coordinator id), for rooms that have one."""
    owners = {}
    for room in rooms:
        token = client.store.lease_holder(room)
        if token:
            owners[room] = token.rpartition(":")[0]
    return owners


def next_message_after(client: Client, room: str, seq: int, timeout_s: float) -> float:
    """The commit stamp of the room's first message after ``seq``."""
    def later() -> float:
        messages = client.messages(room, after_seq=seq)
        return messages[0].ts if messages else 0.0

    return wait_until(later, timeout_s, f"room {room} to commit after seq {seq}", every_s=0.02)


class Cluster:
    """The coordinators under test, by id, and the rooms they serve."""

    def __init__(self, group: ProcessGroup, client: Client, settings: Settings) -> None:
        self.group = group
        self.client = client
        self.settings = settings
        self.coordinators: dict[str, subprocess.Popen[bytes]] = {}
        self.rooms: list[str] = []

    def start_coordinator(self) -> None:
        """One more coordinator, with an id of its own."""
        coordinator_id = f"takeover-{uuid.uuid4().hex[:6]}"
        self.coordinators[coordinator_id] = self.group.coordinator("--id", coordinator_id)

    def kill_busiest(self, rng: random.Random) -> list[float]:
        """At a random point of the renewal cycle, kill -9 the coordinator holding the
        most rooms and start a replacement; the seconds until each of its rooms committed
        a message again."""
        ttl_s = self.settings.lease_ttl_s
        wait_until(lambda: len(holders(self.client, self.rooms)) == len(self.rooms),
                   3 * ttl_s + 10, "every room to be held")
        time.sleep(rng.uniform(0, self.settings.lease_renew_every_s))
        owners = holders(self.client, self.rooms)
        victim, _ = Counter(owners.values()).most_common(1)[0]
        last_seq = {room: self.client.state(room).last_seq
                    for room, owner in owners.items() if owner == victim}
        killed_at = time.time()
        self.group.kill(self.coordinators.pop(victim), signal.SIGKILL)
        self.start_coordinator()
        return [next_message_after(self.client, room, seq, 3 * ttl_s + 30) - killed_at
                for room, seq in last_seq.items()]


def run(kills: int, rooms: int, ttl_s: float | None, seed: int) -> dict[str, Any]:
    """Serve ``rooms`` rooms and kill their lease holders ``kills`` times."""
    rng = random.Random(seed)
    overrides = {} if ttl_s is None else {"lease_ttl_s": ttl_s}
    settings = Settings(**overrides)
    # Enough turns that no room runs out of script before the last kill.
    turns = int(kills * (settings.lease_ttl_s + 3) / 0.1) + 100
    with bench_directory("parley-takeover-") as directory, \
            PrivateRedis(Path(directory)) as server, \
            ProcessGroup(Path(directory), parley_env(server.url, "takeover", **overrides)) as group:
        client = Client(settings.model_copy(update={"redis_url": server.url,
                                                    "key_prefix": "takeover"}))
        cluster = Cluster(group, client, settings)
        group.worker("-Q", QUEUE, "-c", "32")
        cluster.start_coordinator()
        cluster.start_coordinator()
        for _ in range(rooms):
            spec = scripted_spec(random_scripts(rng, 3, turns, all_keen=True, sleep_s=BID_SLEEP_S),
                                 queue=QUEUE, max_messages=turns + 10, bid_timeout_s=30)
            cluster.rooms.append(client.create_room(spec))
            client.post(cluster.rooms[-1], "Keep talking.")
        latencies = []
        for round_number in range(1, kills + 1):
            gaps = cluster.kill_busiest(rng)
            print(f"kill {round_number}: {len(gaps)} room(s) committed again after "
                  + ", ".join(f"{gap:.2f}s" for gap in gaps), flush=True)
            latencies.extend(gaps)
    return {
        "lease_ttl_s": settings.lease_ttl_s,
        "lease_renew_s": round(settings.lease_renew_every_s, 3),
        "scan_interval_s": settings.scan_interval_s,
        "kills": kills,
        "rooms": rooms,
        "samples": len(latencies),
        "median_s": round(statistics.median(latencies), 3),
        "max_s": round(max(latencies), 3),
        "min_s": round(min(latencies), 3),
        "bound_s": round(settings.lease_ttl_s + settings.scan_interval_s + BID_SLEEP_S[1], 3),
        "latencies_s": [round(gap, 3) for gap in latencies],
    }


SCALE_WORKERS = 2
SCALE_WORKER_CONCURRENCY = "128"
# How long a room's script lasts at scale: leasing every room, the wait before the kill,
# the takeover and the check, at the pace a loaded machine gives 1,000 rooms.
SCALE_TURNS = 150
# The post and five turns: a turn's calls go out in one message, to one of the two
# workers, so each room has most likely reached both (all but 1 in 16).
WARM_MESSAGES = 6


def run_at_scale(rooms: int, ttl_s: float | None, seed: int) -> dict[str, Any]:
    """One coordinator holding ``rooms`` active rooms, a standby, one kill -9 of the holder."""
    rng = random.Random(seed)
    overrides = {} if ttl_s is None else {"lease_ttl_s": ttl_s}
    settings = Settings(**overrides)
    with bench_directory("parley-takeover-") as directory, \
            PrivateRedis(Path(directory)) as server, \
            ProcessGroup(Path(directory), {**parley_env(server.url, "takeover", **overrides),
                                           "PARLEY_COORDINATOR_CAPACITY": str(rooms)}) as group:
        client = Client(settings.model_copy(update={"redis_url": server.url,
                                                    "key_prefix": "takeover"}))
        cluster = Cluster(group, client, settings)
        for _ in range(SCALE_WORKERS):
            group.worker("-Q", QUEUE, "-c", SCALE_WORKER_CONCURRENCY)
        for _ in range(rooms):
            spec = scripted_spec(random_scripts(rng, 3, SCALE_TURNS, all_keen=True,
                                                sleep_s=BID_SLEEP_S),
                                 queue=QUEUE, max_messages=SCALE_TURNS + 10, bid_timeout_s=30)
            cluster.rooms.append(client.create_room(spec))
            client.post(cluster.rooms[-1], "Keep talking.")
        cluster.start_coordinator()
        (holder,) = cluster.coordinators
        wait_until(lambda: len(holders(client, cluster.rooms)) == rooms, 120 + rooms / 20,
                   f"one coordinator to hold all {rooms} rooms")
        # Active means under way: every room has had turns on the workers (which read
        # each room's spec once, on its first call) before the kill, so the takeover is
        # timed, not the deployment's start.
        wait_committed(client, cluster.rooms, WARM_MESSAGES, 120 + rooms / 10)
        cluster.start_coordinator()  # the standby: nothing is left for it to take
        wait_until(lambda: len(client.store.redis.zrange(client.store.keys.coordinators, 0, -1))
                   >= 2, 60, "the standby up")
        time.sleep(rng.uniform(0, settings.lease_renew_every_s))  # a random point of the cycle
        killed_at = time.time()
        group.kill(cluster.coordinators.pop(holder), signal.SIGKILL)
        gaps = next_commits(client, cluster.rooms, killed_at, 3 * settings.lease_ttl_s + 60)
        (standby,) = cluster.coordinators
        standby_holds = sum(1 for owner in holders(client, cluster.rooms).values()
                            if owner == standby)
        duplicates = committed_twice(client, cluster.rooms)
    latencies = sorted(gaps.values())
    return {
        "command": f"python -m benchmarks.takeover --active {rooms}",
        "lease_ttl_s": settings.lease_ttl_s, "rooms": rooms,
        "committed_again": len(gaps),
        "median_s": round(statistics.median(latencies), 3) if latencies else None,
        "p95_s": round(latencies[max(0, -(-95 * len(latencies) // 100) - 1)], 3)
        if latencies else None,
        "max_s": round(max(latencies), 3) if latencies else None,
        "min_s": round(min(latencies), 3) if latencies else None,
        "duplicates": duplicates, "standby_holds": standby_holds,
    }


def wait_committed(client: Client, rooms: list[str], messages: int, timeout_s: float) -> None:
    """Wait until every room's log holds at least ``messages`` messages."""
    redis, keys = client.store.redis, client.store.keys

    def short() -> int:
        pipe = redis.pipeline(transaction=False)
        for room in rooms:
            pipe.hget(keys.state(room), "last_seq")
        return sum(1 for seq in pipe.execute() if int(seq or 0) < messages)

    wait_until(lambda: short() == 0, timeout_s, f"every room to hold {messages} messages",
               every_s=0.2)


def next_commits(client: Client, rooms: list[str], killed_at: float,
                 timeout_s: float) -> dict[str, float]:
    """Per room, the seconds from the kill to its first message committed after it (by
    its commit stamp), polling every room's log tail until each has one or time is up."""
    found: dict[str, float] = {}
    deadline = time.monotonic() + timeout_s
    redis, keys = client.store.redis, client.store.keys
    while len(found) < len(rooms) and time.monotonic() < deadline:
        waiting = [room for room in rooms if room not in found]
        pipe = redis.pipeline(transaction=False)
        for room in waiting:
            pipe.xrevrange(keys.log(room), count=8)
        for room, entries in zip(waiting, pipe.execute(), strict=True):
            later = [float(fields[b"ts"]) for _, fields in entries
                     if float(fields[b"ts"]) >= killed_at]
            if later:
                found[room] = min(later) - killed_at
        time.sleep(0.05)  # the poll's pace
    return found


def committed_twice(client: Client, rooms: list[str]) -> int:
    """Agent messages whose (room, run, turn) another message of the log already has."""
    duplicates = 0
    for room in rooms:
        turns = [(m.run, m.turn) for m in client.messages(room) if m.turn is not None]
        duplicates += len(turns) - len(set(turns))
    return duplicates


def main() -> None:
    """Run the benchmark and print (and optionally write) its summary."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=8)
    parser.add_argument("--rooms", type=int, default=6)
    parser.add_argument("--ttl", type=float, default=None, help="lease ttl (default: the default)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--active", type=int, metavar="ROOMS",
                        help="at scale: one coordinator holding ROOMS active rooms, one kill")
    args = parser.parse_args()
    if args.active:
        result = run_at_scale(args.active, args.ttl, args.seed)
        print(json.dumps(result, indent=1))
        if args.json:
            args.json.write_text(json.dumps(result, indent=2) + "\n")
        return
    result = run(args.kills, args.rooms, args.ttl, args.seed)
    print(f"takeover after kill -9 (ttl {result['lease_ttl_s']:g}s, renew every "
          f"{result['lease_renew_s']:g}s, scan {result['scan_interval_s']:g}s; "
          f"{result['samples']} rooms over {result['kills']} kills): median "
          f"{result['median_s']:.2f}s, max {result['max_s']:.2f}s "
          f"(bound ttl + scan + turn = {result['bound_s']:.2f}s)")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
