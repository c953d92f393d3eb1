"""The API's ASGI middleware inside the guards of guards.py, outermost first: bearer-token
auth and access (access.py's roles and organizations), request metrics, and the request
size limit. Each answers a refusal itself, before the app reads anything."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import parse_qsl

from starlette.routing import BaseRoute, Match, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from parley.api import metrics
from parley.api.access import IDENTITY, OPERATOR_AT_LOOPBACK, Identities, Identity, Role, least_role
from parley.api.errors import error_response
from parley.api.guards import header
from parley.shared.keys import check_room_id
from parley.shared.models import DEFAULT_ORGANIZATION
from parley.shared.records import decode

# Paths anyone may read: the health check, and the dashboard's page and files (they hold
# no data: the page asks for a token and sends it). Everything else, the OpenAPI schema
# included, needs a token when tokens are set.
OPEN_PATHS = frozenset({"/healthz", "/", "/favicon.ico"})
OPEN_PREFIX = "/static/"
UNMATCHED = "unmatched"
BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
# The metrics' method label: these, or "other" (a client may send any token as a method).
KNOWN_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


def matches(routes: Sequence[BaseRoute], scope: Scope) -> bool:
    """True when the request is one for ``routes`` (path and method)."""
    return any(route.matches(scope)[0] is Match.FULL for route in routes)


class TokenAuth:
    """Who the request is, and whether it may: refuses (401 JSON) a request without a known
    token as ``Authorization: Bearer`` or, on the requests of ``query_token_routes`` only
    (the event streams: a browser's EventSource cannot set headers), as
    ``?access_token=``; refuses (403) a route the token's role does not reach
    (access.ROUTE_ROLES); answers a room of another organization as absent (404, the body
    of a missing room's). No tokens at all: everyone is the loopback operator (the server
    then binds loopback only). The identity goes to the routes in ``scope["state"]``."""

    def __init__(self, app: ASGIApp, identities: Identities,
                 routes: Callable[[], list[Any]],
                 query_token_routes: Sequence[BaseRoute] = ()) -> None:
        self.app = app
        self.identities = identities
        self.routes = routes
        self.query_token_routes = query_token_routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or path in OPEN_PATHS or path.startswith(OPEN_PREFIX):
            await self.app(scope, receive, send)
            return
        self.identities.refresh(time.monotonic())
        identity, reason = self.identify(scope)
        if identity is None:
            metrics.REFUSED.labels(reason="token").inc()
            response = error_response(401, reason, {"WWW-Authenticate": "Bearer"})
            await response(scope, receive, send)
            return
        scope.setdefault("state", {})[IDENTITY] = identity
        refusal = await self.refusal(scope, identity)
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def identify(self, scope: Scope) -> tuple[Identity | None, str]:
        """The request's identity, or None and why it has none."""
        if not self.identities.required:
            return OPERATOR_AT_LOOPBACK, ""
        query_allowed = matches(self.query_token_routes, scope)
        given = self.presented(scope, query_allowed)
        if given is None:
            return None, ("missing bearer token: send Authorization: Bearer <token>"
                          + (" (or ?access_token=)" if query_allowed else ""))
        identity = self.identities.identify(given)
        return identity, "" if identity else "invalid bearer token"

    async def refusal(self, scope: Scope, identity: Identity) -> ASGIApp | None:
        """The answer refusing the request to ``identity``, or None to let it through."""
        found = matched_route(self.routes(), scope)
        if found is None:
            return None  # no such route: the app answers 404 or 405
        template, params = found
        needed = least_role(scope["method"], template)
        if not identity.role.allows(needed):
            metrics.REFUSED.labels(reason="role").inc()
            return error_response(403, f"a {identity.role} token may not "
                                  f"{scope['method']} {template}: it needs {needed} or above")
        room = params.get("room")
        if room is None or identity.role is Role.CLUSTER_ADMIN:
            return None
        organization = await room_organization(scope, room)
        if organization is not None and organization != identity.organization:
            return error_response(404, f"no room {room!r}")  # as a missing room's
        return None

    def presented(self, scope: Scope, query_allowed: bool) -> str | None:
        """The token the request carries, or None."""
        authorization = header(scope, b"authorization")
        if authorization is not None:
            scheme, _, token = authorization.partition(" ")
            return token.strip() if scheme.lower() == "bearer" else None
        if query_allowed:
            query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
            return query.get("access_token")
        return None


def matched_route(routes: list[Any], scope: Scope) -> tuple[str, dict[str, Any]] | None:
    """The template and path parameters of the route the request is for, or None."""
    for route in routes:
        if isinstance(route, Route):
            match, child = route.matches(scope)
            if match is Match.FULL:
                return route.path, child.get("path_params", {})
    return None


async def room_organization(scope: Scope, room: str) -> str | None:
    """The room's organization, None when there is no such room (or its id is not one)."""
    try:
        check_room_id(room)
    except ValueError:
        return None
    app = scope["app"]
    status, organization = await app.state.aredis.hmget(
        app.state.client.store.keys.state(room), "status", "organization")
    if status is None:
        return None
    return decode(organization or b"") or DEFAULT_ORGANIZATION


class BodyLimit:
    """Refuses (413 JSON) a request body over ``max_bytes`` before the app parses it:
    by its Content-Length when it declares one, else (a chunked body) while it is read.
    A body within the limit is read whole and handed on as it came."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in BODY_METHODS:
            await self.app(scope, receive, send)
            return
        length = header(scope, b"content-length")
        if length is not None and not length.strip().isdigit():
            await error_response(400, "Content-Length is not a number")(scope, receive, send)
            return
        if length is not None and int(length) > self.max_bytes:
            await self.refuse(scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await self.refuse(scope, receive, send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        await self.app(scope, replay(b"".join(chunks), receive), send)

    async def refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer 413 naming the limit."""
        response = error_response(413, f"request body too large: the limit is "
                                  f"{self.max_bytes:,} bytes (PARLEY_API_MAX_BODY_BYTES)",
                                  {"Connection": "close"})
        await response(scope, receive, send)


def replay(body: bytes, receive: Receive) -> Receive:
    """A receive that gives ``body`` once, then whatever the client sends next (its
    disconnect)."""
    given = False

    async def receive_again() -> Message:
        nonlocal given
        if given:
            return await receive()
        given = True
        return {"type": "http.request", "body": body, "more_body": False}

    return receive_again


class RequestMetrics:
    """Counts every request by route template, method and status, and times it (an
    event stream is counted but not timed: it lasts as long as its follower). Every label
    comes from a fixed set (the routes' templates, KNOWN_METHODS, the statuses the app
    answers), so no request can add series of its own."""

    def __init__(self, app: ASGIApp, routes: Callable[[], list[Any]],
                 untimed_routes: Sequence[BaseRoute] = ()) -> None:
        self.app = app
        self.routes = routes
        self.untimed_routes = untimed_routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        route = self.template(scope)
        started = time.perf_counter()
        status = 500

        async def send_and_note(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_and_note)
        finally:
            method = scope["method"] if scope["method"] in KNOWN_METHODS else "other"
            metrics.REQUESTS.labels(route=route, method=method, status=str(status)).inc()
            if not matches(self.untimed_routes, scope):
                metrics.REQUEST_SECONDS.labels(route=route, method=method).observe(
                    time.perf_counter() - started)

    def template(self, scope: Scope) -> str:
        """The path template of the route the request matches (``/rooms/{room}``), so the
        metric's labels stay few whatever paths are asked for."""
        for route in self.routes():
            if isinstance(route, Route) and route.matches(scope)[0] is Match.FULL:
                return route.path
        if scope["path"].startswith(OPEN_PREFIX):
            return OPEN_PREFIX + "*"
        return UNMATCHED
