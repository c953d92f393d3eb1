"""The API's FastAPI app: the routes of parley/api/rooms.py, streams.py, ops.py and
dashboard.py behind the guards of guards.py and the token auth, request metrics and size
limit of middleware.py, the dashboard's static files, and errors answered as JSON
(errors.py)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import redis.asyncio
from fastapi import FastAPI, Security
from fastapi.responses import FileResponse
from fastapi.security import HTTPBearer
from fastapi.staticfiles import StaticFiles

from parley.api import approvals, dashboard, fanout, ops, rooms, streams, tasks, what_if
from parley.api.access import Identities
from parley.api.celery_view import WorkersView
from parley.api.errors import install_handlers
from parley.api.guards import RequestGuard, SecurityHeaders
from parley.api.middleware import BodyLimit, RequestMetrics, TokenAuth
from parley.client.client import REDIS_CONNECT_TIMEOUT_S, Client
from parley.shared.connections import redis_kwargs
from parley.shared.settings import Settings
from parley.version import package_version

STATIC_DIR = Path(__file__).parent / "static"
# The event readers block in XREAD for up to BLOCK_MS: their reads must outlast it.
STREAM_READ_TIMEOUT_S = fanout.BLOCK_MS / 1000 + 10
# Connections for the routes' short commands; a command waits for a free one rather than
# failing (a thousand followers joining at once each read what they missed).
REDIS_POOL_MAX = 100
# How the API's connections read in Redis's CLIENT LIST, with the process's id.
CLIENT_NAME = "parley-api-{pid}"
READER_CLIENT_NAME = "parley-api-reader-{pid}"
DESCRIPTION = """Rooms, messages, turns and live events of a parley deployment.

Every path but `/healthz` (and the dashboard at `/`, `/static/`, and this description)
needs `Authorization: Bearer <token>` when `PARLEY_API_TOKENS` or `PARLEY_API_TOKENS_FILE`
is set; the event streams also take `?access_token=`. A token sees its organization's rooms
only (another's read as absent, 404) and may do what its role allows (403 otherwise).
Every 4xx answer is JSON `{"error": "..."}`."""
# Documents the bearer scheme in the schema; TokenAuth enforces it.
BEARER = Security(HTTPBearer(auto_error=False, description="A token of PARLEY_API_TOKENS"))


def make_app(settings: Settings, client: Client | None = None,
             async_redis: redis.asyncio.Redis | None = None) -> FastAPI:
    """The API over the Redis of ``settings`` (or the clients given, for tests: the
    asyncio one then serves the event readers too)."""
    client = client or Client(settings)
    identities = Identities(settings, client.redis, client.store.keys)
    aredis, readers = (async_redis, async_redis) if async_redis else redis_clients(settings)
    hub = fanout.Hub(readers, client.store.keys)

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        yield
        await hub.close()
        await aredis.aclose()
        if readers is not aredis:
            await readers.aclose()
        client.redis.close()

    app = FastAPI(title="parley", version=package_version(), description=DESCRIPTION,
                  lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.client = client
    app.state.identities = identities
    app.state.aredis = aredis
    app.state.hub = hub
    app.state.workers = WorkersView(settings)
    routers = (rooms.router, tasks.router, approvals.router, what_if.router, streams.router, ops.router,
               dashboard.router, ops.open_router)
    for router in routers[:-1]:
        app.include_router(router, dependencies=[BEARER])
    app.include_router(ops.open_router)
    install_handlers(app)
    serve_dashboard(app)
    # Added innermost first. Outermost, the guards refuse what no route may see; auth
    # refuses before the body is read; metrics count what passed auth, so requests without
    # a token add no series; the limit refuses before the body is parsed.
    app.add_middleware(BodyLimit, max_bytes=settings.api_max_body_bytes)
    # The routers' own routes: FastAPI may wrap included ones in its app's route list.
    def every_route() -> list[Any]:
        return [*app.routes, *(route for router in routers for route in router.routes)]

    app.add_middleware(RequestMetrics, routes=every_route, untimed_routes=streams.router.routes)
    app.add_middleware(TokenAuth, identities=identities, routes=every_route,
                       query_token_routes=streams.router.routes)
    app.add_middleware(RequestGuard, tokens_required=identities.required,
                       allowed_hosts=settings.api_allowed_hosts)
    app.add_middleware(SecurityHeaders)
    return app


def redis_clients(settings: Settings) -> tuple[redis.asyncio.Redis, redis.asyncio.Redis]:
    """The asyncio clients: one for the routes' short commands, one for the event readers
    (one connection per followed stream, each held while its reader blocks: a stream is
    followed by at least one of the API's connections, so as many as those never run
    short)."""
    pid = os.getpid()
    options = {"socket_connect_timeout": REDIS_CONNECT_TIMEOUT_S,
               "socket_timeout": STREAM_READ_TIMEOUT_S, **redis_kwargs(settings)}
    commands = redis.asyncio.Redis.from_pool(redis.asyncio.BlockingConnectionPool.from_url(
        settings.redis_url, max_connections=REDIS_POOL_MAX, timeout=REDIS_CONNECT_TIMEOUT_S,
        client_name=CLIENT_NAME.format(pid=pid), **options))
    readers = redis.asyncio.Redis.from_url(
        settings.redis_url, max_connections=settings.api_max_connections + 1,
        client_name=READER_CLIENT_NAME.format(pid=pid), **options)
    return commands, readers


def serve_dashboard(app: FastAPI) -> None:
    """The dashboard's page at / and its files under /static/ (no token needed: the page
    asks for one and sends it on its own requests)."""

    @app.get("/", include_in_schema=False)
    def index() -> FileResponse:
        return FileResponse(STATIC_DIR / "index.html")

    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
