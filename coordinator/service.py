"""The coordinator process: a scheduler that leases runnable rooms up to a capacity and
runs each one's turn loop as an asyncio task, a lease keeper that renews the leases and
stops work on any room whose lease it cannot vouch for, and a heartbeat for operators."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import threading
import uuid
from collections.abc import Callable
from typing import Any, cast

import structlog
from kombu.exceptions import OperationalError as BrokerError
from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialWithJitterBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from coordinator.lease import Lease, LeaseLost, Leases
from coordinator.outages import OutageClock
from coordinator.room_io import InboxLimits, RoomIO
from coordinator.transport import Transport
from coordinator.turn_loop import RoomRunner, TurnOptions
from shared.connections import redis_kwargs
from shared.keys import Keys
from shared.models import BidRequest, StopReason
from shared.records import decode
from shared.scripts import Scripts
from shared.settings import Settings, redact_url
from shared.store import now_ms

log = structlog.get_logger("parley.coordinator")

# Redis or the broker is unreachable for now: back off and let the room be taken again.
TRANSIENT_ERRORS = (RedisConnectionError, RedisTimeoutError, BrokerError)
# Redis or the broker could not be reached: the transient errors, and any network trouble
# (OSError covers sockets and bounded waits that timed out). No fault of the room's: such a
# failed take is not counted against it.
UNREACHABLE_ERRORS = (*TRANSIENT_ERRORS, OSError)
# Leases, scans and heartbeats: a renewal, a scan and a release or two at once.
CONTROL_CONNECTIONS = 4
# A vanished coordinator stays visible to operators this long, then its heartbeat goes.
FORGET_VANISHED_MS = 24 * 3600 * 1000


def new_coordinator_id() -> str:
    """A coordinator id operators can trace to a host and process."""
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


class HeldTransport:
    """A room's view of the transport: sends only while the room's lease is surely held.

    A coordinator that stalled past its renewals must not pay for bids that the room's
    next holder asks for again; and a send that stalled past the lease ends the room's work
    there rather than at its next fenced write.
    """

    def __init__(self, transport: Transport, lease: Lease) -> None:
        self.transport = transport
        self.lease = lease

    def send(self, requests: list[tuple[str, BidRequest]]) -> None:
        """Send the requests if the lease holds; raise LeaseLost otherwise."""
        self.lease.ensure_held()
        self.transport.send(requests)
        self.lease.ensure_held()


class Coordinator:
    """Serves rooms: one asyncio task per leased room, up to ``coordinator_capacity``."""

    def __init__(self, settings: Settings, transport: Transport, coordinator_id: str = "",
                 client: Redis | None = None):
        self.settings = settings
        self.transport = transport
        self.id = coordinator_id or new_coordinator_id()
        self.keys = Keys(settings.key_prefix)
        self.redis = client or connect(settings, settings.coordinator_capacity + 8)
        # Leases, scans and heartbeats get connections of their own: with every room of a
        # busy coordinator holding one in XREAD BLOCK, a renewal queued behind them for a
        # free connection would let the leases lapse.
        self.control = client or connect(settings, CONTROL_CONNECTIONS)
        scripts = Scripts(self.redis)
        self.io = RoomIO(self.redis, self.keys, scripts,
                         limits=InboxLimits.from_settings(settings))
        self.renew_every_s = settings.lease_renew_every_s
        # Checked once per renewal period: stopping with 1.5 periods left leaves at least
        # half a period between the room's last work and the lease's expiry.
        self.leases = Leases(self.control, self.keys, Scripts(self.control), self.id,
                             settings.lease_ttl_s,
                             margin_s=1.5 * self.renew_every_s)
        self.options = TurnOptions(settings.key_prefix, settings.agents_per_task,
                                   settings.turns_stream_maxlen)
        self.rooms: dict[str, tuple[Lease, asyncio.Task[None]]] = {}
        self.outages = OutageClock()
        self.stopping = asyncio.Event()
        # Set by run(): the loop the rooms run on, and the lease keeper's thread's stop flag.
        self.loop: asyncio.AbstractEventLoop | None = None
        self.keeper_stop = threading.Event()

    async def run(self) -> None:
        """Serve until stop() is called; then release every lease and return."""
        log.info("coordinator_started", coordinator=self.id,
                 capacity=self.settings.coordinator_capacity, lease_ttl_s=self.settings.lease_ttl_s,
                 redis=redact_url(self.settings.redis_url),
                 broker=redact_url(self.settings.broker_url))
        self.loop = asyncio.get_running_loop()
        threading.Thread(target=self.keep_leases_apart, name="lease-keeper", daemon=True).start()
        try:
            while not self.stopping.is_set():
                await self.scan_once()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.stopping.wait(), self.settings.scan_interval_s)
        finally:
            self.keeper_stop.set()
            await self.shutdown()

    def stop(self) -> None:
        """Ask run() to return (safe from a signal handler)."""
        self.stopping.set()

    async def scan_once(self) -> None:
        """One bounded scan: a Redis that hangs must not keep the scheduler (or a
        shutdown) waiting."""
        try:
            await asyncio.wait_for(self.scan(), self.settings.lease_ttl_s)
        except (RedisError, TimeoutError) as error:
            self.note_unreachable(error)
            log.warning("scan_failed", error=str(error) or type(error).__name__)
        except Exception:
            log.exception("scan_failed")

    async def scan(self) -> None:
        """Heartbeat, then lease due runnable rooms while there is capacity."""
        await self.heartbeat()
        free = self.settings.coordinator_capacity - len(self.rooms)
        if free <= 0:
            return
        # Take a bounded share per scan so that coordinators starting together split the rooms.
        limit = min(free, max(1, self.settings.coordinator_capacity // 10))
        due = await self.control.zrangebyscore(self.keys.runnable, "-inf", now_ms(), 0, limit * 2)
        taken = 0
        # Without withscores the reply is a plain list of members.
        for room in (decode(member) for member in cast(list[bytes], due)):
            if taken >= limit or self.stopping.is_set():
                break
            if room in self.rooms:
                continue
            lease = await self.take(room)
            if lease is not None:
                self.start_room(lease)
                taken += 1

    async def heartbeat(self) -> None:
        """Tell operators this coordinator is alive; forget long-vanished ones."""
        now = now_ms()
        pipe = self.control.pipeline(transaction=False)
        pipe.zadd(self.keys.coordinators, {self.id: now})
        pipe.zremrangebyscore(self.keys.coordinators, "-inf", now - FORGET_VANISHED_MS)
        await pipe.execute()

    async def take(self, room: str) -> Lease | None:
        """Acquire one room's lease; a deleted room is taken off the runnable set."""
        try:
            return await self.leases.acquire(room)
        except ResponseError as error:
            if not str(error).startswith("NOROOM"):
                raise
            log.warning("runnable_room_missing", room=room)
            await self.io.set_runnable(room, False)
            return None

    def start_room(self, lease: Lease) -> None:
        """Run the room's turn loop in its own task (and its own log context)."""
        task = asyncio.create_task(self.serve(lease), name=f"room:{lease.room}")
        self.rooms[lease.room] = (lease, task)

    async def serve(self, lease: Lease) -> None:
        """One room's loop with an explicit policy per failure; always lets the room go."""
        structlog.contextvars.bind_contextvars(room=lease.room, epoch=lease.epoch)
        log.info("room_acquired", coordinator=self.id)
        runner = RoomRunner(lease, self.io, HeldTransport(self.transport, lease), self.options,
                            self.outages)
        reschedule = True
        try:
            await runner.run()
            reschedule = False  # the room went idle and left the runnable set
        except LeaseLost as error:
            log.warning("lease_lost", reason=str(error))
        except UNREACHABLE_ERRORS as error:
            # Back off; whoever holds the room next resumes the turn.
            self.note_unreachable(error)
            log.warning("room_redis_error", error=str(error) or type(error).__name__)
            await asyncio.sleep(self.settings.scan_interval_s)
        except asyncio.CancelledError:
            raise
        except Exception as error:
            # Retried after the lease's ttl (its due time), not in a tight loop, and only
            # so many times in a row.
            reschedule = False
            await self.count_failed_take(lease, error)
        finally:
            await self.let_go(lease, reschedule)

    async def count_failed_take(self, lease: Lease, error: Exception) -> None:
        """Count a take that ended in ``error`` in the room's state; at ``room_max_errors``
        in a row the room ends failed (room_error) and leaves the runnable set until
        someone posts again, instead of being taken again forever."""
        detail = error_line(error)
        most = self.settings.room_max_errors
        # Renewals stop moving the due time, so that a post racing with this step keeps
        # the room runnable (as in going idle).
        lease.idling = True
        try:
            due = await asyncio.wait_for(self.io.due_time(lease.room), self.renew_every_s)
            attempts, failed = await asyncio.wait_for(
                self.io.count_failed_take(lease, most, detail), self.renew_every_s)
        except (LeaseLost, RedisError, TimeoutError) as problem:
            log.error("room_take_failed", error=detail, exc_info=error,
                      not_counted=str(problem) or type(problem).__name__)
            return
        log.error("room_take_failed", error=detail, attempt=attempts, max_attempts=most,
                  exc_info=error)
        if failed:
            log.error("room_failed", error=detail, attempts=attempts,
                      stop_reason=StopReason.ROOM_ERROR.value)
            with contextlib.suppress(RedisError, TimeoutError):
                await asyncio.wait_for(self.io.unschedule(lease.room, due), self.renew_every_s)

    async def let_go(self, lease: Lease, reschedule: bool) -> None:
        """Forget the room, release its lease and, unless it went idle, make it due now so
        that a coordinator (maybe this one) takes it at once rather than after the ttl."""
        if self.rooms.get(lease.room, (None,))[0] is lease:
            del self.rooms[lease.room]
        try:
            released = await asyncio.wait_for(self.leases.release(lease), self.renew_every_s)
            if released and reschedule:
                await asyncio.wait_for(self.io.set_runnable(lease.room, True), self.renew_every_s)
        except (RedisError, TimeoutError) as error:
            # The lease expires by itself; the room is due at its expiry.
            self.note_unreachable(error)
            log.info("release_failed", room=lease.room, error=str(error) or type(error).__name__)

    def keep_leases_apart(self) -> None:
        """Keep the leases from a thread with its own event loop and Redis client: when a
        thousand rooms wake at once the rooms' loop falls seconds behind, and renewals
        queued behind them would let every lease lapse."""

        async def keep() -> None:
            client = connect(self.settings, CONTROL_CONNECTIONS)
            leases = Leases(client, self.keys, Scripts(client), self.id, self.settings.lease_ttl_s)
            keeper = asyncio.create_task(self.keep_leases(leases))
            while not self.keeper_stop.is_set():
                await asyncio.sleep(self.renew_every_s / 4)
            keeper.cancel()
            with contextlib.suppress(RedisError, TimeoutError):
                await asyncio.wait_for(client.aclose(), self.renew_every_s)

        asyncio.run(keep())

    async def keep_leases(self, leases: Leases | None = None) -> None:
        """Renew every held lease each period, on a fixed schedule, and stop work at once
        on any room whose lease was lost or has less than the margin left.

        The lapse check never waits for a renewal: a renewal may reply late, and it still
        counts from when it was sent. One renewal is in flight at a time.
        """
        loop = asyncio.get_running_loop()
        next_tick = loop.time()
        renewal: asyncio.Task[None] | None = None
        try:
            while True:
                self.on_rooms_loop(self.drop_lapsing)
                if renewal is None or renewal.done():
                    renewal = asyncio.create_task(self.renew_held(leases or self.leases),
                                                  name="lease-renewal")
                next_tick = max(next_tick + self.renew_every_s, loop.time())
                await asyncio.sleep(next_tick - loop.time())
        finally:
            if renewal is not None:
                renewal.cancel()

    async def renew_held(self, leases: Leases) -> None:
        """One renewal round trip for every room still being served; a Redis that does not
        answer within the ttl is given up on (the leases lapse meanwhile)."""
        held = [lease for lease, task in list(self.rooms.values()) if not task.cancelling()]
        if not held:
            return
        try:
            renewed = await asyncio.wait_for(leases.renew(held), self.settings.lease_ttl_s)
        except (RedisError, TimeoutError) as error:
            self.note_unreachable(error)
            log.warning("renew_failed", rooms=len(held), error=str(error) or type(error).__name__)
            return
        except Exception:
            log.exception("renew_failed", rooms=len(held))
            return
        lost = [lease for lease, ok in zip(held, renewed, strict=True) if not ok]
        self.on_rooms_loop(self.drop_rooms, lost, "lease lost")
        self.on_rooms_loop(self.drop_lapsing)

    def note_unreachable(self, error: BaseException) -> None:
        """Note the time if ``error`` says Redis or the broker could not be reached: the
        turns in flight then get their time again."""
        if isinstance(error, UNREACHABLE_ERRORS):
            self.outages.failed()

    def on_rooms_loop(self, function: Callable[..., None], *args: Any) -> None:
        """Call ``function`` on the loop the rooms run on (at once when already there)."""
        try:
            here = asyncio.get_running_loop()
        except RuntimeError:
            here = None
        if self.loop is None or self.loop is here:
            function(*args)
        else:
            self.loop.call_soon_threadsafe(function, *args)

    def drop_lapsing(self) -> None:
        """Stop work on rooms whose lease this coordinator can no longer vouch for."""
        self.drop_rooms([lease for lease, _ in self.rooms.values() if lease.lapsing()],
                        "lease not renewed in time")

    def drop_rooms(self, leases: list[Lease], reason: str) -> None:
        """Cancel these rooms' tasks now (unless a room was re-leased meanwhile). A room
        stays listed until its task has let it go, so it is not taken again before."""
        for lease in leases:
            held, task = self.rooms.get(lease.room, (None, None))
            if held is lease and task is not None and not task.cancelling():
                log.warning("room_dropped", room=lease.room, epoch=lease.epoch, reason=reason,
                            lease_left_s=round(lease.seconds_left(), 3))
                task.cancel()

    async def shutdown(self) -> None:
        """Abandon the current steps, release every lease and make the rooms due now, so
        another coordinator takes them at once instead of after the ttl. Bounded by the
        ttl: with Redis gone, the leases expire by themselves."""
        tasks = [task for _, task in self.rooms.values()]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=self.settings.lease_ttl_s)
        with contextlib.suppress(RedisError, TimeoutError):
            await asyncio.wait_for(self.control.zrem(self.keys.coordinators, self.id),
                                   self.renew_every_s)
        for client in {self.redis, self.control}:
            with contextlib.suppress(RedisError, TimeoutError):
                await asyncio.wait_for(client.aclose(), self.renew_every_s)
        log.info("coordinator_stopped", coordinator=self.id, released=len(tasks))


def error_line(error: BaseException, most_chars: int = 500) -> str:
    """``<class>: <message>`` on one line, whitespace squeezed, cut to ``most_chars``."""
    message = " ".join(str(error).split())
    line = f"{type(error).__name__}: {message}" if message else type(error).__name__
    return line if len(line) <= most_chars else line[: most_chars - 3] + "..."


def connect(settings: Settings, max_connections: int) -> Redis:
    """A coordinator's Redis client with a pool of ``max_connections``.

    Each room waiting for bids holds one connection in XREAD BLOCK for up to its whole bid
    timeout, so the rooms' pool is sized to the capacity and reads have no socket timeout:
    the lease keeper bounds every wait instead, by cancelling a room whose lease lapses. A
    dropped connection (a Redis restart) is retried briefly; a retried fenced script that
    had already run is refused (NOTURN, TURNOPEN), so a retry never writes twice.
    """
    retry = Retry(ExponentialWithJitterBackoff(base=0.05, cap=0.5), retries=3)
    pool = BlockingConnectionPool.from_url(
        settings.redis_url, max_connections=max_connections, timeout=None,
        socket_timeout=None, socket_connect_timeout=settings.lease_renew_every_s, retry=retry,
        **redis_kwargs(settings))
    return Redis(connection_pool=pool)


async def serve_forever(settings: Settings, transport: Transport, coordinator_id: str = "") -> None:
    """Run a coordinator until SIGTERM or SIGINT, then shut down cleanly."""
    coordinator = Coordinator(settings, transport, coordinator_id)
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, coordinator.stop)
    await coordinator.run()
