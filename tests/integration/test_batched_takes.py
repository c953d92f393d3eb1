"""Rooms are taken in batches: one script call leases many due rooms, each room's refusal
its own; a standby takes a dead coordinator's rooms in a few calls, on the real Redis."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
import redis
from redis.asyncio import BlockingConnectionPool
from redis.asyncio import Redis as AsyncRedis
from redis.asyncio.connection import Connection as RedisConnection
from redis.exceptions import ResponseError

from parley.coordinator.connections import paced
from parley.coordinator.lease import Lease, Leases
from parley.coordinator.service import Coordinator
from parley.coordinator.transport import InMemoryTransport
from parley.shared.keys import Keys
from parley.shared.refusals import Refusal, refusal_of
from parley.shared.scripts import Scripts
from parley.shared.settings import Settings
from parley.shared.store import RoomStore
from tests.conftest import REDIS_URL
from tests.support.polling import wait_until_async
from tests.support.rooms import rotating_scripts, scripted_spec

pytestmark = pytest.mark.redis


def test_one_call_takes_the_free_rooms_and_answers_each_refused_one_alone(real_redis, keys):
    store = RoomStore(real_redis, keys)
    for room in ("free", "held", "bad-epoch"):
        store.create_room(room, scripted_spec({"A": [], "B": []}))
    real_redis.set(keys.lease("held"), "other:7")
    real_redis.hset(keys.state("bad-epoch"), "epoch", "x")

    async def take() -> list[Any]:
        client = AsyncRedis.from_url(REDIS_URL)
        try:
            return await Leases(client, keys, Scripts(client), "c1", 5.0).acquire_many(
                ["free", "held", "missing", "bad-epoch"])
        finally:
            await client.aclose()

    free, held, missing, bad_epoch = asyncio.run(take())

    assert isinstance(free, Lease) and free.epoch == 1 and free.seconds_left() > 4
    assert store.lease_holder("free") == "c1:1"
    assert held is None and store.lease_holder("held") == "other:7"
    assert isinstance(missing, ResponseError) and refusal_of(missing).code is Refusal.NO_ROOM
    assert isinstance(bad_epoch, ResponseError)
    assert refusal_of(bad_epoch).code is Refusal.BAD_STATE
    assert store.lease_holder("bad-epoch") is None


def test_the_batch_script_refuses_keys_not_in_threes_and_writes_nothing(real_redis, keys):
    with pytest.raises(ResponseError, match="^BADARG"):
        Scripts(real_redis).acquire_many(keys=[keys.lease("a"), keys.state("a")],
                                         args=["c1", 5000, 1000])


class CountingScripts:
    """The coordinator's scripts, counting the take calls made through them."""

    def __init__(self, scripts: Scripts) -> None:
        self.scripts = scripts
        self.calls: dict[str, int] = {"acquire": 0, "acquire_many": 0}

    def __getattr__(self, name: str) -> Any:
        script = getattr(self.scripts, name)
        if name not in self.calls:
            return script

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            return script(*args, **kwargs)

        return counted


def posted_rooms(real_redis: redis.Redis, keys: Keys, count: int) -> tuple[RoomStore, list[str]]:
    """``count`` rooms of two scripted agents, each posted to (so runnable)."""
    rooms = [f"room-{i:03}" for i in range(count)]
    store = RoomStore(real_redis, keys)
    for room in rooms:
        store.create_room(room, scripted_spec(rotating_scripts(2, 3), bid_timeout_s=60))
        store.post(room, "User", "go")
    return store, rooms


def test_a_standby_takes_a_dead_coordinators_rooms_in_a_few_script_calls(
        real_redis: redis.Redis, keys: Keys, prefix: str):
    store, rooms = posted_rooms(real_redis, keys, 60)
    # The dead coordinator's leases as a kill -9 leaves them: held under its token until
    # they expire, each room due at its lease's expiry.
    expiry_ms = int(time.time() * 1000) + 300
    for room in rooms:
        real_redis.set(keys.lease(room), "dead:1", px=300)
        real_redis.zadd(keys.runnable, {room: expiry_ms})
    # The standby is the only live coordinator: its first scan takes every due room.
    settings = Settings(key_prefix=prefix, coordinator_capacity=200, scan_interval_s=0.05)

    async def take_over() -> dict[str, int]:
        client = AsyncRedis.from_url(REDIS_URL)
        standby = Coordinator(settings, InMemoryTransport(), "standby", client=client)
        counting = CountingScripts(standby.leases.scripts)
        standby.leases.scripts = counting  # type: ignore[assignment]
        serving = asyncio.create_task(standby.run())
        try:
            await wait_until_async(lambda: len(standby.rooms) == len(rooms), 20,
                                   "the standby to take every room")
        finally:
            standby.stop()
            await serving
            await client.aclose()
        return counting.calls

    calls = asyncio.run(take_over())

    # One call per scan that found due rooms: one, or a few when some of them were still
    # held (their leases expire a moment apart).
    assert calls["acquire"] == 0
    assert 1 <= calls["acquire_many"] <= 4, calls
    assert {store.lease_holder(room) for room in rooms} == {None}  # released on shutdown
    assert {store.read_state(room).epoch for room in rooms} == {1}, "a room taken twice"


def test_a_scan_takes_its_share_of_the_due_rooms_among_the_live_coordinators(
        real_redis: redis.Redis, keys: Keys, prefix: str):
    store, rooms = posted_rooms(real_redis, keys, 60)
    # A peer heard from a moment ago, and one vanished long ago (not counted).
    now_ms = int(time.time() * 1000)
    real_redis.zadd(keys.coordinators, {"peer": now_ms, "vanished": now_ms - 3_600_000})
    settings = Settings(key_prefix=prefix, coordinator_capacity=200)

    async def one_scan() -> int:
        client = AsyncRedis.from_url(REDIS_URL)
        coordinator = Coordinator(settings, InMemoryTransport(), "c1", client=client)
        try:
            await coordinator.scan()
            return len(coordinator.rooms)
        finally:
            await coordinator.shutdown()

    assert asyncio.run(one_scan()) == 30  # half of the due rooms: two live coordinators


class CountingConnection(RedisConnection):
    """A connection counting how many of its kind are connecting at once."""

    connecting = 0
    most = 0

    async def connect(self) -> None:
        if self.is_connected:
            return
        CountingConnection.connecting += 1
        CountingConnection.most = max(CountingConnection.most, CountingConnection.connecting)
        try:
            await super().connect()
        finally:
            CountingConnection.connecting -= 1


def test_a_pool_opens_a_few_connections_at_a_time_however_many_rooms_start_together():
    """Thousands of rooms taken in one scan each want a connection at once: opened all
    together they overflow Redis's listen backlog and time out connecting."""

    async def start_together(commands: int) -> list[bool]:
        pool = BlockingConnectionPool.from_url(REDIS_URL, max_connections=commands)
        pool.connection_class = paced(CountingConnection, 8)
        client = AsyncRedis(connection_pool=pool)
        try:
            return list(await asyncio.gather(*(client.ping() for _ in range(commands))))
        finally:
            await client.aclose()

    assert asyncio.run(start_together(300)) == [True] * 300
    assert CountingConnection.most == 8
