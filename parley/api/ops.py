"""Operators' routes: the health check, the API's metrics, the coordinators and their
rooms, the Celery workers and queues, and the tools the live workers offer."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.concurrency import run_in_threadpool

from parley.api import metrics as api_metrics
from parley.api.errors import ApiError
from parley.client import Client
from parley.shared.records import decode
from parley.shared.settings import redact_url
from parley.shared.store import holder_of
from parley.shared.tool_catalog import catalog_json

router = APIRouter(tags=["operations"])
open_router = APIRouter(tags=["operations"])
HEALTH_TIMEOUT_S = 2.0
# Rooms held are found from the runnable set (a holder keeps its rooms there): at most
# this many are looked at.
HELD_SCAN_MAX = 10_000


@open_router.get("/healthz")
async def healthz(request: Request) -> JSONResponse:
    """200 ``{"status": "ok"}`` when Redis answers, else 503 saying so (no token needed)."""
    try:
        await asyncio.wait_for(request.app.state.aredis.ping(), HEALTH_TIMEOUT_S)
    except Exception as error:  # noqa: BLE001 - any failure to answer is "not ok"
        where = redact_url(request.app.state.client.settings.redis_url)
        reason = type(error).__name__ if isinstance(error, TimeoutError) else str(error)
        return JSONResponse({"status": "unavailable",
                             "error": f"Redis at {where} does not answer ({reason})"},
                            status_code=503)
    return JSONResponse({"status": "ok"})


@router.get("/metrics", response_class=Response,
            responses={200: {"content": {CONTENT_TYPE_LATEST: {}}}})
def metrics() -> Response:
    """This API process's metrics in Prometheus's text format."""
    return Response(generate_latest(api_metrics.REGISTRY), media_type=CONTENT_TYPE_LATEST)


@router.get("/coordinators")
def coordinators(request: Request) -> dict[str, Any]:
    """Coordinators by heartbeat (``live`` while the last is within three lease ttls, as
    `parley status` says) with the rooms each holds now."""
    client: Client = request.app.state.client
    ttl = client.settings.lease_ttl_s
    held = rooms_held(client)
    rows = []
    for coordinator_id, age in sorted(client.store.coordinators(), key=lambda item: item[1]):
        rooms = held.pop(coordinator_id, [])
        rows.append({"id": coordinator_id, "live": age < 3 * ttl,
                     "heartbeat_age_s": round(age, 3), "rooms": rooms, "rooms_held": len(rooms)})
    for coordinator_id, rooms in held.items():  # a holder with no heartbeat (yet)
        rows.append({"id": coordinator_id, "live": None, "heartbeat_age_s": None,
                     "rooms": rooms, "rooms_held": len(rooms)})
    return {"coordinators": rows, "lease_ttl_s": ttl}


def rooms_held(client: Client) -> dict[str, list[str]]:
    """Each coordinator's rooms, from the leases of the runnable rooms (one round trip)."""
    store = client.store
    rooms = [decode(room) for room in store.redis.zrange(store.keys.runnable, 0, HELD_SCAN_MAX - 1)]
    pipe = store.redis.pipeline(transaction=False)
    for room in rooms:
        pipe.get(store.keys.lease(room))
    held: dict[str, list[str]] = defaultdict(list)
    for room, lease in zip(rooms, pipe.execute(), strict=True):
        holder = holder_of(decode(lease) if lease else None)
        if holder:
            held[holder].append(room)
    return {holder: sorted(rooms) for holder, rooms in held.items()}


@router.get("/workers")
async def workers(request: Request) -> dict[str, Any]:
    """The Celery workers (asked through the broker with a short timeout): their active
    and reserved tasks and queues, and each queue's depth."""
    view = request.app.state.workers
    try:
        return await run_in_threadpool(view.read)
    except view.connection_errors as error:
        where = redact_url(request.app.state.client.settings.broker_url)
        raise ApiError(503, f"the broker at {where} does not answer ({error})") from None


@router.get("/tools")
def tools(request: Request) -> dict[str, Any]:
    """The tool catalog, as `parley tools --json` gives it: each tool the live workers
    offer, with its description, parameters' JSON schema, options and workers."""
    client: Client = request.app.state.client
    return catalog_json(client.tool_catalog())
