"""Rooms keep their invariants while coordinators and workers are killed at random.

Three coordinators and two workers serve scripted rooms, bid, selector and round-table
rooms mixed, on a redis-server of the test's own; for a bounded time a random coordinator (and now and
then a worker) gets ``kill -9`` at a random moment and a replacement starts. Every room
must then finish its run with seqs contiguous, nothing written twice, every turn
replaying (all its phases' answers) to its decision, the failure-free transcript and
stop, and a selector or round-table room its policy's rules (see harness.check_room).

``PARLEY_SOAK_S=<seconds>`` runs a longer soak; ``PARLEY_CHAOS_SEED=<n>`` replays the
choices of an earlier run (its seed is printed).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from collections import Counter
from dataclasses import dataclass, field

import pytest

from parley.client import Client
from parley.processes import ProcessGroup
from parley.shared.models import RoomSpec
from parley.shared.settings import Settings
from tests.chaos.handoff_rooms import random_handoff_room
from tests.chaos.harness import (
    TASK,
    PrivateRedis,
    RoomCheck,
    check_room,
    log_lines,
    logs_on_failure,
    parley_env,
    random_room,
    reference_run,
    tasks_run_twice,
    turns_asked_again,
)
from tests.chaos.mention_rooms import random_mention_room
from tests.chaos.roundtable_rooms import random_roundtable_room
from tests.chaos.selector_rooms import random_selector_room
from tests.support.polling import wait_until

pytestmark = [pytest.mark.chaos, pytest.mark.e2e, pytest.mark.redis]

CHAOS_S = float(os.environ.get("PARLEY_SOAK_S") or 20)
LEASE_TTL_S = 1.0
BID_TIMEOUT_S = 2.0


@dataclass
class Cast:
    """The processes under test, and what was done to them."""

    group: ProcessGroup
    queue: str
    coordinators: list[subprocess.Popen[bytes]] = field(default_factory=list)
    workers: list[subprocess.Popen[bytes]] = field(default_factory=list)
    kills: Counter[str] = field(default_factory=Counter)

    def start_coordinator(self) -> None:
        """One more coordinator."""
        self.coordinators.append(self.group.coordinator())

    def start_worker(self) -> None:
        """One more worker on the rooms' queue (logging at INFO, so it says when ready)."""
        self.workers.append(self.group.worker("-Q", self.queue, "-c", "32", "--loglevel", "INFO"))

    def ready_workers(self) -> list[subprocess.Popen[bytes]]:
        """Live workers that have started consuming."""
        return [w for w in self.workers if w.poll() is None
                and "ready." in self.group.logs[w.pid].read_text(errors="replace")]

    def kill_a_coordinator(self, rng: random.Random) -> None:
        """kill -9 a random live coordinator and start its replacement."""
        victim = rng.choice([c for c in self.coordinators if c.poll() is None])
        self.group.kill(victim, signal.SIGKILL)
        self.kills["coordinator"] += 1
        self.start_coordinator()

    def maybe_kill_a_worker(self, rng: random.Random) -> None:
        """Now and then kill -9 a worker, never the last one consuming, and replace it."""
        ready = self.ready_workers()
        if rng.random() < 0.25 and len(ready) >= 2:
            self.group.kill(rng.choice(ready), signal.SIGKILL)
            self.kills["worker"] += 1
            self.start_worker()


def plan_rooms(rng: random.Random, queue: str, count: int) -> list[RoomSpec]:
    """``count`` rooms of 3 agents (about 2-6 s each without failures): every third a
    selector room of 6-20 participant turns (each turn asks the selector once or twice,
    then one participant), the others bid rooms of 15-40 turns; and after every third a
    round-table of 2-4 panelists over 1-3 rounds (one call a turn, 3-13 turns, about 1-4 s);
    and after every third, starting with the first, a discussion (mention) room of 3-4
    agents (4-16 turns at most)."""
    rooms = []
    for i in range(count):
        if i % 3 == 1:
            rooms.append(random_selector_room(rng, queue, turns=rng.randint(6, 20),
                                              call_timeout_s=BID_TIMEOUT_S))
        else:
            rooms.append(random_room(rng, queue, turns=rng.randint(15, 40),
                                     bid_timeout_s=BID_TIMEOUT_S))
        if i % 3 == 2:
            rooms.append(random_roundtable_room(rng, queue, call_timeout_s=BID_TIMEOUT_S))
        if i % 3 == 0:
            rooms.append(random_mention_room(rng, queue, call_timeout_s=BID_TIMEOUT_S))
        if i % 3 == 1:
            rooms.append(random_handoff_room(rng, queue, call_timeout_s=BID_TIMEOUT_S))
    return rooms


@pytest.mark.timeout(CHAOS_S + 240)
def test_rooms_survive_coordinators_and_workers_killed_at_random(tmp_path, prefix, queue):
    seed = int(os.environ.get("PARLEY_CHAOS_SEED") or random.randrange(10**6))
    rng = random.Random(seed)
    print(f"chaos seed {seed}")
    specs = plan_rooms(rng, queue, max(20, int(CHAOS_S)))
    env_settings = {"lease_ttl_s": LEASE_TTL_S, "scan_interval_s": 0.1,
                    "task_visibility_timeout_s": 2 * BID_TIMEOUT_S + 1}
    with PrivateRedis(tmp_path) as server, \
            ProcessGroup(tmp_path, parley_env(server.url, prefix, **env_settings)) as group, \
            logs_on_failure(group):
        cast = Cast(group, queue)
        checks = run_chaos(cast, rng, specs, Client(Settings(redis_url=server.url,
                                                             key_prefix=prefix)))
        assert tasks_run_twice(group) == []
        dropped = len(log_lines(group, "Discarding revoked task"))
    report(seed, checks, cast.kills, dropped)


def run_chaos(cast: Cast, rng: random.Random, specs: list[RoomSpec], client: Client
              ) -> list[RoomCheck]:
    """Start the cast, post the rooms spread over the chaos window while killing, then
    wait for every room to finish and check it."""
    for _ in range(3):
        cast.start_coordinator()
    for _ in range(2):
        cast.start_worker()
    wait_until(lambda: len(cast.ready_workers()) == 2, 30, "the workers to be ready")
    posted: dict[str, tuple[RoomSpec, str]] = {}
    started = time.monotonic()

    def post_due_rooms() -> None:
        # Room i is posted at i/N of the chaos window, so kills meet rooms in every phase.
        elapsed = time.monotonic() - started
        while len(posted) < len(specs) and len(posted) * CHAOS_S / len(specs) <= elapsed:
            spec = specs[len(posted)]
            room = client.create_room(spec)
            posted[room] = (spec, client.post(room, TASK))

    while time.monotonic() - started < CHAOS_S:
        post_due_rooms()
        time.sleep(rng.uniform(0.2, 1.0))
        cast.kill_a_coordinator(rng)
        cast.maybe_kill_a_worker(rng)
    post_due_rooms()
    finish_by = time.monotonic() + 90
    for room, (_, inbox_id) in posted.items():
        client.wait(room, inbox_id, timeout_s=max(1.0, finish_by - time.monotonic()))
    asked_again = turns_asked_again(cast.group)
    checks = []
    for room, (spec, _) in posted.items():
        reference = reference_run(spec)
        checks.append(check_room(client.store, room, spec, reference.messages,
                                 asked_again.get(room, ()), reference.stop_reason))
    return checks


def report(seed: int, checks: list[RoomCheck], kills: Counter[str], dropped: int) -> None:
    """Print what was checked."""
    timed_out = [check for check in checks if check.timed_out]
    selector = [check for check in checks if check.policy == "selector"]
    stops = Counter(str(check.stop_reason) for check in selector)
    tables = [check for check in checks if check.policy == "roundtable"]
    verdicts = Counter(str(check.stop_reason) for check in tables)
    discussions = [check for check in checks if check.policy == "mention"]
    endings = Counter(str(check.stop_reason) for check in discussions)
    print(
        f"\nchaos (seed {seed}, {CHAOS_S:g}s): {len(checks)} rooms, "
        f"{sum(c.turns for c in checks)} turns, of which {len(selector)} selector rooms "
        f"({sum(c.turns for c in selector)} turns, {sum(c.selector_retries for c in selector)} "
        f"asking the selector twice, {sum(c.takeovers for c in selector)} takeovers, "
        f"{sum(c.reused_bids for c in selector)} answers reused, stops "
        f"{dict(sorted(stops.items()))}), {len(tables)} round-tables "
        f"({sum(c.turns for c in tables)} turns, {sum(c.takeovers for c in tables)} "
        f"takeovers, {sum(c.reused_bids for c in tables)} answers reused, stops "
        f"{dict(sorted(verdicts.items()))}), {len(discussions)} discussions "
        f"({sum(c.turns for c in discussions)} turns, "
        f"{sum(c.takeovers for c in discussions)} takeovers, stops "
        f"{dict(sorted(endings.items()))}); "
        f"{kills['coordinator']} coordinator kills, "
        f"{kills['worker']} worker kills, {sum(c.takeovers for c in checks)} takeovers, "
        f"{sum(c.reused_bids for c in checks)} bids reused by a new holder, {dropped} "
        f"redelivered tasks dropped as expired, none run twice; transcripts equal "
        f"to the failure-free run: {len(checks) - len(timed_out)} in full, {len(timed_out)} "
        f"up to their first timed-out bid ({sum(c.compared_messages for c in timed_out)} "
        "messages)"
    )
