"""A worker's part of the tool catalog: it publishes the tools it offers to Redis, every
interval, until it stops.

The offer (shared/keys.py, ``{tools}:worker:<W>``) expires after three intervals, so a
worker killed without a word leaves the catalog that soon; a warm shutdown takes it out at
once. Readers are in shared/tool_catalog.py.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import threading
import time
from collections.abc import Callable
from typing import Any

import redis
import structlog

from parley.shared.connections import cluster_client, redis_kwargs
from parley.shared.keys import Keys
from parley.shared.settings import Settings
from parley.workers.tools.base import ToolDef

log = structlog.get_logger("parley.worker")

# An offer outlives this many missed publishes.
TTL_INTERVALS = 3
# How long a publish or the withdrawal may wait for Redis: the thread never hangs.
REDIS_TIMEOUT_S = 5.0


def catalog_client(settings: Settings) -> Any:
    """A Redis client of its own for the publisher, whose commands never wait long."""
    timeouts: dict[str, Any] = {"socket_connect_timeout": REDIS_TIMEOUT_S,
                                "socket_timeout": REDIS_TIMEOUT_S}
    if settings.redis_cluster:
        return cluster_client(settings, **timeouts)
    return redis.Redis.from_url(settings.redis_url, **timeouts, **redis_kwargs(settings))


def offer_json(worker: str, tools: list[ToolDef], acp_profiles: tuple[str, ...] = ()) -> str:
    """The worker's offer as stored: its id, each tool's definition and the ACP profiles
    it runs."""
    return json.dumps({"worker": worker, "tools": [dataclasses.asdict(tool) for tool in tools],
                       "acp_profiles": list(acp_profiles)},
                      ensure_ascii=False, separators=(",", ":"))


class CatalogPublisher:
    """Publishes ``tools()`` as ``worker``'s offer every ``interval_s`` on a daemon thread;
    ``stop`` withdraws it."""

    def __init__(self, client: Any, keys: Keys, worker: str,
                 tools: Callable[[], list[ToolDef]], interval_s: float,
                 acp_profiles: tuple[str, ...] = ()) -> None:
        self.client = client
        self.acp_profiles = acp_profiles
        self.keys = keys
        self.worker = worker
        self.tools = tools
        self.interval_s = interval_s
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self.run, name="tool-catalog", daemon=True)

    def start(self) -> CatalogPublisher:
        """Publish now, then every interval."""
        self.thread.start()
        return self

    def run(self) -> None:
        """Publish until stopped; a failure (Redis away, a tool source that cannot list
        its tools) is logged and the next interval tries again."""
        while not self.stopping.is_set():
            try:
                self.publish()
            except Exception as error:  # noqa: BLE001 - the worker goes on without its offer
                log.warning("tool_catalog_publish_failed", worker=self.worker,
                            error=f"{type(error).__name__}: {error}"[:300])
            self.stopping.wait(self.interval_s)

    def publish(self) -> None:
        """Write the offer with its expiry, list it in the index and trim the index of
        offers that expired."""
        ttl_ms = int(TTL_INTERVALS * self.interval_s * 1000)
        now = int(time.time() * 1000)
        offer = offer_json(self.worker, self.tools(), self.acp_profiles)
        # Not a transaction: the offer goes first and its own expiry is what readers trust.
        pipe = self.client.pipeline(transaction=False)
        pipe.set(self.keys.tool_worker(self.worker), offer, px=ttl_ms)
        pipe.zadd(self.keys.tool_workers, {self.worker: now + ttl_ms})
        pipe.zremrangebyscore(self.keys.tool_workers, "-inf", now)
        pipe.execute()

    def stop(self) -> None:
        """Stop publishing and withdraw the offer (as far as Redis answers: otherwise it
        expires)."""
        self.stopping.set()
        if self.thread.is_alive():
            self.thread.join(REDIS_TIMEOUT_S)
        with contextlib.suppress(redis.RedisError, OSError):
            pipe = self.client.pipeline(transaction=False)
            pipe.zrem(self.keys.tool_workers, self.worker)
            pipe.delete(self.keys.tool_worker(self.worker))
            pipe.execute()
