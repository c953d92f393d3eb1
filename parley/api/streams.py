"""Server-sent event routes: one room's events as they are written, and every room's run
starts and ends.

Each event is one SSE message: ``id:`` its stream id, ``event:`` its type, ``data:`` the
JSON of ``parley events --json`` (id, type, fields, ts; ``room`` too on /events). Followers
of a stream share one Redis reader in the API process (fanout.py), so a follower costs the
server a connection and no thread, and a thousand followers of one room cost Redis one
connection. A stream opens with a comment line, so a client knows at once that it is
connected (an EventSource's ``open``) even when nothing has happened yet; a quiet stream
gets one every ``KEEPALIVE_S``, so proxies keep it open; a follower that goes away ends its
stream.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import StreamingResponse

from parley.api import metrics
from parley.api.access import identity_of
from parley.api.errors import ApiError
from parley.api.fanout import (
    KEEPALIVE,
    STREAM_ID_PART_MAX,
    AsyncRedis,
    Hub,
    follow_room,
    follow_runs,
)
from parley.shared.events import event_type_named
from parley.shared.keys import Keys

router = APIRouter(tags=["events"])
_STREAM_ID = re.compile(r"(\d{1,20})(?:-(\d{1,20}))?\Z")
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
# The first bytes of every stream: the response's head goes out with them, not with the
# first event, which may be minutes away.
OPENED = b": open\n\n"


def is_stream_id(value: str) -> bool:
    """True for a Redis stream id (``1764500000123-0``, or its first part alone)."""
    match = _STREAM_ID.fullmatch(value)
    return match is not None and all(int(part) <= STREAM_ID_PART_MAX
                                     for part in match.groups() if part is not None)


def start_id(last_event_id: str | None, after: str | None, default: str) -> str:
    """Where a stream starts: after the Last-Event-ID header (a reconnecting EventSource
    sends it), else after ``?after=``, else ``default``; 400 for a value that is not a
    stream id (or ``$``: only what comes next)."""
    for name, value in (("Last-Event-ID", last_event_id), ("after", after)):
        if value is not None and value != "":
            if value != "$" and not is_stream_id(value):
                raise ApiError(400, f"{name} {value[:60]!r} is not an event id (like "
                               "1764500000123-0, each part at most 2^64-1, or $ for only "
                               "new events)")
            return value
    return default


def aredis_of(request: Request) -> AsyncRedis:
    """The app's asyncio Redis client for short commands."""
    return request.app.state.aredis


def hub_of(request: Request) -> Hub:
    """The app's stream readers."""
    return request.app.state.hub


def keys_of(request: Request) -> Keys:
    """The app's key names."""
    return request.app.state.client.store.keys


def event_stream(route: str, events: AsyncIterator[bytes]) -> StreamingResponse:
    """A streaming response of ``events``, counted in the open-streams gauge while it
    lasts, that ends as soon as its follower has gone."""

    async def body() -> AsyncIterator[bytes]:
        gauge = metrics.SSE_STREAMS.labels(route=route)
        gauge.inc()
        try:
            yield OPENED
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
    the stream with a ``room_deleted`` event; a follower that falls 1,000 events behind,
    with ``follower_dropped`` (reconnect with Last-Event-ID to resume); ``until`` ends it
    after the first event of that type."""
    redis, keys = aredis_of(request), keys_of(request)
    after_id = start_id(last_event_id, after, "0-0")
    try:
        last_type = event_type_named(until) if until else None
    except ValueError as error:
        raise ApiError(400, f"until {error}") from None
    if not await redis.exists(keys.state(room)):
        raise ApiError(404, f"no room {room!r}")
    return event_stream("/rooms/{room}/events", follow_room(
        hub_of(request), redis, room, None if after_id == "$" else after_id, last_type))


@router.get("/events", response_class=StreamingResponse,
            responses={200: {"content": {"text/event-stream": {}}}})
async def run_events(
    request: Request,
    after: Annotated[str | None, Query(description="Start after this event id; default: "
                                       "only what comes next")] = None,
    last_event_id: Annotated[str | None, Header()] = None,
    access_token: Annotated[str | None, Query(description="The bearer token, for browsers' "
                                              "EventSource")] = None,
    org: Annotated[str | None, Query(description="Only this organization's rooms (a "
                                     "cluster-admin's choice)")] = None,
) -> StreamingResponse:
    """Every room's ``run_started`` and ``run_ended`` as server-sent events (each with its
    ``room``), from now on (or after Last-Event-ID / ``after``): the token's
    organization's rooms only (a cluster-admin's: every room's, or ``org``'s)."""
    after_id = start_id(last_event_id, after, "$")
    organization = identity_of(request).scope(org)
    return event_stream("/events", follow_runs(hub_of(request), aredis_of(request),
                                               None if after_id == "$" else after_id,
                                               organization))
