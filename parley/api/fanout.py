"""Live events for any number of followers at the cost of one Redis reader per stream.

Each followed room has one reader in the API process: one connection blocked in
``XREAD`` on the room's events stream, however many follow it; ``/events`` has one reader
for every room's run starts and ends. A reader encodes each event once, as the SSE message
every follower sends, and hands it to each follower's queue.

A follower joins its reader, reads what it missed since its start id from Redis itself
(``XRANGE``: short reads on the shared pool, no connection held), then sends what the
reader hands it, skipping what it has sent already. A follower whose queue holds QUEUE_MAX
messages (its client reads slower than the room writes) is dropped from its reader so that
it never holds up the others: its stream ends with a ``follower_dropped`` event after the
last message it was handed, so an ``EventSource`` reconnecting with ``Last-Event-ID``
resumes exactly there.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import redis
import structlog

from parley.client.following import stream_id
from parley.shared.events import Event, EventType, event_from_entry
from parley.shared.keys import Keys
from parley.shared.logs import one_line
from parley.shared.models import DEFAULT_ORGANIZATION
from parley.shared.records import decode
from parley.views.documents import event_json

log = structlog.get_logger("parley.api")
# The asyncio Redis client: redis-py types its replies as a union of what any client could
# return; this one returns bytes.
AsyncRedis = Any

# How long one read blocks: also how soon a deleted room's stream ends, and how often
# /events looks for rooms that became active.
BLOCK_MS = 5000
RUNS_BLOCK_MS = 1000
READ_COUNT = 500
KEEPALIVE_S = 15.0
# Messages a follower may be behind its reader before it is dropped (about 50 turns of a
# 16-agent room): above READ_COUNT, so that one read's worth never drops a follower that
# keeps up.
QUEUE_MAX = 1000
# A reader that cannot read waits this long before it tries again; a follower waits this
# long for its new reader's first look before it gives up.
RETRY_S = 1.0
START_TIMEOUT_S = 10.0
# /events follows the rooms that are due or held (runnable) and those active within this
# long (a run's end lets its room go and marks it active), at most WATCH_MAX of each.
WATCH_S = 60.0
WATCH_MAX = 10_000
# A room /events sees for the first time is read from this long before its previous look.
CATCH_UP_MS = 2000
RUN_EVENTS = frozenset({EventType.RUN_STARTED.value, EventType.RUN_ENDED.value})
# The event that ends a room's stream when the room is gone (deleted, archived, expired).
ROOM_DELETED = "room_deleted"
# The events that end a follower's stream when it fell QUEUE_MAX messages behind, and when
# its reader failed on something other than an outage.
FOLLOWER_DROPPED = "follower_dropped"
STREAM_FAILED = "stream_failed"
KEEPALIVE = b": keep-alive\n\n"
# Each part of a stream id is an unsigned 64-bit number.
STREAM_ID_PART_MAX = 2**64 - 1
NEWEST_POSSIBLE = (STREAM_ID_PART_MAX, STREAM_ID_PART_MAX)


def sse(event: str, data: dict[str, Any], event_id: str | None = None) -> bytes:
    """One server-sent event message."""
    head = f"id: {event_id}\n" if event_id else ""
    body = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return f"{head}event: {one_line(event)}\ndata: {body}\n\n".encode()


@dataclass(frozen=True)
class Frame:
    """One message a reader hands its followers: the event's room, stream id and type, its
    SSE bytes, and whether it ends the stream."""

    room: str
    id: str
    data: bytes
    last: bool = False
    type: str = ""


def end_frame(event: str, data: dict[str, Any]) -> Frame:
    """A message that ends a follower's stream (it carries no id: nothing to resume)."""
    return Frame(room="", id="", data=sse(event, data), last=True)


DROPPED = end_frame(FOLLOWER_DROPPED, {
    "detail": f"this stream fell {QUEUE_MAX:,} events behind and was ended: reconnect with "
              "Last-Event-ID to resume after the last event received"})


FAILED = end_frame(STREAM_FAILED, {
    "detail": "the API could not read this stream: reconnect with Last-Event-ID to resume"})


class Follower:
    """One stream's place at a reader: the messages handed to it and not sent yet, and
    ``since``, the id after which the reader hands it everything (None until the reader
    has started)."""

    def __init__(self, since: str | None) -> None:
        self.queue: asyncio.Queue[Frame] = asyncio.Queue()
        self.since = since

    def hand(self, frame: Frame) -> bool:
        """Queue ``frame``; False (and the stream's end queued) when the follower is
        QUEUE_MAX messages behind."""
        if self.queue.qsize() >= QUEUE_MAX:
            self.queue.put_nowait(DROPPED)
            return False
        self.queue.put_nowait(frame)
        return True

    async def frames(self) -> AsyncIterator[Frame | None]:
        """The messages as they are handed over, None after each KEEPALIVE_S without one,
        up to and including the one that ends the stream."""
        while True:
            try:
                frame = await asyncio.wait_for(self.queue.get(), KEEPALIVE_S)
            except TimeoutError:
                yield None
                continue
            yield frame
            if frame.last:
                return


class Reader:
    """One Redis reader for many followers; it runs while it has any. ``started`` is set
    once it knows where it reads from, ``cursor`` (the id of the last entry read): it
    hands over what comes after that."""

    def __init__(self, hub: Hub, key: str) -> None:
        self.hub = hub
        self.key = key
        self.followers: set[Follower] = set()
        self.started = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        self.cursor = ""
        self.first_cursor = ""

    def join(self) -> Follower:
        """A new follower, handed every message read from now on."""
        follower = Follower(self.cursor if self.started.is_set() else None)
        self.followers.add(follower)
        if self.task is None:
            self.task = asyncio.create_task(self.run(), name=f"reader {self.key}")
        return follower

    def leave(self, follower: Follower) -> None:
        """Hand ``follower`` nothing more."""
        self.followers.discard(follower)

    def hand_all(self, frame: Frame) -> None:
        """Hand ``frame`` to every follower; drop those too far behind."""
        for follower in list(self.followers):
            if not follower.hand(frame) or frame.last:
                self.followers.discard(follower)

    async def wait_started(self, follower: Follower) -> str | None:
        """The id after which ``follower`` is handed everything, once the reader has
        started; None if it could not start within START_TIMEOUT_S."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.started.wait(), START_TIMEOUT_S)
        if not self.started.is_set():
            return None
        return follower.since or self.first_cursor

    async def run(self) -> None:
        """Read and hand over until no follower is left; a failed read is tried again
        after RETRY_S (followers keep their streams and get keep-alives meanwhile)."""
        try:
            while self.followers:
                try:
                    await self.read_once()
                except (redis.ConnectionError, redis.TimeoutError) as error:
                    log.warning("event reader cannot reach Redis; trying again", stream=self.key,
                                error=one_line(str(error)))
                    await asyncio.sleep(RETRY_S)
        except Exception:
            log.exception("event reader failed", stream=self.key)
            self.hand_all(FAILED)
        finally:
            self.hub.forget(self)

    async def read_once(self) -> None:
        """One read, its messages handed over."""
        raise NotImplementedError


class RoomReader(Reader):
    """The reader of one room's events stream; it ends every stream with ``room_deleted``
    when the room is gone."""

    def __init__(self, hub: Hub, room: str) -> None:
        super().__init__(hub, hub.keys.events(room))
        self.room = room

    async def read_once(self) -> None:
        """Start after the newest entry, then block for the next ones."""
        redis_ = self.hub.redis
        if not self.started.is_set():
            newest = await redis_.xrevrange(self.key, "+", "-", count=1)
            self.cursor = self.first_cursor = decode(newest[0][0]) if newest else "0-0"
            self.started.set()
            return
        reply = await redis_.xread({self.key: self.cursor}, count=READ_COUNT, block=BLOCK_MS)
        for _key, entries in reply:
            for entry_id, fields in entries:
                frame = room_frame(self.room, event_from_entry(entry_id, fields))
                self.cursor = frame.id
                self.hand_all(frame)
        if not reply and not await redis_.exists(self.hub.keys.state(self.room)):
            self.hand_all(end_frame(ROOM_DELETED, {
                "room": self.room, "detail": "the room was deleted, archived or expired"}))


def room_frame(room: str, event: Event) -> Frame:
    """A room's event as its followers send it."""
    return Frame(room=room, id=event.id, data=sse(event.type, event_json(event), event.id),
                 type=event.type)


def run_frame(room: str, event: Event) -> Frame:
    """A run's start or end as /events sends it, with its room."""
    return Frame(room=room, id=event.id,
                 data=sse(event.type, {"room": room, **event_json(event)}, event.id))


class RunsReader(Reader):
    """The reader of every active room's run starts and ends.

    There is no global stream to read (a room's scripts write its own keys only, so that
    each runs in one Redis Cluster slot): each look reads which rooms are due, held or
    recently active and blocks on all their events streams at once. A room seen for the
    first time is read from just before the previous look, so a run that started between
    two looks is not missed; each room's cursor keeps any event from being sent twice."""

    def __init__(self, hub: Hub) -> None:
        super().__init__(hub, "/events")
        self.cursors: dict[str, str] = {}
        self.catch_up_from = ""

    async def read_once(self) -> None:
        """Start now, then look at the active rooms and read their run events."""
        redis_, keys = self.hub.redis, self.hub.keys
        if not self.started.is_set():
            self.catch_up_from = self.cursor = f"{await redis_now_ms(redis_)}-0"
            self.started.set()
            return
        now_ms, watched = await watched_rooms(redis_, keys)
        for room in watched:
            self.cursors.setdefault(room, self.catch_up_from)
        for room in [room for room in self.cursors if room not in watched]:
            del self.cursors[room]
        self.catch_up_from = f"{now_ms - CATCH_UP_MS}-0"
        for room, event in await read_runs(redis_, keys, self.cursors):
            self.hand_all(run_frame(room, event))


class Hub:
    """The API process's readers, by what they read; ``redis`` is the client they block
    on (a pool of its own: each reader holds one connection while it blocks)."""

    def __init__(self, redis_: AsyncRedis, keys: Keys) -> None:
        self.redis = redis_
        self.keys = keys
        self.rooms: dict[str, RoomReader] = {}
        self.runs: RunsReader | None = None

    def room_reader(self, room: str) -> RoomReader:
        """The room's reader (a new one when none runs)."""
        if room not in self.rooms:
            self.rooms[room] = RoomReader(self, room)
        return self.rooms[room]

    def runs_reader(self) -> RunsReader:
        """The reader of every room's runs (a new one when none runs)."""
        if self.runs is None:
            self.runs = RunsReader(self)
        return self.runs

    def forget(self, reader: Reader) -> None:
        """Let a reader that stopped go: the next follower starts a new one."""
        if isinstance(reader, RoomReader) and self.rooms.get(reader.room) is reader:
            del self.rooms[reader.room]
        elif self.runs is reader:
            self.runs = None

    async def close(self) -> None:
        """Stop every reader (the server is stopping)."""
        readers: list[Reader] = [*self.rooms.values(), *([self.runs] if self.runs else [])]
        tasks = [reader.task for reader in readers if reader.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def follow_room(hub: Hub, redis_: AsyncRedis, room: str, after: str | None,
                      until: str | None = None) -> AsyncIterator[bytes]:
    """The room's events after ``after`` (None: only those to come) as SSE messages,
    keep-alives between, until the room is gone, the follower falls too far behind, or an
    event of type ``until`` was sent. ``redis_`` serves the catch-up reads, for a follower
    that starts before its reader."""
    reader = hub.room_reader(room)
    follower = reader.join()
    try:
        since = await reader.wait_started(follower)
        if since is None:
            return
        sent = stream_id(since if after is None else after)
        if sent < stream_id(since):
            try:
                async for entry_id, event in history(redis_, reader.key, str(after), since):
                    sent = stream_id(entry_id)
                    yield room_frame(room, event).data
                    if event.type == until:
                        return
            except (redis.ConnectionError, redis.TimeoutError) as error:
                log.warning("event stream catch-up failed", room=room, error=one_line(str(error)))
                yield FAILED.data
                return
        async for handed in follower.frames():
            if handed is None:
                yield KEEPALIVE
            elif handed.last or stream_id(handed.id) > sent:
                sent = stream_id(handed.id) if handed.id else sent
                yield handed.data
                if until and handed.type == until:
                    return
    finally:
        reader.leave(follower)


async def follow_runs(hub: Hub, redis_: AsyncRedis, after: str | None,
                      organization: str | None = None) -> AsyncIterator[bytes]:
    """Run starts and ends of every active room (of ``organization`` only, when given) as
    SSE messages: after ``after`` (None: from now on), then as they happen."""
    shown = RoomsOf(redis_, hub.keys, organization)
    reader = hub.runs_reader()
    follower = reader.join()
    try:
        if await reader.wait_started(follower) is None:
            return
        floor = (0, 0)
        read_up_to: dict[str, tuple[int, int]] = {}
        if after is not None:
            floor = stream_id(after)
            try:
                found = await runs_history(hub, redis_, after, read_up_to)
            except (redis.ConnectionError, redis.TimeoutError) as error:
                log.warning("run events catch-up failed", error=one_line(str(error)))
                found = [FAILED]
            for frame in found:
                if await shown.includes(frame):
                    yield frame.data
                if frame.last:
                    return
        async for handed in follower.frames():
            if handed is None:
                yield KEEPALIVE
            elif (handed.last or stream_id(handed.id) > read_up_to.get(handed.room, floor)
                  ) and await shown.includes(handed):
                yield handed.data
    finally:
        reader.leave(follower)


class RoomsOf:
    """Which rooms' run events one follower of /events gets: an organization's, or every
    room's. Each event's room is looked up as it comes (run events are few), not
    remembered: an id deleted and created again may be another organization's."""

    def __init__(self, redis_: AsyncRedis, keys: Keys, organization: str | None) -> None:
        self.redis, self.keys, self.organization = redis_, keys, organization

    async def includes(self, frame: Frame) -> bool:
        """True when the follower gets ``frame`` (an end of stream always)."""
        if self.organization is None or not frame.room:
            return True
        found = await self.redis.hget(self.keys.state(frame.room), "organization")
        return (decode(found or b"") or DEFAULT_ORGANIZATION) == self.organization


async def history(redis_: AsyncRedis, key: str, after: str, until: str = "+"
                  ) -> AsyncIterator[tuple[str, Event]]:
    """The entries of the stream ``key`` after ``after`` and up to ``until`` with their
    ids, read a page at a time up to a short page (a reader hands over what comes later)."""
    while stream_id(after) != NEWEST_POSSIBLE:  # nothing comes after it (Redis: an error)
        entries = await redis_.xrange(key, f"({after}", until, count=READ_COUNT)
        for entry_id, fields in entries:
            after = decode(entry_id)
            yield after, event_from_entry(entry_id, fields)
        if len(entries) < READ_COUNT:
            return


async def runs_history(hub: Hub, redis_: AsyncRedis, after: str,
                       read_up_to: dict[str, tuple[int, int]]) -> list[Frame]:
    """The run events after ``after`` of the rooms active now, in stream-id order;
    ``read_up_to`` gets the id of the last entry read of each room."""
    _now, watched = await watched_rooms(redis_, hub.keys)
    found: list[Frame] = []
    for room in sorted(watched):
        read_up_to[room] = stream_id(after)
        async for entry_id, event in history(redis_, hub.keys.events(room), after):
            read_up_to[room] = stream_id(entry_id)
            if event.type in RUN_EVENTS:
                found.append(run_frame(room, event))
    return sorted(found, key=lambda frame: stream_id(frame.id))


async def redis_now_ms(redis_: AsyncRedis) -> int:
    """Redis's clock, in ms."""
    seconds, micros = await redis_.time()
    return int(seconds) * 1000 + int(micros) // 1000


async def watched_rooms(redis_: AsyncRedis, keys: Keys) -> tuple[int, set[str]]:
    """Redis's clock (ms) and the rooms that are due or held, or were active lately."""
    now_ms = await redis_now_ms(redis_)
    pipe = redis_.pipeline(transaction=False)
    pipe.zrange(keys.runnable, 0, WATCH_MAX - 1)
    pipe.zrevrangebyscore(keys.rooms, "+inf", now_ms - int(WATCH_S * 1000), start=0,
                          num=WATCH_MAX)
    runnable, active = await pipe.execute()
    return now_ms, {decode(room) for room in [*runnable, *active]}


async def read_runs(redis_: AsyncRedis, keys: Keys, cursors: dict[str, str]
                    ) -> list[tuple[str, Any]]:
    """The run events after each room's cursor, waiting up to RUNS_BLOCK_MS for any event
    at all, in stream-id order across rooms; the cursors move past every event read."""
    if not cursors:
        await asyncio.sleep(RUNS_BLOCK_MS / 1000)
        return []
    room_of = {keys.events(room): room for room in cursors}
    reply = await redis_.xread({key: cursors[room] for key, room in room_of.items()},
                               count=READ_COUNT, block=RUNS_BLOCK_MS)
    found = []
    for key, entries in reply:
        room = room_of[decode(key)]
        for entry_id, fields in entries:
            cursors[room] = decode(entry_id)
            if fields.get(b"type", b"").decode() in RUN_EVENTS:
                found.append((room, event_from_entry(entry_id, fields)))
    found.sort(key=lambda item: stream_id(item[1].id))
    return found
