"""The coordinator's Redis clients, and which errors mean Redis or the broker could not be
reached or used (rather than that one room's command was refused)."""

from __future__ import annotations

import asyncio
from typing import Any

from kombu.exceptions import OperationalError as BrokerError
from redis.asyncio import BlockingConnectionPool, ConnectionPool, Redis
from redis.asyncio.connection import AbstractConnection
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialWithJitterBackoff
from redis.driver_info import DriverInfo
from redis.exceptions import (
    ClusterDownError,
    NoPermissionError,
    OutOfMemoryError,
    ReadOnlyError,
    ResponseError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from parley.shared.connections import cluster_client, redis_kwargs
from parley.shared.settings import Settings

# Redis or the broker is unreachable for now: back off and let the room be taken again.
TRANSIENT_ERRORS = (RedisConnectionError, RedisTimeoutError, BrokerError)
# Refusals of Redis's own, not of one room's keys: memory full (maxmemory), a replica or a
# cluster that takes no writes, a command the ACL forbids; by code, a failed save (MISCONF),
# a script running too long (BUSY), too few replicas (NOREPLICAS). Every room's command
# meets them alike, so Redis is as good as unreachable until they pass.
REDIS_REFUSALS = (OutOfMemoryError, ReadOnlyError, NoPermissionError, ClusterDownError,
                  TryAgainError)
REDIS_REFUSAL_CODES = ("MISCONF ", "BUSY ", "NOREPLICAS ")
# Redis or the broker could not be reached or used: the transient errors, any network
# trouble (OSError covers sockets and bounded waits that timed out), and Redis's own
# refusals. No fault of the room's: such a failed take is not counted against it.
UNREACHABLE_ERRORS = (*TRANSIENT_ERRORS, OSError, *REDIS_REFUSALS)
# A dropped connection (a Redis restart) is opened again and the command sent again, this
# many times, this far apart; then the error reaches the caller.
RETRIES = 3
RETRY_BACKOFF = ExponentialWithJitterBackoff(base=0.05, cap=0.5)
# Leases, scans and heartbeats: a renewal, a scan and a release or two at once.
CONTROL_CONNECTIONS = 4
# The rooms' commands other than their waits for answers. Each holds a connection for a
# round trip, which lasts as long as the busy loop takes to read the reply: with 64, a
# thousand rooms made 381 turns a second where they made 415 with one each; 256 make as
# many as one each (377 and 382 against 366 and 363, run by turns).
COMMAND_CONNECTIONS = 256
# Readers the rooms' waits for answers share (coordinator/answer_reads.py), each one
# connection blocked in one XREAD over its rooms' streams: 10,000 waiting rooms are about
# 160 streams a read, and a read cut short for a room that starts waiting costs Redis one
# pass over them.
ANSWER_READERS = 64
# Connections one pool opens at once. Thousands of rooms taken in one scan would otherwise
# open thousands at the same moment, overflow Redis's listen backlog (511 by default) and
# time out connecting, each such room then let go; paced, the pool grows as fast as Redis
# accepts, and a room waits for its connection rather than failing its take.
OPENING_AT_ONCE = 64
# What each connection tells Redis in CLIENT SETINFO. Left to redis-py, every new
# connection reads its version from the package metadata (about 1 ms of the loop's CPU:
# a second per thousand rooms taken over); read once here.
DRIVER_INFO = DriverInfo()


def unusable(error: BaseException) -> bool:
    """True when ``error`` says Redis or the broker cannot be used just now (unreachable, or
    refusing every room alike), not that one room's command was refused."""
    return isinstance(error, UNREACHABLE_ERRORS) or (
        isinstance(error, ResponseError) and str(error).startswith(REDIS_REFUSAL_CODES))


def connect(settings: Settings, max_connections: int) -> Redis:  # or a RedisCluster
    """A coordinator's Redis client with a pool of ``max_connections``.

    On a cluster each room waiting for bids holds one connection in XREAD BLOCK for up to
    its whole bid timeout, so the pool of those waits is sized to the capacity and reads
    have no socket timeout: the lease keeper bounds every wait instead, by cancelling a
    room whose lease lapses. A dropped connection (a Redis restart) is retried briefly; a
    retried fenced script that had already run is refused (NOTURN, TURNOPEN), so a retry
    never writes twice.
    """
    retry = Retry(RETRY_BACKOFF, retries=RETRIES)
    if settings.redis_cluster:
        return cluster_client(settings, asyncio=True, max_connections=max_connections,
                              socket_timeout=None, retry=retry, driver_info=DRIVER_INFO,
                              socket_connect_timeout=settings.lease_renew_every_s)
    pool = BlockingConnectionPool.from_url(
        settings.redis_url, max_connections=max_connections, timeout=None,
        socket_timeout=None, socket_connect_timeout=settings.lease_renew_every_s, retry=retry,
        driver_info=DRIVER_INFO, **redis_kwargs(settings))
    pool.connection_class = paced(pool.connection_class, OPENING_AT_ONCE)
    return Redis(connection_pool=pool)


def reader_pool(settings: Settings, readers: int) -> ConnectionPool:
    """The connections of ``readers`` answer readers: reads without a socket timeout, each
    bounded by its own BLOCK; commands as in ``connect``."""
    return ConnectionPool.from_url(
        settings.redis_url, max_connections=2 * readers, socket_timeout=None,
        socket_connect_timeout=settings.lease_renew_every_s, driver_info=DRIVER_INFO,
        **redis_kwargs(settings))


def paced(connection_class: type[AbstractConnection], at_once: int) -> type[Any]:
    """``connection_class`` (plain, TLS or Unix socket, as the URL chose) opening at most
    ``at_once`` connections at a time; the wait for a turn is not part of the connect
    timeout."""
    opening = asyncio.Semaphore(at_once)

    class PacedConnection(connection_class):  # type: ignore[valid-type,misc]
        async def connect(self) -> None:
            if self.is_connected:
                return
            async with opening:
                await super().connect()

    return PacedConnection
