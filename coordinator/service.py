"""The coordinator process: a scheduler that leases runnable rooms up to a capacity and
runs each one's turn loop as an asyncio task, plus lease renewal and a heartbeat."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import uuid

import structlog
from redis.asyncio import BlockingConnectionPool, Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from coordinator.lease import Lease, LeaseLost, Leases
from coordinator.room_io import RoomIO
from coordinator.transport import Transport
from coordinator.turn_loop import RoomRunner, TurnOptions
from shared.keys import Keys
from shared.scripts import Scripts
from shared.settings import Settings
from shared.store import decode, now_ms

log = structlog.get_logger("parley.coordinator")


def new_coordinator_id() -> str:
    """A coordinator id operators can trace to a host and process."""
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


class Coordinator:
    """Serves rooms: one asyncio task per leased room, up to ``coordinator_capacity``."""

    def __init__(self, settings: Settings, transport: Transport, coordinator_id: str = "",
                 client: Redis | None = None):
        self.settings = settings
        self.transport = transport
        self.id = coordinator_id or new_coordinator_id()
        self.keys = Keys(settings.key_prefix)
        self.redis = client or connect(settings)
        scripts = Scripts(self.redis)
        self.io = RoomIO(self.redis, self.keys, scripts)
        self.leases = Leases(self.redis, self.keys, scripts, self.id, settings.lease_ttl_s)
        self.options = TurnOptions(settings.key_prefix, settings.agents_per_task,
                                   settings.turns_stream_maxlen)
        self.rooms: dict[str, tuple[Lease, asyncio.Task[None]]] = {}
        self.stopping = asyncio.Event()

    async def run(self) -> None:
        """Serve until stop() is called; then release every lease and return."""
        log.info("coordinator_started", coordinator=self.id, capacity=self.settings.coordinator_capacity)
        renewer = asyncio.create_task(self.keep_leases())
        try:
            while not self.stopping.is_set():
                try:
                    await self.scan()
                except (RedisConnectionError, RedisTimeoutError) as error:
                    log.warning("scan_failed", error=str(error))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.stopping.wait(), self.settings.scan_interval_s)
        finally:
            renewer.cancel()
            await self.shutdown()

    def stop(self) -> None:
        """Ask run() to return (safe from a signal handler)."""
        self.stopping.set()

    async def scan(self) -> None:
        """Lease due runnable rooms while there is capacity, and heartbeat."""
        await self.redis.zadd(self.keys.coordinators, {self.id: now_ms()})
        free = self.settings.coordinator_capacity - len(self.rooms)
        if free <= 0:
            return
        # Take a bounded share per scan so that coordinators starting together split the rooms.
        limit = min(free, max(1, self.settings.coordinator_capacity // 10))
        due = await self.redis.zrangebyscore(self.keys.runnable, "-inf", now_ms(), 0, limit * 2)
        taken = 0
        for room in map(decode, due):
            if taken >= limit or self.stopping.is_set():
                break
            if room in self.rooms:
                continue
            lease = await self.leases.acquire(room)
            if lease is not None:
                self.start_room(lease)
                taken += 1

    def start_room(self, lease: Lease) -> None:
        """Run the room's turn loop in its own task (and its own log context)."""
        task = asyncio.create_task(self.serve(lease), name=f"room:{lease.room}")
        self.rooms[lease.room] = (lease, task)

    async def serve(self, lease: Lease) -> None:
        """One room's loop with an explicit policy per failure; always releases."""
        structlog.contextvars.bind_contextvars(room=lease.room, epoch=lease.epoch)
        log.info("room_acquired", coordinator=self.id)
        runner = RoomRunner(lease, self.io, self.transport, self.options)
        try:
            await runner.run()
        except LeaseLost as error:
            log.warning("lease_lost", reason=str(error))
        except (RedisConnectionError, RedisTimeoutError) as error:
            # Back off; the room stays runnable, and whoever holds it next resumes the turn.
            log.warning("room_redis_error", error=str(error))
            await asyncio.sleep(self.settings.scan_interval_s)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("room_failed")
        finally:
            if self.rooms.get(lease.room, (None,))[0] is lease:
                del self.rooms[lease.room]
            with contextlib.suppress(Exception):
                # On shutdown, make the room due now so that another coordinator takes it
                # at once rather than after its due time.
                if await self.leases.release(lease) and self.stopping.is_set():
                    await self.io.set_runnable(lease.room, True)

    async def keep_leases(self) -> None:
        """Renew every held lease each ttl/3; drop at once any room whose lease is gone,
        and any room we could not renew for so long that the lease may have expired."""
        period = self.settings.lease_renew_every_s
        last_renewed = asyncio.get_running_loop().time()
        while True:
            await asyncio.sleep(period)
            held = [lease for lease, _ in self.rooms.values()]
            try:
                renewed = await self.leases.renew(held) if held else []
            except (RedisConnectionError, RedisTimeoutError) as error:
                log.warning("renew_failed", error=str(error))
                if asyncio.get_running_loop().time() - last_renewed > 2 * period:
                    self.drop_rooms(held, "renewal failing")
                continue
            last_renewed = asyncio.get_running_loop().time()
            lost = [lease for lease, ok in zip(held, renewed, strict=True) if not ok]
            self.drop_rooms(lost, "lease lost")

    def drop_rooms(self, leases: list[Lease], reason: str) -> None:
        """Stop work on these rooms now (unless a room was re-leased meanwhile)."""
        for lease in leases:
            held, task = self.rooms.get(lease.room, (None, None))
            if held is lease and task is not None:
                del self.rooms[lease.room]
                log.warning("room_dropped", room=lease.room, reason=reason)
                task.cancel()

    async def shutdown(self) -> None:
        """Abandon the current steps, release every lease and make the rooms due now, so
        another coordinator takes them at once instead of after the ttl."""
        entries = list(self.rooms.values())
        for _, task in entries:
            task.cancel()
        await asyncio.gather(*(task for _, task in entries), return_exceptions=True)
        with contextlib.suppress(Exception):
            await self.redis.zrem(self.keys.coordinators, self.id)
        await self.redis.aclose()
        log.info("coordinator_stopped", coordinator=self.id, released=len(entries))


def connect(settings: Settings) -> Redis:
    """The coordinator's Redis client: each room waiting for bids holds one connection in
    XREAD BLOCK, so the pool is sized to the capacity."""
    pool = BlockingConnectionPool.from_url(
        settings.redis_url, max_connections=settings.coordinator_capacity + 8, timeout=None)
    return Redis(connection_pool=pool)


async def serve_forever(settings: Settings, transport: Transport, coordinator_id: str = "") -> None:
    """Run a coordinator until SIGTERM or SIGINT, then shut down cleanly."""
    coordinator = Coordinator(settings, transport, coordinator_id)
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, coordinator.stop)
    await coordinator.run()
