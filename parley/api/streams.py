"""Server-sent event streams: one room's events as they are written, and every room's run
starts and ends.

Each event is one SSE message: ``id:`` its stream id, ``event:`` its type, ``data:`` the
JSON of ``parley events --json`` (id, type, fields, ts; ``room`` too on /events). Reads
block on Redis (``XREAD BLOCK``) through the asyncio client, so a follower costs the
server a connection and no thread. A quiet stream gets a comment line every
``KEEPALIVE_S``, so proxies keep it open; a follower that goes away ends its stream.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import StreamingResponse

from parley.api import metrics
from parley.api.errors import ApiError
from parley.client.following import stream_id
from parley.shared.events import EventType, event_from_entry, event_type_named
from parley.shared.keys import Keys
from parley.shared.logs import one_line
from parley.shared.records import decode
from parley.views.documents import event_json

router = APIRouter(tags=["events"])
KEEPALIVE_S = 15.0
# How long one read blocks: also how soon a deleted room's stream ends, and how often
# /events looks for rooms that became active.
BLOCK_MS = 5000
RUNS_BLOCK_MS = 1000
READ_COUNT = 500
# /events follows the rooms that are due or held (runnable) and those active within this
# long (a run's end lets its room go and marks it active), at most WATCH_MAX of each.
WATCH_S = 60.0
WATCH_MAX = 10_000
# A room /events sees for the first time is read from this long before its previous look.
CATCH_UP_MS = 2000
RUN_EVENTS = frozenset({EventType.RUN_STARTED.value, EventType.RUN_ENDED.value})
# The event that ends a room's stream when the room is gone (deleted, archived, expired).
ROOM_DELETED = "room_deleted"
_STREAM_ID = re.compile(r"\d{1,20}(-\d{1,20})?\Z")
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
# The asyncio Redis client: redis-py types its replies as a union of what any client could
# return; this one returns bytes.
AsyncRedis = Any


def sse(event: str, data: dict[str, Any], event_id: str | None = None) -> bytes:
    """One server-sent event message."""
    head = f"id: {event_id}\n" if event_id else ""
    body = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return f"{head}event: {one_line(event)}\ndata: {body}\n\n".encode()


KEEPALIVE = b": keep-alive\n\n"


def start_id(last_event_id: str | None, after: str | None, default: str) -> str:
    """Where a stream starts: after the Last-Event-ID header (a reconnecting EventSource
    sends it), else after ``?after=``, else ``default``; 400 for a value that is not a
    stream id (or ``$``: only what comes next)."""
    for name, value in (("Last-Event-ID", last_event_id), ("after", after)):
        if value is not None and value != "":
            if value != "$" and not _STREAM_ID.fullmatch(value):
                raise ApiError(400, f"{name} {value!r} is not an event id (like "
                               "1764500000123-0, or $ for only new events)")
            return value
    return default


def aredis_of(request: Request) -> AsyncRedis:
    """The app's asyncio Redis client."""
    return request.app.state.aredis


def keys_of(request: Request) -> Keys:
    """The app's key names."""
    return request.app.state.client.store.keys


def event_stream(request: Request, route: str, events: AsyncIterator[bytes]
                 ) -> StreamingResponse:
    """A streaming response of ``events``, counted in the open-streams gauge while it
    lasts, that ends as soon as its follower has gone."""

    async def body() -> AsyncIterator[bytes]:
        gauge = metrics.SSE_STREAMS.labels(route=route)
        gauge.inc()
        try:
            async for chunk in events:
                if chunk is not KEEPALIVE:
                    metrics.SSE_EVENTS.labels(route=route).inc()
                yield chunk
        finally:
            gauge.dec()
            await events.aclose()  # type: ignore[attr-defined]

    return StreamingResponse(body(), media_type="text/event-stream", headers=SSE_HEADERS)


@router.get("/rooms/{room}/events", response_class=StreamingResponse,
            responses={200: {"content": {"text/event-stream": {}}}})
async def room_events(
    room: str, request: Request,
    after: Annotated[str | None, Query(description="Start after this event id ($: only new "
                                       "events); default: the oldest kept")] = None,
    last_event_id: Annotated[str | None, Header()] = None,
    access_token: Annotated[str | None, Query(description="The bearer token, for browsers' "
                                              "EventSource")] = None,
    until: Annotated[str | None, Query(description="Close the stream after the first event "
                                       "of this type (e.g. run_ended)")] = None,
) -> StreamingResponse:
    """The room's events as server-sent events, from the oldest kept (or after
    Last-Event-ID / ``after``), then each as it is written. A room that goes away ends
    the stream with a ``room_deleted`` event; ``until`` ends it after that event."""
    redis, keys = aredis_of(request), keys_of(request)
    after_id = start_id(last_event_id, after, "0-0")
    try:
        last_type = event_type_named(until) if until else None
    except ValueError as error:
        raise ApiError(400, f"until {error}") from None
    if not await redis.exists(keys.state(room)):
        raise ApiError(404, f"no room {room!r}")
    if after_id == "$":
        last = await redis.xrevrange(keys.events(room), "+", "-", count=1)
        after_id = decode(last[0][0]) if last else "0-0"
    return event_stream(request, "/rooms/{room}/events",
                        follow_room(redis, keys, room, after_id, request, last_type))


async def follow_room(redis: AsyncRedis, keys: Keys, room: str, after: str, request: Request,
                      until: str | None = None) -> AsyncIterator[bytes]:
    """The room's events after ``after`` as SSE messages, keep-alives between, until the
    room is gone, its follower leaves, or an event of type ``until`` was sent."""
    quiet_since = time.monotonic()
    while not await request.is_disconnected():
        reply = await redis.xread({keys.events(room): after}, count=READ_COUNT, block=BLOCK_MS)
        for _key, entries in reply:
            for entry_id, fields in entries:
                event = event_from_entry(entry_id, fields)
                after = event.id
                yield sse(event.type, event_json(event), event.id)
                if event.type == until:
                    return
        if reply:
            quiet_since = time.monotonic()
            continue
        if not await redis.exists(keys.state(room)):
            yield sse(ROOM_DELETED, {"room": room, "detail": "the room was deleted, archived "
                                     "or expired"})
            return
        if time.monotonic() - quiet_since >= KEEPALIVE_S:
            quiet_since = time.monotonic()
            yield KEEPALIVE


@router.get("/events", response_class=StreamingResponse,
            responses={200: {"content": {"text/event-stream": {}}}})
async def run_events(
    request: Request,
    after: Annotated[str | None, Query(description="Start after this event id; default: "
                                       "only what comes next")] = None,
    last_event_id: Annotated[str | None, Header()] = None,
    access_token: Annotated[str | None, Query(description="The bearer token, for browsers' "
                                              "EventSource")] = None,
) -> StreamingResponse:
    """Every room's ``run_started`` and ``run_ended`` as server-sent events (each with its
    ``room``), from now on (or after Last-Event-ID / ``after``)."""
    redis, keys = aredis_of(request), keys_of(request)
    after_id = start_id(last_event_id, after, "$")
    if after_id == "$":
        seconds, micros = await redis.time()
        after_id = f"{int(seconds) * 1000 + int(micros) // 1000}-0"
    return event_stream(request, "/events", follow_runs(redis, keys, after_id, request))


async def follow_runs(redis: AsyncRedis, keys: Keys, after: str, request: Request
                      ) -> AsyncIterator[bytes]:
    """Run starts and ends of every active room after ``after`` as SSE messages.

    There is no global stream to read (a room's scripts write its own keys only, so that
    each runs in one Redis Cluster slot): each look reads which rooms are due, held or
    recently active and blocks on all their events streams at once. A room seen for the
    first time is read from just before the previous look, so a run that started between
    two looks is not missed; each room's cursor keeps any event from being sent twice."""
    cursors: dict[str, str] = {}
    catch_up_from = after
    quiet_since = time.monotonic()
    while not await request.is_disconnected():
        now_ms, watched = await watched_rooms(redis, keys)
        for room in watched:
            cursors.setdefault(room, catch_up_from)
        for room in [room for room in cursors if room not in watched]:
            del cursors[room]
        catch_up_from = f"{now_ms - CATCH_UP_MS}-0"
        found = await read_runs(redis, keys, cursors)
        for room, event in found:
            yield sse(event.type, {"room": room, **event_json(event)}, event.id)
        if found:
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since >= KEEPALIVE_S:
            quiet_since = time.monotonic()
            yield KEEPALIVE


async def watched_rooms(redis: AsyncRedis, keys: Keys) -> tuple[int, set[str]]:
    """Redis's clock (ms) and the rooms that are due or held, or were active lately."""
    seconds, micros = await redis.time()
    now_ms = int(seconds) * 1000 + int(micros) // 1000
    pipe = redis.pipeline(transaction=False)
    pipe.zrange(keys.runnable, 0, WATCH_MAX - 1)
    pipe.zrevrangebyscore(keys.rooms, "+inf", now_ms - int(WATCH_S * 1000), start=0,
                          num=WATCH_MAX)
    runnable, active = await pipe.execute()
    return now_ms, {decode(room) for room in [*runnable, *active]}


async def read_runs(redis: AsyncRedis, keys: Keys, cursors: dict[str, str]
                    ) -> list[tuple[str, Any]]:
    """The run events after each room's cursor, waiting up to RUNS_BLOCK_MS for any event
    at all, in stream-id order across rooms; the cursors move past every event read."""
    if not cursors:
        await asyncio.sleep(RUNS_BLOCK_MS / 1000)
        return []
    room_of = {keys.events(room): room for room in cursors}
    reply = await redis.xread({key: cursors[room] for key, room in room_of.items()},
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
