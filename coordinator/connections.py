"""The coordinator's Redis clients, and which errors mean Redis or the broker could not be
reached (rather than that a command was refused)."""

from __future__ import annotations

from kombu.exceptions import OperationalError as BrokerError
from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialWithJitterBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from parley.shared.connections import cluster_client, redis_kwargs
from parley.shared.settings import Settings

# Redis or the broker is unreachable for now: back off and let the room be taken again.
TRANSIENT_ERRORS = (RedisConnectionError, RedisTimeoutError, BrokerError)
# Redis or the broker could not be reached: the transient errors, and any network trouble
# (OSError covers sockets and bounded waits that timed out). No fault of the room's: such a
# failed take is not counted against it.
UNREACHABLE_ERRORS = (*TRANSIENT_ERRORS, OSError)
# Leases, scans and heartbeats: a renewal, a scan and a release or two at once.
CONTROL_CONNECTIONS = 4


def connect(settings: Settings, max_connections: int) -> Redis:  # or a RedisCluster
    """A coordinator's Redis client with a pool of ``max_connections``.

    Each room waiting for bids holds one connection in XREAD BLOCK for up to its whole bid
    timeout, so the rooms' pool is sized to the capacity and reads have no socket timeout:
    the lease keeper bounds every wait instead, by cancelling a room whose lease lapses. A
    dropped connection (a Redis restart) is retried briefly; a retried fenced script that
    had already run is refused (NOTURN, TURNOPEN), so a retry never writes twice.
    """
    retry = Retry(ExponentialWithJitterBackoff(base=0.05, cap=0.5), retries=3)
    if settings.redis_cluster:
        return cluster_client(settings, asyncio=True, max_connections=max_connections,
                              socket_timeout=None, retry=retry,
                              socket_connect_timeout=settings.lease_renew_every_s)
    pool = BlockingConnectionPool.from_url(
        settings.redis_url, max_connections=max_connections, timeout=None,
        socket_timeout=None, socket_connect_timeout=settings.lease_renew_every_s, retry=retry,
        **redis_kwargs(settings))
    return Redis(connection_pool=pool)
