"""Failover with real processes: a coordinator handing its rooms over on SIGTERM or SIGINT,
a worker killed mid-task or stopped warmly, a vanished coordinator as operators see it,
and a room living through restarts of its Redis with the append-only file on."""

from __future__ import annotations

import random
import signal
import subprocess
import time

import pytest
import redis

from parley.client import Client
from parley.processes import ProcessGroup
from parley.shared.models import AnswerStatus, RoomSpec
from parley.shared.records import answer_from_fields
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
from tests.support.commands import run_parley
from tests.support.observe import aof_written
from tests.support.polling import wait_until
from tests.support.rooms import rotating_scripts, scripted_spec

pytestmark = [pytest.mark.e2e, pytest.mark.redis]

# Long enough that a lease left to expire would blow every wait below.
LONG_TTL = {"PARLEY_LEASE_TTL_S": "60"}


def worker_ready(group: ProcessGroup, worker: subprocess.Popen[bytes]) -> bool:
    """True once a worker started with ``--loglevel INFO`` says it consumes."""
    return "ready." in group.logs[worker.pid].read_text(errors="replace")


def took_a_task(group: ProcessGroup, worker: subprocess.Popen[bytes]) -> bool:
    """True once a worker started with ``--loglevel INFO`` has received a task."""
    return "] received" in group.logs[worker.pid].read_text(errors="replace")


def lease_holder(client: Client, room: str) -> str:
    """The coordinator id holding the room's lease, or ''."""
    token = client.store.lease_holder(room) or ""
    return token.rpartition(":")[0]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_stopped_coordinator_hands_its_rooms_over_at_once_and_exits_0(
        processes, settings, queue, signum):
    processes.worker("-Q", queue, "-c", "8")
    leaving = processes.coordinator("--id", "leaving", env=LONG_TTL)
    client = Client(settings)
    # The run outlasts a second coordinator's start (3-4 s on a loaded 2-core machine).
    spec = scripted_spec(rotating_scripts(3, 30, sleep=0.3), queue=queue)
    room = client.create_room(spec)
    inbox_id = client.post(room, TASK)
    wait_until(lambda: lease_holder(client, room) == "leaving" and len(client.messages(room)) >= 3,
               15, "the first coordinator to be serving the room")
    processes.coordinator("--id", "staying", env=LONG_TTL)
    wait_until(lambda: "staying" in dict(client.store.coordinators()), 15, "a second coordinator")

    leaving.send_signal(signum)

    assert leaving.wait(15) == 0
    assert "leaving" not in dict(client.store.coordinators())
    # With a 60 s ttl the room would stall for a minute unless the lease was released.
    client.wait(room, inbox_id, timeout_s=40)
    check = check_room(client.store, room, spec, expected_messages(spec),
                       turns_asked_again(processes).get(room, ()))
    assert check.takeovers == 1
    assert {record.epoch for record in client.turns(room)} == {1, 2}


def test_a_killed_coordinator_is_shown_as_vanished_and_a_stopped_one_is_gone(processes, settings):
    short_ttl = {"PARLEY_LEASE_TTL_S": "0.6"}
    doomed = processes.coordinator("--id", "doomed", env=short_ttl)
    leaving = processes.coordinator("--id", "leaving", env=short_ttl)
    client = Client(settings)
    wait_until(lambda: {"doomed", "leaving"} <= set(dict(client.store.coordinators())), 15,
               "both coordinators' heartbeats")
    assert status_lines(processes, short_ttl) == {"doomed": "live", "leaving": "live"}

    processes.kill(doomed, signal.SIGKILL)
    processes.kill(leaving, signal.SIGTERM)
    assert leaving.wait(15) == 0

    # "leaving" removed its heartbeat; "doomed" shows as vanished after three ttls.
    wait_until(lambda: status_lines(processes, short_ttl) == {"doomed": "vanished"}, 15,
               "the killed coordinator to show as vanished, the stopped one gone")


def status_lines(processes: ProcessGroup, env: dict[str, str]) -> dict[str, str]:
    """What ``parley status`` says of each coordinator."""
    done = run_parley({**processes.env, **env}, "status", timeout_s=30)
    assert done.returncode == 0, done.stderr
    health = {}
    for line in done.stdout.splitlines():
        if line.startswith("coordinator "):
            name, _, rest = line.removeprefix("coordinator ").partition(": ")
            health[name] = rest.split(",")[0]
    return health


def test_a_worker_stopped_with_sigterm_finishes_its_task_first(processes, settings, queue):
    scripts = {"Slow": [{"score": 0.9, "message": "worth the wait", "sleep": 1.5}],
               "Quick": [{"score": 0.6, "message": "quick take"}]}
    spec = scripted_spec(scripts, queue=queue, bid_timeout_s=10)
    worker = processes.worker("-Q", queue, "-c", "8")
    processes.coordinator()
    client = Client(settings)
    room = client.create_room(spec)
    inbox_id = client.post(room, TASK)
    wait_until(lambda: agents_bid(client, room) == {"Quick"}, 15, "the turn's task to be running")

    worker.send_signal(signal.SIGTERM)

    assert worker.wait(15) == 0
    assert agents_bid(client, room) == {"Quick", "Slow"}
    processes.worker("-Q", queue, "-c", "8")
    result = client.wait(room, inbox_id, timeout_s=30)
    assert [(m.sender, m.content) for m in result.messages] == [("User", TASK),
                                                                ("Slow", "worth the wait")]


def agents_bid(client: Client, room: str, turn: int = 1) -> set[str]:
    """Agents whose bid for ``turn`` is in the room's bids stream."""
    entries = client.redis.xrange(client.store.keys.bids(room))
    return {bid.agent for bid in map(answer_from_fields, (f for _, f in entries)) if bid.turn == turn}


VISIBILITY_S = 3.0  # above the bid timeout: a message redelivered after it is stale


def test_a_killed_worker_costs_only_the_bid_it_was_making(tmp_path, prefix, queue):
    slow_queue, quick_queue = f"{queue}-slow", f"{queue}-quick"
    spec = RoomSpec.model_validate({
        "name": "worker-kill", "policy": {"bid_timeout_s": 2.0},
        "agents": [
            {"name": "Slow", "model": "scripted", "queue": slow_queue, "script": [
                {"score": 0.95, "message": "never arrives", "sleep": 1.5},
                {"score": 0.9, "message": "back on turn 2"}]},
            {"name": "Quick", "model": "scripted", "queue": quick_queue, "script": [
                {"score": 0.8, "message": "fills in on turn 1"},
                {"score": 0.2, "message": "quiet"},
                {"score": 0.7, "message": "closes on turn 3"}]},
        ],
    })
    with PrivateRedis(tmp_path) as server, ProcessGroup(tmp_path, parley_env(
            server.url, prefix, task_visibility_timeout_s=VISIBILITY_S, scan_interval_s=0.1)) as group, \
            logs_on_failure(group):
        broker = redis.Redis.from_url(server.url)
        # Two workers on Slow's queue: the one that takes turn 1's task is killed, the other
        # is already up to answer turn 2 (a worker's start-up takes seconds on a loaded
        # machine, longer than a turn's bid timeout).
        slow_workers = [group.worker("-Q", slow_queue, "--loglevel", "INFO") for _ in range(2)]
        quick = group.worker("-Q", quick_queue, "--loglevel", "INFO")
        group.coordinator()
        wait_until(lambda: all(worker_ready(group, w) for w in [*slow_workers, quick]), 30,
                   "the workers")
        client = Client(Settings(redis_url=server.url, key_prefix=prefix))
        room = client.create_room(spec)
        inbox_id = client.post(room, TASK)
        # Quick's task is acknowledged; Slow's is still running on its worker.
        wait_until(lambda: agents_bid(client, room) == {"Quick"} and broker.hlen("unacked") == 1,
                   15, "Slow's task to be running")
        slow, replacement = sorted(slow_workers, key=lambda w: not took_a_task(group, w))

        group.kill(slow, signal.SIGKILL)
        killed_at = time.monotonic()
        result = client.wait(room, inbox_id, timeout_s=30)

        assert [(m.sender, m.content) for m in result.messages] == [
            ("User", TASK), ("Quick", "fills in on turn 1"), ("Slow", "back on turn 2"),
            ("Quick", "closes on turn 3")]
        first, *later = client.turns(room)
        assert {b.agent: b.status for b in first.bids} == {"Slow": AnswerStatus.TIMEOUT,
                                                            "Quick": AnswerStatus.OK}
        assert all(b.status is AnswerStatus.OK for turn in later for b in turn.bids)
        # The killed task's message is still unacknowledged (the last turn's task may still
        # be acknowledging: its worker acks once the task returns, after its bid committed).
        # A worker starting after the visibility timeout restores it; it is past its turn's
        # deadline, so it is dropped.
        wait_until(lambda: broker.hlen("unacked") == 1, 10, "the finished tasks' acks")
        time.sleep(max(0.0, killed_at + VISIBILITY_S + 0.5 - time.monotonic()))
        group.worker("-Q", f"{queue}-sweeper", "--loglevel", "INFO")
        wait_until(lambda: "Discarding revoked task" in group.logs[replacement.pid].read_text(),
                   20, "the redelivered task to be dropped")
        # Acknowledged just after that line (and after its task-revoked event is sent).
        wait_until(lambda: broker.hlen("unacked") == 0, 10, "the dropped task to be acknowledged")
        assert broker.llen(slow_queue) == 0
        assert "Slow" not in agents_bid(client, room, turn=1)


def test_a_room_survives_redis_restarts_with_the_append_only_file(tmp_path, prefix, queue):
    # Every agent is keen each turn: a bid lost in a restart changes who speaks, never
    # whether anyone does, so the run goes on to the end of its scripts.
    spec = random_room(random.Random(7), queue, turns=60, bid_timeout_s=3, all_keen=True)
    with PrivateRedis(tmp_path, "--appendonly", "yes", "--appendfsync", "everysec") as server, \
            ProcessGroup(tmp_path, parley_env(server.url, prefix, lease_ttl_s=1,
                                              scan_interval_s=0.1)) as group, \
            logs_on_failure(group):
        worker = group.worker("-Q", queue, "-c", "8", "--loglevel", "INFO")
        coordinator = group.coordinator()
        client = Client(Settings(redis_url=server.url, key_prefix=prefix))
        room = client.create_room(spec)
        inbox_id = client.post(room, TASK)
        wait_until(lambda: len(client.messages(room)) >= 10, 30, "the run to get going")

        before_stop = client.messages(room)
        server.stop()  # SIGTERM: Redis writes out its append-only file and exits
        server.start()
        assert client.messages(room)[:len(before_stop)] == before_stop

        wait_until(lambda: len(client.messages(room)) >= len(before_stop) + 10, 30,
                   "the run to go on after a clean restart")
        settled = client.messages(room)
        # appendfsync everysec may hold writes back for up to 2 s: until they are written.
        wait_until(lambda: aof_written(client.redis), 10,
                   "the settled messages in the append-only file")
        server.kill()  # kill -9: only what reached the append-only file survives
        server.start()
        assert client.messages(room)[:len(settled)] == settled

        wait_until(lambda: len(client.messages(room)) >= len(settled) + 10, 30,
                   "the run to go on after a hard restart")
        client.wait(room, inbox_id, timeout_s=60)
        check_room(client.store, room, spec, expected_messages(spec),
                   turns_asked_again(group).get(room, ()))
        assert len(client.turns(room)) == 61
        # The same two processes served the room through both restarts.
        assert worker.poll() is None and coordinator.poll() is None
