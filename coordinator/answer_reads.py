"""The rooms' waits for their answers.

A room waiting for the answers of its calls blocks in ``XREAD BLOCK`` on its answers
stream. Given a connection each, 10,000 waiting rooms hold 10,000 connections, about 20 KB
of the coordinator's memory each and as many clients on Redis, and a standby taking a
thousand rooms opens a thousand before their first waits. ``SharedReads`` gives each room
to one of a few readers instead; a reader blocks in one ``XREAD`` over the streams of all
its waiting rooms and hands each room what came on its stream. A room that starts waiting
while its reader is blocked without it has the read cut short (``CLIENT UNBLOCK``, as if
it timed out), and the reader reads again with the room included.

On a Redis Cluster one ``XREAD`` may only name keys of one slot, and every room's keys
have a slot of their own: there (and on the tests' fakeredis) each room waits on its own
connection (``OwnReads``).
"""

from __future__ import annotations

import asyncio
import time
import zlib
from dataclasses import dataclass, field
from typing import Any, Protocol

from redis.asyncio import ConnectionPool, Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from parley.coordinator.connections import RETRIES, RETRY_BACKOFF
from parley.shared.records import decode

Entries = list[tuple[Any, dict[Any, Any]]]  # (entry id, fields), as redis-py gives them
# A read sent but not yet blocked in Redis cannot be cut short: look again this soon.
RETRY_UNBLOCK_S = 0.001
# A dropped connection is opened again and read again, as the rooms' other commands are
# retried (coordinator/connections.py); then the error reaches them.
RETRIED_ERRORS = (RedisConnectionError, RedisTimeoutError, OSError)


class AnswerReads(Protocol):
    async def wait(self, stream: str, after_id: str, block_ms: int) -> Entries:
        """The entries of ``stream`` after ``after_id``, waiting up to ``block_ms`` for
        the first; empty when none came in time."""

    async def aclose(self) -> None:
        """Stop reading and close the connections."""


class OwnReads:
    """Each waiting room blocks on a connection of its own, from ``client``'s pool."""

    def __init__(self, client: Any):
        self.client = client

    async def wait(self, stream: str, after_id: str, block_ms: int) -> Entries:
        reply = await self.client.xread({stream: after_id}, block=max(1, block_ms))
        return [entry for _, entries in reply for entry in entries]

    async def aclose(self) -> None:
        await self.client.aclose()


class SharedReads:
    """The waits of a coordinator's rooms spread over ``readers`` readers, each with a
    connection of ``pool``; ``commands`` (any other client) cuts their blocked reads
    short."""

    def __init__(self, pool: ConnectionPool, commands: Redis, readers: int):
        self.readers = [Reader(pool, commands) for _ in range(readers)]

    async def wait(self, stream: str, after_id: str, block_ms: int) -> Entries:
        reader = self.readers[zlib.crc32(stream.encode()) % len(self.readers)]
        return await reader.wait(stream, after_id, block_ms)

    async def aclose(self) -> None:
        for reader in self.readers:
            await reader.aclose()


@dataclass
class Waiter:
    after_id: str
    deadline: float  # monotonic s
    answered: asyncio.Future[Entries] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future())


class Reader:
    """One connection blocked in one ``XREAD`` over its waiting rooms' streams."""

    def __init__(self, pool: ConnectionPool, commands: Redis):
        self.pool = pool
        self.commands = commands
        self.waiting: dict[str, Waiter] = {}
        self.reading: dict[str, Waiter] = {}  # the waits the read in flight covers
        self.uncovered = False  # a room waits that the read in flight does not cover
        self.woken = asyncio.Event()
        self.connection: Any = None
        self.client_id = 0
        self.failures = 0  # connection errors in a row
        self.task: asyncio.Task[None] | None = None
        self.unblocking: asyncio.Task[None] | None = None

    async def wait(self, stream: str, after_id: str, block_ms: int) -> Entries:
        waiter = Waiter(after_id, time.monotonic() + max(1, block_ms) / 1000)
        self.waiting[stream] = waiter
        if self.task is None:
            self.task = asyncio.create_task(self.read_on(), name="answer-reader")
        self.woken.set()
        if self.reading:
            self.uncovered = True
            if self.unblocking is None:
                self.unblocking = asyncio.create_task(self.unblock())
        try:
            return await waiter.answered
        finally:
            if self.waiting.get(stream) is waiter:
                del self.waiting[stream]

    async def read_on(self) -> None:
        while True:
            if not self.waiting:
                self.woken.clear()
                await self.woken.wait()
            now = time.monotonic()
            for stream, waiter in list(self.waiting.items()):
                if waiter.deadline <= now:
                    self.answer(stream, waiter, [])
            if not self.waiting:
                continue
            try:
                if self.connection is None or not self.connection.is_connected:
                    await self.open()
                # Covered from here on: a room waiting later has this read cut short.
                self.reading = dict(self.waiting)
                self.uncovered = False
                reply = await self.read(self.reading)
            except asyncio.CancelledError:
                raise
            except Exception as error:  # noqa: BLE001 - each waiting room handles it
                self.drop_connection()
                self.reading = {}
                if isinstance(error, RETRIED_ERRORS) and self.failures < RETRIES:
                    self.failures += 1
                    await asyncio.sleep(RETRY_BACKOFF.compute(self.failures))
                    continue
                self.failures = 0
                for stream, waiter in list(self.waiting.items()):
                    self.answer(stream, waiter, error)
                continue
            self.failures = 0
            read, self.reading = self.reading, {}
            for stream, entries in reply:
                if stream in read and self.waiting.get(stream) is read[stream]:
                    self.answer(stream, read[stream], entries)
            # The rooms just answered wait again (most at once) before the next read.
            await asyncio.sleep(0)

    def answer(self, stream: str, waiter: Waiter, entries: Entries | Exception) -> None:
        del self.waiting[stream]
        if waiter.answered.done():
            return
        if isinstance(entries, Exception):
            waiter.answered.set_exception(entries)
        else:
            waiter.answered.set_result(entries)

    async def read(self, streams: dict[str, Waiter]) -> list[tuple[str, Entries]]:
        """One ``XREAD`` of ``streams``, blocked until the first of their deadlines."""
        deadline = min(waiter.deadline for waiter in streams.values())
        block_ms = max(1, int((deadline - time.monotonic()) * 1000))
        await self.connection.send_command(
            "XREAD", "BLOCK", block_ms, "STREAMS", *streams,
            *(waiter.after_id for waiter in streams.values()))
        reply = await self.connection.read_response()
        if not reply:  # timed out, or cut short
            return []
        pairs = reply.items() if isinstance(reply, dict) else reply  # RESP3 or RESP2
        return [(decode(stream), [(entry_id, _fields(flat)) for entry_id, flat in entries])
                for stream, entries in pairs]

    async def open(self) -> None:
        self.drop_connection()
        self.connection = await self.pool.get_connection()
        await self.connection.connect()
        await self.connection.send_command("CLIENT", "ID")
        self.client_id = int(await self.connection.read_response())

    def drop_connection(self) -> None:
        if self.connection is not None:
            connection, self.connection = self.connection, None
            # Not awaited back into the pool in mid reply: disconnected, then released.
            asyncio.get_running_loop().create_task(self.release(connection))

    async def release(self, connection: Any) -> None:
        await connection.disconnect()
        await self.pool.release(connection)

    async def unblock(self) -> None:
        """Cut the blocked read short until it covers every waiting room. A read sent but
        not yet blocked in Redis cannot be unblocked: try again until it is, or is
        answered."""
        try:
            while self.reading and self.uncovered:
                if not await self.commands.client_unblock(self.client_id):
                    await asyncio.sleep(RETRY_UNBLOCK_S)
                else:  # the reader reads again before the next look
                    await asyncio.sleep(0)
        except Exception:  # noqa: BLE001 - Redis unusable: the read itself fails or times out
            pass
        finally:
            self.unblocking = None

    async def aclose(self) -> None:
        for task in (self.task, self.unblocking):
            if task is not None:
                task.cancel()
        for waiter in self.waiting.values():
            waiter.answered.cancel()
        connection, self.connection = self.connection, None
        if connection is not None:
            await self.release(connection)


def _fields(flat: Any) -> dict[Any, Any]:
    if isinstance(flat, dict):
        return flat
    return dict(zip(flat[::2], flat[1::2], strict=True))
