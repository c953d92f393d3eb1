"""The coordinator process's scheduler: leases runnable rooms up to a capacity, runs each
one's turn loop as an asyncio task with an explicit policy per failure, and lets each room
go when its loop ends. Its lease keeper (coordinator/lease_keeper.py, renewing from a
process of its own: coordinator/keeper.py) renews the leases
and stops work on any room whose lease it cannot vouch for; a heartbeat tells operators
the coordinator is alive."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import math
import os
import signal
import socket
import uuid
from typing import cast

import structlog
from redis.asyncio import Redis
from redis.exceptions import RedisError, ResponseError

from parley.coordinator import debug
from parley.coordinator.answer_reads import AnswerReads, OwnReads, SharedReads
from parley.coordinator.connections import (
    ANSWER_READERS,
    COMMAND_CONNECTIONS,
    CONTROL_CONNECTIONS,
    connect,
    reader_pool,
    unusable,
)
from parley.coordinator.first_turns import FirstTurns
from parley.coordinator.lease import Lease, LeaseLost, Leases
from parley.coordinator.lease_keeper import (
    InProcessKeeper,
    KeeperProcess,
    LeaseKeeper,
    ServedRooms,
)
from parley.coordinator.outages import OutageClock
from parley.coordinator.outbox import Outbox
from parley.coordinator.retention import IdleRooms
from parley.coordinator.room_io import InboxLimits, RoomIO
from parley.coordinator.signals import on_signal
from parley.coordinator.transport import HeldTransport, Transport
from parley.coordinator.turn_loop import RoomRunner, TurnOptions
from parley.shared import metrics
from parley.shared.health import (
    COORDINATOR_PORT,
    FailedRounds,
    Liveness,
    Probes,
    readiness_checks,
    start_health_server,
)
from parley.shared.keys import Keys
from parley.shared.logs import one_line
from parley.shared.models import StopReason
from parley.shared.records import decode
from parley.shared.refusals import Refusal, refused_with
from parley.shared.scripts import Scripts
from parley.shared.settings import Settings, redact_url
from parley.shared.store import now_ms

log = structlog.get_logger("parley.coordinator")

# A vanished coordinator stays visible to operators this long, then its heartbeat goes.
FORGET_VANISHED_MS = 24 * 3600 * 1000
# The scheduler's loop is not live once a round is this late: a scan is bounded by the
# lease ttl, so a live loop goes round at least every ttl (plus the scan interval).
LIVE_ROUNDS_S = 30.0
# The coordinator is not ready once this many scans in a row failed: it goes round, but
# takes no room (its readiness names the scan and the last error).
SCANS_FAILED_NOT_READY = 5
# The coordinator process's garbage collection thresholds. With Python's (700, 10, 10), a
# coordinator holding 10,000 rooms ran a full collection of its heap (900,000 objects,
# 0.3 s with every thread stopped) every 3 s: a tenth of its time, its turns and its lease
# keeper's threads stalled meanwhile. Young collections fourteen times rarer, and full ones
# only after 100 of the middle generation, leave full collections rare; the cyclic garbage
# that waits longer for them is small beside the rooms' own state.
GC_THRESHOLDS = (10_000, 50, 100)
# A room due for this many scan intervals has been left by every live coordinator's scan
# (a coordinator that died still counts as live for two ttls): a scan takes all such rooms,
# not only its share, so a standby takes a dead coordinator's rooms in one scan.
OVERDUE_SCANS = 3


def new_coordinator_id() -> str:
    """A coordinator id operators can trace to a host and process."""
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


class Coordinator:
    """Serves rooms: one asyncio task per leased room, up to ``coordinator_capacity``."""

    def __init__(self, settings: Settings, transport: Transport, coordinator_id: str = "",
                 client: Redis | None = None):
        self.settings = settings
        self.transport = transport
        self.outbox = Outbox(transport)  # the rooms' calls of a tick leave together
        self.id = coordinator_id or new_coordinator_id()
        self.keys = Keys(settings.key_prefix)
        # The rooms' commands share a few connections, and their waits for answers a few
        # readers (one connection each); on a cluster each waiting room holds its own.
        self.redis = client or connect(settings, COMMAND_CONNECTIONS)
        self.waits: AnswerReads = (
            OwnReads(client or connect(settings, settings.coordinator_capacity + 8))
            if client is not None or settings.redis_cluster else
            SharedReads(reader_pool(settings, ANSWER_READERS), self.redis, ANSWER_READERS))
        # Leases, scans and heartbeats get connections of their own: with every room of a
        # busy coordinator holding one in XREAD BLOCK, a renewal queued behind them for a
        # free connection would let the leases lapse.
        self.control = client or connect(settings, CONTROL_CONNECTIONS)
        scripts = Scripts(self.redis)
        self.io = RoomIO(self.redis, self.keys, scripts, waits=self.waits,
                         limits=InboxLimits.from_settings(settings),
                         events_maxlen=settings.events_stream_maxlen)
        self.renew_every_s = settings.lease_renew_every_s
        # Checked once per renewal period: stopping with 1.5 periods left leaves at least
        # half a period between the room's last work and the lease's expiry.
        self.leases = Leases(self.control, self.keys, Scripts(self.control), self.id,
                             settings.lease_ttl_s,
                             margin_s=1.5 * self.renew_every_s,
                             events_maxlen=settings.events_stream_maxlen)
        self.options = TurnOptions(settings.key_prefix, settings.agents_per_task,
                                   settings.turns_stream_maxlen, settings.task_heartbeat_s,
                                   settings.task_finished_max)
        self.idle_rooms = IdleRooms(self.control, self.keys, Scripts(self.control),
                                    settings.room_idle_expiry_s)
        self.rooms: ServedRooms = {}
        metrics.ROOMS_HELD.labels(coordinator=self.id).set_function(lambda: len(self.rooms))
        self.outages = OutageClock()
        self.first_turns = FirstTurns()
        # Renewals run in a process of their own; a coordinator given its client (the
        # tests' fakeredis, which no other process reaches) renews from its own loop.
        self.keeper: LeaseKeeper = (
            InProcessKeeper(settings, self.id, self.rooms, self.outages, self.leases)
            if client is not None else KeeperProcess(settings, self.id, self.rooms, self.outages))
        self.stopping = asyncio.Event()
        self.liveness = Liveness(max(LIVE_ROUNDS_S, 3 * settings.lease_ttl_s))
        self.scans = FailedRounds("scans", SCANS_FAILED_NOT_READY)

    async def run(self) -> None:
        """Serve until stop() is called; then release every lease and return."""
        log.info("coordinator_started", coordinator=self.id,
                 capacity=self.settings.coordinator_capacity, lease_ttl_s=self.settings.lease_ttl_s,
                 redis=redact_url(self.settings.redis_url),
                 broker=redact_url(self.settings.broker_url))
        self.keeper.start()
        try:
            await self.keeper.ready()
            while not self.stopping.is_set():
                await self.scan_once()
                self.liveness.tick()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.stopping.wait(), self.settings.scan_interval_s)
        finally:
            # The keeper renews until every lease is released (or the shutdown gave up).
            await self.shutdown()
            self.keeper.stop()

    def stop(self) -> None:
        """Ask run() to return (safe from a signal handler)."""
        self.stopping.set()

    async def scan_once(self) -> None:
        """One bounded scan: a Redis that hangs must not keep the scheduler (or a
        shutdown) waiting."""
        try:
            await asyncio.wait_for(self.scan(), self.settings.lease_ttl_s)
        except (RedisError, TimeoutError) as error:
            self.outages.note_unreachable(error)
            log.warning("scan_failed", error=str(error) or type(error).__name__)
            await self.note_scan(error)
        except Exception as error:
            log.exception("scan_failed")
            await self.note_scan(error)
        else:
            await self.note_scan(None)

    async def note_scan(self, error: Exception | None) -> None:
        """Count the scan that failed with ``error`` (None: it worked) toward readiness,
        and while scans keep failing say why under this coordinator's scans_failing key
        for ``parley status`` (as far as Redis takes the write: it may be what fails)."""
        key = self.keys.scans_failing(self.id)
        was_failing = self.scans.failing()
        if error is None:
            self.scans.succeeded()
        else:
            self.scans.failed(error_line(error, 300))
        with contextlib.suppress(RedisError, TimeoutError):
            if self.scans.failing():
                await asyncio.wait_for(self.control.set(
                    key, self.scans.describe(), px=int(3 * self.settings.lease_ttl_s * 1000)),
                    self.renew_every_s)
            elif was_failing:
                await asyncio.wait_for(self.control.delete(key), self.renew_every_s)

    async def scan(self) -> None:
        """Heartbeat, expire idle rooms when a sweep is due, then lease due runnable rooms
        while there is capacity."""
        live = await self.heartbeat()
        await self.idle_rooms.maybe_sweep()
        capacity = self.settings.coordinator_capacity
        free = capacity - len(self.rooms)
        if free <= 0:
            return
        now = now_ms()
        due = await self.control.zrangebyscore(self.keys.runnable, "-inf", now, 0, free * 2,
                                               withscores=True)
        overdue_before = now - OVERDUE_SCANS * 1000 * self.settings.scan_interval_s
        # Oldest due first: the overdue rooms lead the list.
        candidates, overdue = [], 0
        for member, score in cast(list[tuple[bytes, float]], due):
            room = decode(member)
            if room not in self.rooms:
                candidates.append(room)
                overdue += score < overdue_before
        limit = scan_share(len(candidates), free, live, capacity, overdue)
        taken = 0
        while candidates and taken < limit and not self.stopping.is_set():
            batch, candidates = candidates[:limit - taken], candidates[limit - taken:]
            for lease in await self.take(batch):
                self.start_room(lease)
                taken += 1

    async def heartbeat(self) -> int:
        """Tell operators this coordinator is alive; forget long-vanished ones. Returns how
        many coordinators are live (this one included): those heard from within two ttls,
        as a live one scans at least once per ttl."""
        now = now_ms()
        pipe = self.control.pipeline(transaction=False)
        pipe.zadd(self.keys.coordinators, {self.id: now})
        pipe.zremrangebyscore(self.keys.coordinators, "-inf", now - FORGET_VANISHED_MS)
        pipe.zcount(self.keys.coordinators, now - int(2000 * self.settings.lease_ttl_s), "+inf")
        return int((await pipe.execute())[-1])

    async def take(self, rooms: list[str]) -> list[Lease]:
        """Acquire the rooms' leases in one script call per batch; the leases taken. A
        deleted room is taken off the runnable set, and a room whose acquire is refused (its
        epoch at its limit, a state that is not a room's) is set aside; the other rooms are
        taken all the same."""
        leases = []
        for room, answer in zip(rooms, await self.leases.acquire_many(rooms), strict=True):
            if isinstance(answer, Lease):
                leases.append(answer)
            elif isinstance(answer, ResponseError):
                await self.refused(room, answer)
        return leases

    async def refused(self, room: str, error: ResponseError) -> None:
        """Handle a room whose take was refused with ``error``."""
        if unusable(error):  # Redis refuses every room alike: the scan fails
            raise error
        if not refused_with(error, Refusal.NO_ROOM):
            await self.set_aside(room, error)
            return
        log.warning("runnable_room_missing", room=room)
        await self.io.set_runnable(room, False)

    async def set_aside(self, room: str, error: ResponseError) -> None:
        """Count a refused take as a failed one, so that a room refused at every take ends
        failed after ``room_max_errors`` of them; meanwhile it is due again after the
        lease's ttl, as a failed take is, not at the next scan."""
        if not await self.record_failed_take(room, "", error):
            with contextlib.suppress(RedisError, TimeoutError):
                await asyncio.wait_for(self.io.postpone(room, self.settings.lease_ttl_s),
                                       self.renew_every_s)

    def start_room(self, lease: Lease) -> None:
        """Run the room's turn loop in its own task (and its own log context)."""
        task = asyncio.create_task(self.serve(lease), name=f"room:{lease.room}")
        self.rooms[lease.room] = (lease, task)
        lease.on_change = self.keeper.changed
        self.keeper.hold(lease)

    async def serve(self, lease: Lease) -> None:
        """One room's loop with an explicit policy per failure; always lets the room go."""
        structlog.contextvars.bind_contextvars(room=lease.room, epoch=lease.epoch)
        log.info("room_acquired", coordinator=self.id)
        runner = RoomRunner(lease, self.io, HeldTransport(self.outbox, lease), self.options,
                            self.outages, self.first_turns)
        reschedule = True
        try:
            await runner.run()
            reschedule = False  # the room went idle and left the runnable set
        except LeaseLost as error:
            metrics.LEASE_LOSSES.inc()
            log.warning("lease_lost", reason=str(error))
        except asyncio.CancelledError:
            raise
        except Exception as error:
            if unusable(error):
                # Back off; whoever holds the room next resumes the turn.
                self.outages.failed()
                log.warning("room_redis_error", error=str(error) or type(error).__name__)
                await asyncio.sleep(self.settings.scan_interval_s)
            else:
                # Retried after the lease's ttl (its due time), not in a tight loop, and
                # only so many times in a row.
                reschedule = False
                await self.count_failed_take(lease, error)
        finally:
            await self.let_go(lease, reschedule)

    async def count_failed_take(self, lease: Lease, error: Exception) -> None:
        """Count a take that ended in ``error`` in the room's state; at ``room_max_errors``
        in a row the room ends failed (room_error) and leaves the runnable set until
        someone posts again, instead of being taken again forever."""
        # Renewals stop moving the due time, so that a post racing with this step keeps
        # the room runnable (as in going idle).
        await lease.set_idling(True)
        await self.record_failed_take(lease.room, lease.token, error)

    async def record_failed_take(self, room: str, token: str, error: Exception) -> bool:
        """Count the take of lease ``token`` ('' for a refused take) that ended in
        ``error``; True when the room now ended failed and left the runnable set."""
        detail = error_line(error)
        most = self.settings.room_max_errors
        try:
            due = await asyncio.wait_for(self.io.due_time(room), self.renew_every_s)
            counted = await asyncio.wait_for(
                self.io.count_failed_take(room, token, most, detail), self.renew_every_s)
        except (LeaseLost, RedisError, TimeoutError) as problem:
            log.error("room_take_failed", room=room, error=detail, exc_info=error,
                      not_counted=str(problem) or type(problem).__name__)
            return False
        if not counted.failed_before:  # else another coordinator told of it a moment ago
            log.error("room_take_failed", room=room, error=detail, attempt=counted.attempts,
                      max_attempts=most, exc_info=error)
        if counted.failed:
            log.error("room_failed", room=room, error=detail, attempts=counted.attempts,
                      stop_reason=StopReason.ROOM_ERROR.value)
        if counted.failed or counted.failed_before:
            # Whoever finds the room failed takes it off the runnable set, so that a count
            # racing with another's unschedule cannot leave it there.
            with contextlib.suppress(RedisError, TimeoutError):
                await asyncio.wait_for(self.io.unschedule(room, due), self.renew_every_s)
            return True
        return False

    async def let_go(self, lease: Lease, reschedule: bool) -> None:
        """Forget the room, release its lease and, unless it went idle, make it due now so
        that a coordinator (maybe this one) takes it at once rather than after the ttl."""
        if self.rooms.get(lease.room, (None,))[0] is lease:
            del self.rooms[lease.room]
        lease.on_change = None
        self.keeper.forget(lease)
        try:
            released = await asyncio.wait_for(self.leases.release(lease), self.renew_every_s)
            if released and reschedule:
                await asyncio.wait_for(self.io.set_runnable(lease.room, True), self.renew_every_s)
            if released:
                # Idle expiry counts from when the room was let go, not from its last post.
                await asyncio.wait_for(self.io.touch(lease.room), self.renew_every_s)
        except (RedisError, TimeoutError) as error:
            # The lease expires by itself; the room is due at its expiry.
            self.outages.note_unreachable(error)
            log.info("release_failed", room=lease.room, error=str(error) or type(error).__name__)

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
            await asyncio.wait_for(self.control.delete(self.keys.scans_failing(self.id)),
                                   self.renew_every_s)
        closing: list[AnswerReads | Redis] = [self.waits, *{self.redis, self.control}]
        for client in closing:
            with contextlib.suppress(RedisError, TimeoutError):
                await asyncio.wait_for(client.aclose(), self.renew_every_s)
        metrics.ROOMS_HELD.remove(self.id)
        log.info("coordinator_stopped", coordinator=self.id, released=len(tasks))


def scan_share(due: int, free: int, live: int, capacity: int, overdue: int = 0) -> int:
    """How many of ``due`` rooms one scan takes: every ``overdue`` one (no live
    coordinator took it in several scans), and this coordinator's share among the ``live``
    ones of the rest, so that coordinators scanning together split the rooms; at least a
    tenth of the capacity, never more than is free."""
    share = math.ceil((due - overdue) / max(1, live))
    return min(free, max(1, capacity // 10, overdue + share))


def error_line(error: BaseException, most_chars: int = 500) -> str:
    """``<class>: <message>`` on one line, whitespace squeezed, cut to ``most_chars``."""
    message = str(error)
    return one_line(f"{type(error).__name__}: {message}" if message.strip() else
                    type(error).__name__, most_chars)


async def serve_forever(settings: Settings, transport: Transport, coordinator_id: str = "",
                        health_port: int | None = None) -> None:
    """Run a coordinator until SIGTERM or SIGINT, then shut down cleanly; its health
    checks and metrics are served on ``health_port`` (default: the settings')."""
    gc.set_threshold(*GC_THRESHOLDS)
    debug.log_long_collections()
    coordinator = Coordinator(settings, transport, coordinator_id)
    checks = {**readiness_checks(settings), "scan": coordinator.scans.check}
    health = start_health_server(Probes(coordinator.liveness, checks), settings,
                                 COORDINATOR_PORT, health_port)
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        on_signal(loop, signum, coordinator.stop)
    if settings.coordinator_debug_signals:
        debug.add_signal_handlers(loop, settings.coordinator_debug_busy_s)
    try:
        await coordinator.run()
    finally:
        if health is not None:
            health.stop()
