"""The event streams' fan-out on fakeredis: followers of one room share one reader, each
gets every event once and in order whether it was written before or after it joined, and
a follower that stops reading is dropped with a follower_dropped event without holding up
the others."""

from __future__ import annotations

import asyncio
import json

import fakeredis
import pytest

from parley.api import fanout
from parley.shared.keys import Keys

ROOM = "r1"
KEYS = Keys("t")


@pytest.fixture(autouse=True)
def quick_reads(monkeypatch):
    monkeypatch.setattr(fanout, "BLOCK_MS", 50)


def frame_of(chunk: bytes) -> dict:
    fields = dict(line.split(": ", 1) for line in chunk.decode().strip().split("\n"))
    return {**fields, "data": json.loads(fields["data"])}


async def add_events(redis, count: int, start: int = 0) -> list[str]:
    return [(await redis.xadd(KEYS.events(ROOM), {"type": "probe", "n": str(n),
                                                 "ts": "1.0"})).decode()
            for n in range(start, start + count)]


async def next_frame(stream) -> dict:
    chunk = await asyncio.wait_for(anext(stream), 5)
    while chunk == fanout.KEEPALIVE:
        chunk = await asyncio.wait_for(anext(stream), 5)
    return frame_of(chunk)


def run(coroutine) -> None:
    asyncio.run(asyncio.wait_for(coroutine, 30))


def test_followers_of_a_room_share_one_reader_and_get_every_event_once_in_order():
    async def scenario() -> None:
        redis = fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer())
        await redis.hset(KEYS.state(ROOM), "status", "idle")
        hub = fanout.Hub(redis, KEYS)
        before = await add_events(redis, 3)
        streams = [fanout.follow_room(hub, redis, ROOM, "0-0") for _ in range(20)]
        firsts = [await next_frame(stream) for stream in streams]
        assert [frame["id"] for frame in firsts] == [before[0]] * 20
        after = await add_events(redis, 4, start=3)
        for stream in streams:
            rest = [(await next_frame(stream))["id"] for _ in range(6)]
            assert rest == [*before[1:], *after]
        assert list(hub.rooms) == [ROOM] and len(hub.rooms[ROOM].followers) == 20
        for stream in streams:
            await stream.aclose()
        assert not hub.rooms[ROOM].followers
        await hub.close()

    run(scenario())


def test_a_follower_that_stops_reading_is_dropped_and_the_others_go_on(monkeypatch):
    monkeypatch.setattr(fanout, "QUEUE_MAX", 5)

    async def scenario() -> None:
        redis = fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer())
        await redis.hset(KEYS.state(ROOM), "status", "idle")
        hub = fanout.Hub(redis, KEYS)
        first = await add_events(redis, 1)
        slow = fanout.follow_room(hub, redis, ROOM, "0-0")
        fast = fanout.follow_room(hub, redis, ROOM, "0-0")
        assert (await next_frame(slow))["id"] == (await next_frame(fast))["id"] == first[0]
        written = []
        for batch in range(4):  # each batch within the queue of a follower that keeps up
            ids = await add_events(redis, 5, start=1 + 5 * batch)
            assert [(await next_frame(fast))["id"] for _ in ids] == ids
            written += ids
        assert len(hub.rooms[ROOM].followers) == 1  # the slow one let go
        handed = [await next_frame(slow) for _ in range(6)]
        assert [frame["id"] for frame in handed[:5]] == written[:5]
        assert handed[5]["event"] == "follower_dropped"
        assert "reconnect with Last-Event-ID" in handed[5]["data"]["detail"]
        with pytest.raises(StopAsyncIteration):
            await anext(slow)
        # Resuming after the last one it got gives the rest.
        resumed = fanout.follow_room(hub, redis, ROOM, handed[4]["id"])
        assert [(await next_frame(resumed))["id"] for _ in written[5:]] == written[5:]
        await fast.aclose()
        await resumed.aclose()
        await hub.close()

    run(scenario())


def test_a_deleted_room_ends_every_followers_stream_and_its_reader():
    async def scenario() -> None:
        redis = fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer())
        await redis.hset(KEYS.state(ROOM), "status", "idle")
        hub = fanout.Hub(redis, KEYS)
        await add_events(redis, 1)
        streams = [fanout.follow_room(hub, redis, ROOM, "0-0") for _ in range(3)]
        for stream in streams:
            await next_frame(stream)
        await redis.delete(KEYS.state(ROOM))
        for stream in streams:
            assert (await next_frame(stream))["event"] == "room_deleted"
        await asyncio.wait_for(hub_forgets(hub), 5)

    run(scenario())


async def hub_forgets(hub: fanout.Hub) -> None:
    while hub.rooms:
        await asyncio.sleep(0.01)
