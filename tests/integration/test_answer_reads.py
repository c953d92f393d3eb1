"""Rooms waiting for their answers on shared readers, against the real Redis: each room is
handed what came on its own stream, a room that starts waiting while its reader is
blocked is not left waiting for the others, and a lost connection reaches every room it
served and is opened again."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError

from parley.coordinator.answer_reads import SharedReads
from parley.coordinator.connections import reader_pool
from parley.processes import free_port
from parley.shared.settings import Settings

pytestmark = pytest.mark.redis

LONG_MS = 60_000  # a wait that no test may sit out: the tests give up long before


def streams(prefix: str, count: int) -> list[str]:
    return [f"{prefix}:{{r{n}}}:bids" for n in range(count)]


def run_with_reads(settings: Settings, readers: int,
                   body: Callable[[SharedReads, Redis], Awaitable[object]]) -> object:
    async def main() -> object:
        commands = Redis.from_url(settings.redis_url)
        reads = SharedReads(reader_pool(settings, readers), commands, readers)
        try:
            return await asyncio.wait_for(body(reads, commands), 20)
        finally:
            await reads.aclose()
            await commands.aclose()

    return asyncio.run(main())


async def until_blocked(reads: SharedReads, covering: int) -> None:
    """Until every reader has a read in flight covering ``covering`` streams in all."""
    while sum(len(reader.reading) for reader in reads.readers) != covering:
        await asyncio.sleep(0.001)


def test_a_room_is_handed_what_comes_on_its_stream_after_its_cursor(settings, real_redis):
    a, b = streams(settings.key_prefix, 2)
    before = real_redis.xadd(a, {"agent": "old"})

    async def body(reads: SharedReads, commands: Redis) -> object:
        waiting = asyncio.create_task(reads.wait(a, before.decode(), LONG_MS))
        await until_blocked(reads, 1)
        await commands.xadd(b, {"agent": "other room"})
        await commands.xadd(a, {"agent": "new"})
        return await waiting

    entries = run_with_reads(settings, 1, body)

    assert [fields[b"agent"] for _, fields in entries] == [b"new"]


def test_entries_already_there_are_handed_at_once_and_a_wait_with_none_times_out_empty(
        settings, real_redis):
    a, b = streams(settings.key_prefix, 2)
    real_redis.xadd(a, {"agent": "there"})

    async def body(reads: SharedReads, commands: Redis) -> object:
        return await reads.wait(a, "0-0", LONG_MS), await reads.wait(b, "0-0", 50)

    there, none = run_with_reads(settings, 1, body)

    assert [fields[b"agent"] for _, fields in there] == [b"there"]
    assert none == []


def test_a_room_that_starts_waiting_while_its_reader_is_blocked_is_answered_at_once(
        settings, real_redis):
    """Without the blocked read cut short, the second room would wait for the first's
    minute-long read to end."""
    first, second = streams(settings.key_prefix, 2)

    async def body(reads: SharedReads, commands: Redis) -> object:
        waiting_first = asyncio.create_task(reads.wait(first, "0-0", LONG_MS))
        await until_blocked(reads, 1)
        waiting_second = asyncio.create_task(reads.wait(second, "0-0", LONG_MS))
        await until_blocked(reads, 2)
        await commands.xadd(second, {"agent": "second's"})
        entries = await asyncio.wait_for(waiting_second, 5)
        still_waiting = not waiting_first.done()
        waiting_first.cancel()
        return entries, still_waiting

    entries, still_waiting = run_with_reads(settings, 1, body)

    assert [fields[b"agent"] for _, fields in entries] == [b"second's"]
    assert still_waiting


def test_hundreds_of_rooms_on_a_few_readers_each_get_their_own_answers(settings, real_redis):
    names = streams(settings.key_prefix, 300)

    async def body(reads: SharedReads, commands: Redis) -> object:
        waiting = [asyncio.create_task(reads.wait(name, "0-0", LONG_MS)) for name in names]
        await until_blocked(reads, len(names))
        pipe = commands.pipeline(transaction=False)
        for name in reversed(names):
            pipe.xadd(name, {"room": name})
        await pipe.execute()
        answered = await asyncio.gather(*waiting)
        opened = {id(reader.connection) for reader in reads.readers}
        return answered, len(opened)

    answered, connections = run_with_reads(settings, 4, body)

    assert [[fields[b"room"].decode() for _, fields in entries] for entries in answered] == [
        [name] for name in names]
    assert connections == 4


def test_a_cancelled_wait_leaves_the_others_waiting_on_the_same_reader(settings, real_redis):
    gone, kept = streams(settings.key_prefix, 2)

    async def body(reads: SharedReads, commands: Redis) -> object:
        leaving = asyncio.create_task(reads.wait(gone, "0-0", LONG_MS))
        staying = asyncio.create_task(reads.wait(kept, "0-0", LONG_MS))
        await until_blocked(reads, 2)
        leaving.cancel()
        await commands.xadd(gone, {"agent": "nobody's"})
        await commands.xadd(kept, {"agent": "kept's"})
        return await staying, reads.readers[0].waiting

    entries, waiting = run_with_reads(settings, 1, body)

    assert [fields[b"agent"] for _, fields in entries] == [b"kept's"]
    assert waiting == {}


def test_a_lost_connection_is_opened_again_and_its_rooms_keep_waiting(settings, real_redis):
    a, b = streams(settings.key_prefix, 2)

    async def body(reads: SharedReads, commands: Redis) -> object:
        waits = [asyncio.create_task(reads.wait(name, "0-0", LONG_MS)) for name in (a, b)]
        await until_blocked(reads, 2)
        lost = reads.readers[0].client_id
        await commands.client_kill_filter(_id=lost)
        while reads.readers[0].client_id == lost or not reads.readers[0].reading:
            await asyncio.sleep(0.001)
        await commands.xadd(a, {"agent": "a's"})
        await commands.xadd(b, {"agent": "b's"})
        return await asyncio.gather(*waits)

    answered = run_with_reads(settings, 1, body)

    assert [[fields[b"agent"] for _, fields in entries] for entries in answered] == [
        [b"a's"], [b"b's"]]


def test_a_redis_that_stays_unreachable_reaches_every_waiting_room_as_its_error(settings):
    unreachable = settings.model_copy(update={"redis_url": f"redis://127.0.0.1:{free_port()}/0"})
    a, b = streams(settings.key_prefix, 2)

    async def body(reads: SharedReads, commands: Redis) -> object:
        waits = [reads.wait(name, "0-0", LONG_MS) for name in (a, b)]
        return await asyncio.gather(*waits, return_exceptions=True)

    failed = run_with_reads(unreachable, 1, body)

    assert [type(error) for error in failed] == [RedisConnectionError] * 2
