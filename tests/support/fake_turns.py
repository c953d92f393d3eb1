"""Serving one room's turn loop in-process, as a coordinator would, on any Redis client
(the unit layer's fakeredis): lease, run until the room goes idle, let go."""

from __future__ import annotations

import asyncio
from typing import Any

import fakeredis

from parley.coordinator.lease import Leases
from parley.coordinator.outbox import Outbox
from parley.coordinator.room_io import RoomIO
from parley.coordinator.turn_loop import RoomRunner, TurnOptions
from parley.shared.keys import Keys
from parley.shared.scripts import Scripts
from tests.support.local_worker import LocalWorkerTransport


async def serve_once(async_redis: Any, keys: Keys, transport: Any, owner: str = "c1",
                     room: str = "room-1", events_maxlen: int = 10_000,
                     lease_ttl_s: float = 120.0, agents_per_task: int = 8) -> None:
    """Take ``room``'s lease as ``owner``, run its turns until it goes idle (or raises),
    and release the lease. Nothing renews the lease here, so its ttl must outlast the
    whole run, however loaded the machine."""
    scripts = Scripts(async_redis)
    io = RoomIO(async_redis, keys, scripts, events_maxlen=events_maxlen)
    leases = Leases(async_redis, keys, scripts, owner, lease_ttl_s, events_maxlen=events_maxlen)
    lease = await leases.acquire(room)
    assert lease is not None, f"{room} is held by another coordinator"
    try:
        await RoomRunner(lease, io, Outbox(transport),
                         TurnOptions(keys.prefix, agents_per_task, 1000)).run()
    finally:
        await leases.release(lease)


def serve_until_idle(server: fakeredis.FakeServer, keys: Keys, transport: Any = None,
                     owner: str = "c1", room: str = "room-1") -> None:
    """``serve_once`` from plain code (a test's thread, a callback) on clients of its own
    of ``server``; with the in-process worker twin unless ``transport`` is given."""
    transport = transport or LocalWorkerTransport(fakeredis.FakeRedis(server=server), keys)
    asyncio.run(serve_once(fakeredis.FakeAsyncRedis(server=server), keys, transport, owner,
                           room))
