"""A Redis outage longer than the workers' reconnect backoff: every running room goes on
after it and ends its run as it would have without the outage, whether Redis was shut down
(and restarted from its append-only file) or hung (SIGSTOP, then SIGCONT)."""

from __future__ import annotations

import os
import random
import signal
import time

import pytest

from parley.client import Client
from parley.processes import ProcessGroup
from parley.shared.models import RoomStatus
from parley.shared.settings import Settings
from tests.chaos.harness import (
    TASK,
    PrivateRedis,
    check_room,
    expected_messages,
    logs_on_failure,
    parley_env,
    random_room,
    turns_asked_again,
)
from tests.support.polling import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.redis]

# Celery's default broker reconnect attempts come 2, 6, 12 and 20 s after the connection
# drops: after an outage this long a worker with those defaults is back 7 s late.
OUTAGE_S = 13.0
# Short, so that a turn timed out twice before its workers are back ends the run no_bids.
BID_TIMEOUT_S = 2.0
ROOMS = 3


def next_commit(client: Client, room: str, after: float) -> float:
    """When the room first committed a message after ``after``."""
    return min(m.ts for m in client.messages(room) if m.ts > after)


def interrupt(server: PrivateRedis, fault: str) -> None:
    """Take Redis away: a clean shutdown, or a hang that keeps its connections open."""
    if fault == "shutdown":
        server.stop()  # SIGTERM: Redis writes out its append-only file and exits
    else:
        os.kill(server.process.pid, signal.SIGSTOP)


def restore(server: PrivateRedis, fault: str) -> None:
    """Bring Redis back: restarted on the same port and files, or woken up."""
    if fault == "shutdown":
        server.start()
    else:
        os.kill(server.process.pid, signal.SIGCONT)


@pytest.mark.parametrize("fault", ["shutdown", "sigstop"])
def test_every_running_room_ends_its_run_normally_after_a_long_redis_outage(
        tmp_path, prefix, queue, fault):
    specs = [random_room(random.Random(seed), queue, turns=40, bid_timeout_s=BID_TIMEOUT_S)
             for seed in range(ROOMS)]
    with PrivateRedis(tmp_path, "--appendonly", "yes") as server, \
            ProcessGroup(tmp_path, parley_env(server.url, prefix, lease_ttl_s=1,
                                              scan_interval_s=0.1)) as group, \
            logs_on_failure(group):
        group.worker("-Q", queue, "-c", "8", "--loglevel", "INFO")
        group.coordinator()
        client = Client(Settings(redis_url=server.url, key_prefix=prefix))
        rooms = {client.create_room(spec): spec for spec in specs}
        posted = {room: client.post(room, TASK) for room in rooms}
        wait_until(lambda: all(len(client.messages(room)) >= 5 for room in rooms), 30,
                   "every run to get going")
        assert all(client.state(room).status is RoomStatus.RUNNING for room in rooms)

        interrupt(server, fault)
        time.sleep(OUTAGE_S)
        # Nothing can commit while Redis is away.
        back_at = time.time()
        restore(server, fault)

        for room in rooms:
            result = client.wait(room, posted[room], timeout_s=60)
            assert (result.status, result.stop_reason) == (RoomStatus.IDLE, "lull"), room
        print(f"{fault}: from Redis back to each room's next commit (s): "
              f"{[round(next_commit(client, room, back_at) - back_at, 2) for room in rooms]}")
        retried = turns_asked_again(group)
        for room, spec in rooms.items():
            check = check_room(client.store, room, spec, expected_messages(spec),
                               retried.get(room, ()))
            assert not check.timed_out, f"{room}: an agent's bid timed out"
