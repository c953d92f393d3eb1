"""The API's connections at the socket, bounded where uvicorn leaves them open: its h11
protocol times out only the wait between requests, and only after a first answer.

| limit (PARLEY_API_...) | on what | past it |
|---|---|---|
| KEEP_ALIVE_S | idle, no request begun (before the first as between them) | closed |
| HEADER_TIMEOUT_S | a request's head, from the connection's start or last answer | 408, closed |
| BODY_TIMEOUT_S | a request's body, from its head | 408, closed |
| MAX_CONNECTIONS | connections at once | the new one: 503, closed |

While the app answers a request (an event stream for hours) no deadline runs. The cap is
kept within the process's open-file limit (the soft limit raised to the hard one when
that helps): out of files, ``accept()`` fails, and CPython 3.11's event loop then logs
that failure for every waiting connection on every turn while serving nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import http
import json
import resource
from dataclasses import dataclass
from typing import ClassVar

import h11
import structlog
from uvicorn.protocols.http.h11_impl import H11Protocol

from parley.api import metrics

log = structlog.get_logger("parley.api")
# The listen backlog, and so the most connections the event loop accepts in one turn:
# a few turns' worth are open before the cap can count (and refuse) them.
BACKLOG = 128
# Files each connection may cost: its socket, and a Redis connection when it alone
# follows a room; besides, a reserve for the Redis pools, the broker, the logs, the
# connections accepted and not counted yet, and refused ones lingering.
FILES_PER_CONNECTION = 2
REFUSED_LINGERING_MAX = 64
FILES_RESERVED = 256 + 3 * BACKLOG + REFUSED_LINGERING_MAX
# A refused connection stays open after its 503 until the client's request has come (and
# been dropped) or this long, so that the client reads the answer instead of a reset.
REFUSED_LINGER_S = 1.0


@dataclass(frozen=True)
class ConnectionLimits:
    """The limits of this module's table, from the PARLEY_API_* settings."""

    keep_alive_s: float
    header_timeout_s: float
    body_timeout_s: float
    max_connections: int


def canned(status: int, message: str) -> bytes:
    """A whole HTTP answer in the API's error shape that closes its connection, for when
    no request (or no app) is there to answer."""
    body = json.dumps({"error": message}, separators=(",", ":")).encode()
    head = (f"HTTP/1.1 {status} {http.HTTPStatus(status).phrase}\r\n"
            f"content-type: application/json\r\ncontent-length: {len(body)}\r\n"
            "connection: close\r\n\r\n")
    return head.encode() + body


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with the limits of this module's table (``limits``, set on
    the subclass guarded_protocol() makes)."""

    limits: ClassVar[ConnectionLimits]

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        """Refuse the connection past the cap; else start its idle and head deadlines."""
        super().connection_made(transport)
        self.deadline: asyncio.TimerHandle | None = None
        self.phase: str | None = None
        self.refused = False
        if len(self.connections) > self.limits.max_connections:
            self.refuse()
            return
        self.timeout_keep_alive_task = self.loop.call_later(
            self.timeout_keep_alive, self.timeout_keep_alive_handler)
        self.watch()

    def data_received(self, data: bytes) -> None:
        """Read as uvicorn does, then move the deadline on; once refused, the request is
        read only to be dropped, and the connection closed."""
        if self.refused:
            self.transport.close()
            return
        super().data_received(data)
        self.watch()

    def on_response_complete(self) -> None:
        """After an answer, the next request's head has its deadline."""
        super().on_response_complete()
        self.watch()

    def connection_lost(self, exc: Exception | None) -> None:
        """Drop the deadline with the connection."""
        self.set_deadline(None)
        super().connection_lost(exc)

    def watch(self) -> None:
        """Keep the one deadline that applies now: the head's while one is awaited, the
        body's while one is read, none while the app answers."""
        state = self.conn.their_state
        phase = "head" if state is h11.IDLE else "body" if state is h11.SEND_BODY else None
        if phase != self.phase:
            self.phase = phase
            self.set_deadline(phase)

    def set_deadline(self, phase: str | None) -> None:
        """Cancel the running deadline, and start ``phase``'s (None: none)."""
        if self.deadline is not None:
            self.deadline.cancel()
            self.deadline = None
        if phase == "head":
            self.deadline = self.loop.call_later(self.limits.header_timeout_s, self.time_out,
                                                 phase)
        elif phase == "body":
            self.deadline = self.loop.call_later(self.limits.body_timeout_s, self.time_out,
                                                 phase)

    def time_out(self, phase: str) -> None:
        """408 (unless an answer has begun) and close: the head or body came too slowly."""
        self.deadline = None
        if self.transport.is_closing():
            return
        metrics.REFUSED.labels(reason=f"{'header' if phase == 'head' else 'body'}_timeout").inc()
        if phase == "head":
            message = (f"the request's head did not arrive within "
                       f"{self.limits.header_timeout_s:g}s (PARLEY_API_HEADER_TIMEOUT_S)")
        else:
            message = (f"the request's body did not arrive within "
                       f"{self.limits.body_timeout_s:g}s of its head (PARLEY_API_BODY_TIMEOUT_S)")
        if phase == "head" or not self.cycle.response_started:
            self.transport.write(canned(408, message))
        self.transport.close()

    def refuse(self) -> None:
        """503 to a connection past the cap, then close it after REFUSED_LINGER_S (or as
        soon as the client does; at once when too many linger)."""
        self.refused = True
        limit = self.limits.max_connections
        metrics.REFUSED.labels(reason="too_many_connections").inc()
        log.warning("refusing connections: too many open", limit=limit,
                    setting="PARLEY_API_MAX_CONNECTIONS")
        self.transport.write(canned(503, f"too many connections: this API serves {limit:,} at "
                                         "once (PARLEY_API_MAX_CONNECTIONS); try again shortly"))
        if len(self.connections) > limit + REFUSED_LINGERING_MAX:
            self.transport.close()
            return
        with contextlib.suppress(OSError, RuntimeError):
            self.transport.write_eof()
        self.loop.call_later(REFUSED_LINGER_S, self.transport.close)


def guarded_protocol(limits: ConnectionLimits) -> type[GuardedH11Protocol]:
    """The protocol class for uvicorn's ``http=``, with ``limits``."""
    return type("GuardedH11Protocol", (GuardedH11Protocol,), {"limits": limits})


def fit_open_files(max_connections: int) -> int:
    """How many connections this process can serve within its open-file limit, at most
    ``max_connections``; the soft limit is raised towards the hard one when it is short."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = FILES_PER_CONNECTION * max_connections + FILES_RESERVED
    if soft != resource.RLIM_INFINITY and soft < wanted:
        raised = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
            soft = raised
    if soft == resource.RLIM_INFINITY:
        return max_connections
    return max(1, min(max_connections, (soft - FILES_RESERVED) // FILES_PER_CONNECTION))
