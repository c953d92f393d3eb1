"""A private deployment for benchmarks: its own redis-server, real coordinator and worker
processes, and rooms timed the way the swarms anchor times them.

A turn's time is the interval between two consecutive committed agent messages of one room
(their ``ts``, stamped by the coordinator when it decides the turn): one whole loop of
open, fan out, collect, decide and commit, the same span as the anchor's post-to-post gap.
"""

from __future__ import annotations

import contextlib
import math
import os
import statistics
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

from parley.client import Client
from parley.processes import ProcessGroup, free_port, start_redis, stop
from parley.shared.models import RoomSpec, RoomStatus
from parley.shared.settings import Settings
from tests.support.rooms import rotating_scripts, scripted_spec

# hz 10 is Redis's default; AOF everysec is how a deployment that must survive a Redis
# restart runs it (docs/architecture.md, "Failover invariants": "with AOF on, of Redis").
# Clients up to 20,000: a coordinator once held a connection per room waiting for answers
# (now 64 shared readers), and the limit stays so that older runs remain comparable.
REDIS_OPTIONS = ("--appendonly", "yes", "--appendfsync", "everysec", "--hz", "10",
                 "--maxclients", "20000")


def p95(values: list[float]) -> float:
    """Nearest-rank 95th percentile (as the anchor computes it)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


def window_median(turn_ms: list[float], first: int, last: int) -> float:
    """Median time of turns ``first..last`` (1-based, inclusive)."""
    return statistics.median(turn_ms[first - 1:last])


def summary(turn_ms: list[float]) -> dict[str, float]:
    """Median and p95 of turn times, skipping turn 1 (a room's pick-up on parley's side,
    the thread pool's start on swarms' side: neither is a turn's steady cost)."""
    steady = turn_ms[1:]
    return {"median_ms": round(statistics.median(steady), 3), "p95_ms": round(p95(steady), 3),
            "turns": len(steady)}


def memory_kb(pid: int) -> dict[str, int]:
    """Resident (VmRSS) and peak resident (VmHWM) memory of a process, in KB."""
    fields = {}
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            name, _, value = line.partition(":")
            if name in ("VmRSS", "VmHWM"):
                fields[name] = int(value.split()[0])
    return fields


def cpu_s(pid: int) -> float:
    """CPU seconds a process's live threads have used, to the nanosecond (schedstat; the
    tick-based counters of /proc/<pid>/stat are too coarse for a few-millisecond turn)."""
    total_ns = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):
            total_ns += int((task / "schedstat").read_text().split()[0])
    return total_ns / 1e9


def children(pid: int) -> list[int]:
    """The PIDs of a process's children (a coordinator's lease keeper), from /proc."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):
            found += [int(child) for child in (task / "children").read_text().split()]
    return found


def turn_times_ms(timestamps: list[float]) -> list[float]:
    """Per-turn times from the commit stamps of a room's messages, the seed's first."""
    return [(later - earlier) * 1000 for earlier, later in zip(timestamps, timestamps[1:],
                                                               strict=False)]


def rotating_spec(agents: int, turns: int, sleep_s: float = 0.0, **policy: Any) -> RoomSpec:
    """The benchmark workload: on turn t agent t mod N bids 0.9, the rest 0.2, all with a
    message, so every turn has a winner; the run ends after exactly ``turns`` turns.
    ``policy`` sets more of the bid policy's fields."""
    return scripted_spec(rotating_scripts(agents, turns, sleep_s), max_messages=turns + 1,
                         **policy)


def bench_directory(prefix: str) -> Any:
    """A directory for a run's processes (a TemporaryDirectory, or one that stays when
    PARLEY_BENCH_LOGS names where to keep it: the logs and Redis's files, for a look
    after)."""
    kept = os.environ.get("PARLEY_BENCH_LOGS")
    if not kept:
        return tempfile.TemporaryDirectory(prefix=prefix)
    os.makedirs(kept, exist_ok=True)
    return KeptDirectory(tempfile.mkdtemp(prefix=prefix, dir=kept))


class KeptDirectory:
    """A TemporaryDirectory's interface for a directory left in place."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __enter__(self) -> str:
        return self.name

    def __exit__(self, *exc_info: object) -> None:
        """Left for a look after."""

    def cleanup(self) -> None:
        """Left for a look after."""


class Deployment:
    """A private redis-server with coordinators and workers; everything stopped by PID."""

    def __init__(self, directory: Path | None = None, redis_options: tuple[str, ...] = REDIS_OPTIONS,
                 env: dict[str, str] | None = None) -> None:
        self._tmp = None if directory else bench_directory("parley-bench-")
        self.directory = directory or Path(self._tmp.name)
        self.redis_options = redis_options
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.prefix = f"bench-{uuid.uuid4().hex[:6]}"
        self.env = {
            "PARLEY_REDIS_URL": self.url,
            "PARLEY_BROKER_URL": self.url,
            "PARLEY_KEY_PREFIX": self.prefix,
            # Scripted agents only: no litellm import competing for the CPU while timing.
            "PARLEY_WORKER_PRELOAD_LITELLM": "false",
            "PARLEY_LOG_FORMAT": "json",
            "PARLEY_SCAN_INTERVAL_S": "0.1",
            **(env or {}),
        }
        self.redis_process: Any = None
        self.group = ProcessGroup(self.directory, self.env)

    def __enter__(self) -> Deployment:
        self.redis_process = start_redis(self.port, self.directory, *self.redis_options)
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.group.stop_all()
        if self.redis_process is not None:
            stop(self.redis_process)
        if self._tmp is not None:
            self._tmp.cleanup()

    def settings(self) -> Settings:
        """Settings of this deployment, for clients in the benchmark process."""
        return Settings(redis_url=self.url, key_prefix=self.prefix)

    def client(self) -> Client:
        """A parley client on this deployment."""
        return Client(self.settings())

    def redis(self) -> redis.Redis:
        """A plain Redis client on the private server."""
        return redis.Redis.from_url(self.url)


@dataclass
class RoomRun:
    """One finished room: its id and per-turn times."""

    room: str
    turn_ms: list[float]
    speakers: list[str]


def run_room(client: Client, spec: RoomSpec, task: str = "Benchmark room: take turns.",
             timeout_s: float = 600.0) -> RoomRun:
    """Run one room to its end and time its turns. Waits by polling the state hash a few
    times a second, not by following the log, so the benchmark adds little load."""
    room = client.create_room(spec)
    inbox_id = client.post(room, task)
    deadline = time.monotonic() + timeout_s
    while True:
        state = client.state(room)
        if state.inbox_last_id == inbox_id and state.status is not RoomStatus.RUNNING:
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"room {room} did not finish in {timeout_s:g}s")
        time.sleep(0.05)
    messages = client.messages(room)
    return RoomRun(room, turn_times_ms([m.ts for m in messages]),
                   [m.sender for m in messages[1:]])


def expect_rotation(run: RoomRun, agents: int, turns: int) -> None:
    """Raise unless agent t mod N spoke on each turn t: a fast turn must be a real one."""
    expected = [f"agent{t % agents}" for t in range(1, turns + 1)]
    if run.speakers != expected:
        raise RuntimeError(f"room {run.room}: speakers {run.speakers[:6]}... are not the "
                           f"scripted rotation of {agents} agents over {turns} turns")
