"""The lease keeper is a process of its coordinator's own, with real processes: it renews
the leases and the coordinator vouches for them from its confirmations; a coordinator
stopped with SIGSTOP loses its rooms within one ttl and, continued, writes nothing; one
whose main thread is held busy keeps every lease; the keeper exits with its coordinator
and is started again when it dies."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import redis

from parley.client import Client
from parley.processes import ProcessGroup
from parley.shared.keys import Keys
from tests.support.polling import wait_until
from tests.support.rooms import rotating_scripts, scripted_spec

pytestmark = [pytest.mark.e2e, pytest.mark.redis]

ROOMS = 5
TTL_S = 1.5
# A coordinator whose leases run out fast, and whose debug signals are on.
SHORT_TTL = {"PARLEY_LEASE_TTL_S": str(TTL_S), "PARLEY_COORDINATOR_DEBUG_SIGNALS": "true"}


def log_events(group: ProcessGroup, process: subprocess.Popen[bytes]) -> list[dict[str, Any]]:
    """The JSON log lines a process (and its keeper, which shares its stderr) wrote."""
    events = []
    for line in group.logs[process.pid].read_text(errors="replace").splitlines():
        if line.startswith("{"):
            events.append(json.loads(line))
    return events


def named(group: ProcessGroup, process: subprocess.Popen[bytes], event: str
          ) -> list[dict[str, Any]]:
    """The process's log lines of ``event``."""
    return [entry for entry in log_events(group, process) if entry.get("event") == event]


def keeper_pid(group: ProcessGroup, coordinator: subprocess.Popen[bytes]) -> int:
    """The pid of the coordinator's keeper process, once it has started one."""
    started = wait_until(lambda: named(group, coordinator, "keeper_started"), 20,
                         "the coordinator to start its keeper")
    return int(started[-1]["pid"])


def alive(pid: int) -> bool:
    """True while the process runs (a zombie no container init reaped counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def parent_of(pid: int) -> int:
    """The parent pid of a running process."""
    return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])


def waiting_rooms(client: Client, queue: str, count: int = ROOMS) -> list[str]:
    """Rooms whose first turn waits a minute for answers no worker gives (nothing serves
    ``queue``): each stays leased, and nothing is written to it, until its holder goes."""
    rooms = []
    for _ in range(count):
        room = client.create_room(scripted_spec(rotating_scripts(2, 3), queue=queue,
                                                bid_timeout_s=60))
        client.post(room, "go")
        rooms.append(room)
    return rooms


def holders(client: Client, rooms: list[str]) -> dict[str, str | None]:
    """Each room's lease token (None: nobody holds it)."""
    return {room: client.store.lease_holder(room) for room in rooms}


def held_by(client: Client, rooms: list[str], coordinator_id: str) -> bool:
    """True when ``coordinator_id`` holds every room."""
    return all((token or "").rpartition(":")[0] == coordinator_id
               for token in holders(client, rooms).values())


class Renewals:
    """Counts a lease's renewals by watching its remaining time jump back up."""

    def __init__(self, client: redis.Redis, key: str) -> None:
        self.client = client
        self.key = key
        self.count = 0
        self.last_ms = client.pttl(key)

    def seen(self, at_least: int) -> bool:
        """Look once more; True once ``at_least`` renewals were seen."""
        left_ms = self.client.pttl(self.key)
        if left_ms > self.last_ms + 50:
            self.count += 1
        self.last_ms = left_ms
        return self.count >= at_least


def wait_for_renewals(client: Client, room: str, renewals: int) -> None:
    """Until the room's lease was renewed ``renewals`` more times."""
    watch = Renewals(client.store.redis, Keys(client.settings.key_prefix).lease(room))
    wait_until(lambda: watch.seen(renewals), 20, f"{renewals} renewals of {room}'s lease",
               every_s=0.02)


def test_the_keeper_process_renews_and_the_coordinator_vouches_from_its_confirmations(
        processes, settings, queue):
    coordinator = processes.coordinator("--id", "keeping", env=SHORT_TTL)
    client = Client(settings)
    rooms = waiting_rooms(client, queue)
    wait_until(lambda: held_by(client, rooms, "keeping"), 20, "the coordinator to hold the rooms")
    tokens = holders(client, rooms)
    keeper = keeper_pid(processes, coordinator)

    # Six renewals span three ttls: a coordinator that vouched from anything but the
    # keeper's confirmations would have dropped its rooms by then.
    wait_for_renewals(client, rooms[0], 6)

    assert keeper != coordinator.pid and parent_of(keeper) == coordinator.pid
    assert holders(client, rooms) == tokens
    assert named(processes, coordinator, "room_dropped") == []


def test_a_coordinator_stopped_with_sigstop_loses_its_rooms_within_one_ttl_and_writes_nothing(
        processes, settings, queue):
    stopped = processes.coordinator("--id", "stopped", env=SHORT_TTL)
    client = Client(settings)
    rooms = waiting_rooms(client, queue)
    wait_until(lambda: held_by(client, rooms, "stopped"), 20, "the first coordinator to hold them")
    processes.coordinator("--id", "standby", env=SHORT_TTL)
    wait_until(lambda: "standby" in dict(client.store.coordinators()), 20, "a standby")
    keeper = keeper_pid(processes, stopped)

    os.kill(stopped.pid, signal.SIGSTOP)
    stopped_at = time.monotonic()
    try:
        wait_until(lambda: held_by(client, rooms, "standby"), 10, "the standby to take every room",
                   every_s=0.02)
        took_s = time.monotonic() - stopped_at
        assert alive(keeper), "the keeper must outlive a pause of its coordinator"
        taken = holders(client, rooms)
        written = {room: (len(client.messages(room)), len(client.store.read_turns(room)))
                   for room in rooms}
    finally:
        os.kill(stopped.pid, signal.SIGCONT)

    # The leases lapse a ttl after the coordinator's last signal; the standby's scan and a
    # loaded machine take some of the rest.
    assert took_s < TTL_S + 1.0, f"the rooms were taken {took_s:.2f}s after the stop"
    wait_until(lambda: len(named(processes, stopped, "room_dropped")) == ROOMS, 20,
               "the continued coordinator to drop every room")
    assert holders(client, rooms) == taken
    assert {room: (len(client.messages(room)), len(client.store.read_turns(room)))
            for room in rooms} == written
    assert stopped.poll() is None


def test_a_coordinator_whose_main_thread_is_held_busy_keeps_every_lease(
        processes, settings, queue):
    coordinator = processes.coordinator("--id", "busy", env=SHORT_TTL)
    client = Client(settings)
    rooms = waiting_rooms(client, queue)
    wait_until(lambda: held_by(client, rooms, "busy"), 20, "the coordinator to hold the rooms")
    tokens = holders(client, rooms)

    # Held busy for 2 s, longer than the 1.5 s ttl: only renewals from elsewhere keep them.
    coordinator.send_signal(signal.SIGUSR2)
    wait_until(lambda: named(processes, coordinator, "debug_busy_done"), 20,
               "the main thread to be busy for 2 s")
    coordinator.send_signal(signal.SIGUSR1)
    wait_until(lambda: named(processes, coordinator, "debug_gc"), 20, "a full collection")
    # After the pauses: the loop has looked at its leases (it scans again) and they were
    # renewed since.
    since = time.time()
    wait_until(lambda: time.time() - dict(client.store.coordinators())["busy"] > since, 20,
               "the coordinator's loop to go round again")
    wait_for_renewals(client, rooms[0], 2)

    assert holders(client, rooms) == tokens
    assert named(processes, coordinator, "room_dropped") == []
    assert named(processes, coordinator, "lease_lost") == []


def test_a_coordinator_paused_as_a_whole_for_longer_than_its_margin_keeps_every_lease(
        processes, settings, queue):
    """A full collection holds every thread of the coordinator, its keeper's too: back
    from one, its leases look short by the pause until the keeper's next renewal."""
    ttl_s = 3.0  # margin 1.5 s; the keeper renews until 1 s of silence, each lease 3 s
    coordinator = processes.coordinator("--id", "paused", env={"PARLEY_LEASE_TTL_S": str(ttl_s)})
    client = Client(settings)
    rooms = waiting_rooms(client, queue)
    wait_until(lambda: held_by(client, rooms, "paused"), 20, "the coordinator to hold the rooms")
    tokens = holders(client, rooms)

    os.kill(coordinator.pid, signal.SIGSTOP)
    try:
        time.sleep(1.8)  # the pause itself: longer than the margin, shorter than the ttl
    finally:
        os.kill(coordinator.pid, signal.SIGCONT)
    wait_for_renewals(client, rooms[0], 2)

    assert holders(client, rooms) == tokens
    assert named(processes, coordinator, "room_dropped") == []
    assert named(processes, coordinator, "lease_lost") == []


def test_the_keeper_exits_with_its_coordinator(processes, settings):
    coordinator = processes.coordinator("--id", "killed", env=SHORT_TTL)
    keeper = keeper_pid(processes, coordinator)
    assert alive(keeper)

    os.kill(coordinator.pid, signal.SIGKILL)
    coordinator.wait(10)

    wait_until(lambda: not alive(keeper), 10, "the keeper to exit with its coordinator")


def test_a_keeper_that_dies_is_started_again_and_the_leases_are_kept(processes, settings, queue):
    coordinator = processes.coordinator("--id", "supervising",
                                        env={"PARLEY_LEASE_TTL_S": "6"})
    client = Client(settings)
    rooms = waiting_rooms(client, queue)
    wait_until(lambda: held_by(client, rooms, "supervising"), 20, "the rooms to be held")
    tokens = holders(client, rooms)
    first = keeper_pid(processes, coordinator)

    os.kill(first, signal.SIGKILL)

    wait_until(lambda: len(named(processes, coordinator, "keeper_started")) == 2, 20,
               "a new keeper")
    second = keeper_pid(processes, coordinator)
    wait_for_renewals(client, rooms[0], 1)
    assert second != first and alive(second)
    assert [entry["pid"] for entry in named(processes, coordinator, "keeper_exited")] == [first]
    assert holders(client, rooms) == tokens


def test_a_room_goes_idle_on_its_keepers_word_not_after_a_renewal_period(
        processes, settings, queue, real_redis, keys: Keys):
    """Going idle waits for the keeper to settle the renewals in flight (so that none moves
    the due time past the read); with a 20 s renewal period, a keeper that never answered
    would hold the room in the runnable set for that long."""
    processes.worker("-Q", queue)
    processes.coordinator(env={"PARLEY_LEASE_TTL_S": "60"})
    client = Client(settings)
    room = client.create_room(scripted_spec(rotating_scripts(2, 2), queue=queue))
    client.wait(room, client.post(room, "go"), timeout_s=30)
    wait_until(lambda: real_redis.zscore(keys.runnable, room) is None, 10,
               "the room to leave the runnable set")
