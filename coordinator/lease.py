"""Room leases: which coordinator serves a room, fenced by the room's epoch.

A lease is ``SET lease <coordinator id>:<epoch> NX PX ttl``; acquiring bumps the epoch in
the room's state. Every write a coordinator makes to a room checks the whole token inside
its Lua script, so a coordinator that lost its lease cannot write, even if it has not
noticed yet. The epoch alone is not enough: a Redis restart that lost recent writes can
hand out the same epoch twice, but never to the same coordinator id at once.

The coordinator also keeps its own reckoning of how long each lease is good for, counted
from the moment it *sent* the acquire or renew (Redis extended the lease no earlier than
that). It stops work on a room while a margin is still left, so it never relies on the
fencing check alone; fencing is the backstop for pauses it cannot see coming.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from redis.asyncio.cluster import RedisCluster
from redis.crc import key_slot
from redis.exceptions import ResponseError

from parley.shared.keys import Keys
from parley.shared.records import decode
from parley.shared.scripts import Scripts
from parley.shared.settings import Settings
from parley.shared.store import now_ms

# Leases renewed by one script call: a few milliseconds of Redis's time, so a batch of
# thousands of rooms never holds Redis up for long, yet costs one command, not thousands.
RENEW_BATCH = 1000
# Scripts in flight at once on a cluster, one per slot: a cluster client's pool per node is
# small (the control connections) and it refuses a command past it (MaxConnectionsError)
# instead of waiting, so a thousand rooms in a thousand slots must not go all at once.
CLUSTER_SCRIPTS_AT_ONCE = 2
T = TypeVar("T")


class LeaseLost(Exception):
    """This coordinator no longer holds the room: stop working on it at once."""


@dataclass(eq=False)
class Lease:
    """A held lease: the token every fenced write presents, and how long it is good for."""

    room: str
    owner: str
    epoch: int
    # time.monotonic() past which the lease may have expired in Redis.
    valid_until: float = field(default=0.0, repr=False)
    # Work stops once less than this is left (the coordinator sets it from its settings).
    margin_s: float = field(default=0.0, repr=False)
    # Set while the room goes idle: renewals then leave its due time alone.
    idling: bool = field(default=False, repr=False)
    # Told of each change of ``idling`` (the lease keeper renewing it); awaited.
    on_change: Callable[[Lease], Awaitable[None]] | None = field(default=None, repr=False)

    @property
    def token(self) -> str:
        """``<coordinator id>:<epoch>``, the lease key's value."""
        return f"{self.owner}:{self.epoch}"

    async def set_idling(self, idling: bool) -> None:
        """Say whether the room is going idle (renewals then leave its due time alone).
        Going idle returns once no renewal that may not have seen it is in flight: a due
        time read after it is no longer moved by this coordinator's renewals."""
        self.idling = idling
        if self.on_change is not None:
            await self.on_change(self)

    def seconds_left(self) -> float:
        """How long the lease is surely still ours, by this process's clock."""
        return self.valid_until - time.monotonic()

    def lapsing(self, margin_s: float | None = None) -> bool:
        """True once less than the margin (default: the lease's) is left: time to stop
        work on the room."""
        return self.seconds_left() < (self.margin_s if margin_s is None else margin_s)

    def ensure_held(self, margin_s: float | None = None) -> None:
        """Raise LeaseLost unless the lease is surely ours for at least the margin
        (default: the lease's)."""
        if self.lapsing(margin_s):
            raise LeaseLost(f"lease on {self.room} not renewed in time "
                            f"({self.seconds_left():.2f}s left)")


# A room's answer to a batched take: its lease, None (someone holds it), or its refusal.
Taken = Lease | None | ResponseError


class Leases:
    """Acquire, renew and release room leases for one coordinator."""

    def __init__(self, client: Any, keys: Keys, scripts: Scripts, owner: str, ttl_s: float,
                 margin_s: float = 0.0,
                 events_maxlen: int = Settings.model_fields["events_stream_maxlen"].default):
        self.redis = client
        self.keys = keys
        self.scripts = scripts
        self.owner = owner
        self.ttl_s = ttl_s
        self.ttl_ms = int(ttl_s * 1000)
        self.margin_s = margin_s
        self.events_maxlen = events_maxlen
        self.cluster = isinstance(client, RedisCluster)

    async def acquire(self, room: str) -> Lease | None:
        """Take the room if nobody holds it, and push its due time past our ttl."""
        sent = time.monotonic()
        keys = [self.keys.lease(room), self.keys.state(room), self.keys.events(room)]
        epoch = int(await self.scripts.acquire(keys=keys,
                                               args=[self.owner, self.ttl_ms, self.events_maxlen]))
        if not epoch:
            return None
        await self.redis.zadd(self.keys.runnable, {room: now_ms() + self.ttl_ms}, xx=True)
        return Lease(room, self.owner, epoch, sent + self.ttl_s, self.margin_s)

    async def acquire_many(self, rooms: list[str]) -> list[Taken]:
        """Take every room nobody holds, one script call per batch (per hash slot on a
        cluster), and push the taken rooms' due times past our ttl in one command.

        Each room's answer: its Lease, None when another coordinator holds it, or the
        ResponseError acquire.lua would have refused that room alone with.
        """
        if not rooms:
            return []
        batches = self.batches(rooms, lambda room: room)
        calls = [([key for room in batch for key in (self.keys.lease(room),
                                                      self.keys.state(room),
                                                      self.keys.events(room))],
                  [self.owner, self.ttl_ms, self.events_maxlen]) for batch in batches]
        sent = time.monotonic()
        replies = await self.run_batches(self.scripts.acquire_many, calls)
        taken: dict[str, Taken] = {}
        for batch, answers in zip(batches, replies, strict=True):
            for room, answer in zip(batch, answers, strict=True):
                taken[room] = self.taken(room, answer, sent)
        leased = {room: now_ms() + self.ttl_ms for room, answer in taken.items()
                  if isinstance(answer, Lease)}
        if leased:
            await self.redis.zadd(self.keys.runnable, leased, xx=True)
        return [taken[room] for room in rooms]

    def taken(self, room: str, answer: int | bytes | str, sent: float) -> Taken:
        """One room's answer of acquire_many.lua as a Lease, None or its refusal."""
        if isinstance(answer, bytes | str):
            return ResponseError(decode(answer))
        if not answer:
            return None
        return Lease(room, self.owner, int(answer), sent + self.ttl_s, self.margin_s)

    async def run_batches(self, script: Any, calls: list[tuple[list[str], list[Any]]]
                          ) -> list[Any]:
        """Run ``script`` once per (keys, args): in one round trip, or on a cluster (whose
        pipeline refuses scripts) as one call per slot, all at once."""
        if self.cluster:
            at_once = asyncio.Semaphore(CLUSTER_SCRIPTS_AT_ONCE)

            async def one(keys: list[str], args: list[Any]) -> Any:
                async with at_once:
                    return await script(keys=keys, args=args)

            return list(await asyncio.gather(*(one(keys, args) for keys, args in calls)))
        pipe = self.redis.pipeline(transaction=False)
        for keys, args in calls:
            await script(keys=keys, args=args, client=pipe)
        return list(await pipe.execute())

    async def renew(self, leases: list[Lease], good_for_s: float | None = None) -> list[bool]:
        """Renew many leases in one round trip; False where a lease was lost.

        Each renewed lease is good for ``good_for_s`` (default: the ttl) from the moment the
        renewal was sent. Held rooms stay in the runnable set with their due time at the
        lease's expiry, so other coordinators' scans skip them until this one stops
        renewing, and take them over then (even if a stale holder removed them from the
        set meanwhile); a room going idle keeps its due time.
        """
        if not leases:
            return []
        good_for_s = self.ttl_s if good_for_s is None else good_for_s
        good_for_ms = max(1, int(good_for_s * 1000))
        # The rooms whose due time moves first in each batch: the script pushes those.
        batches = [sorted(batch, key=lambda lease: lease.idling)
                   for batch in self.batches(leases, lambda lease: lease.room)]
        due = now_ms() + good_for_ms
        calls = [self.renewal(batch, good_for_ms, due) for batch in batches]
        sent = time.monotonic()
        if self.cluster:
            replies = await self.run_batches(self.scripts.renew, calls)
            scheduled = {lease.room: due for batch, answers in zip(batches, replies, strict=True)
                         for lease, ok in zip(batch, answers, strict=True)
                         if ok and not lease.idling}
            if scheduled:
                await self.redis.zadd(self.keys.runnable, scheduled)
        else:
            # Batches side by side, on connections of their own: Redis reads a few kilobytes
            # of one connection's commands per round of its clients, so a thousand-room
            # batch on a busy Redis waits many rounds, and batches together wait them once.
            replies = list(await asyncio.gather(*(self.scripts.renew(keys=keys, args=args)
                                                  for keys, args in calls)))
        renewed = {lease: bool(reply) for batch, answers in zip(batches, replies, strict=True)
                   for lease, reply in zip(batch, answers, strict=True)}
        for lease, ok in renewed.items():
            if ok:
                lease.valid_until = sent + good_for_s
        return [renewed[lease] for lease in leases]

    def renewal(self, batch: list[Lease], good_for_ms: int, due: int
                ) -> tuple[list[str], list[Any]]:
        """renew.lua's keys and arguments for ``batch`` (its rooms going idle last): on one
        Redis the script pushes the other rooms' due times too."""
        pushes = 0 if self.cluster else sum(not lease.idling for lease in batch)
        keys = [self.keys.lease(lease.room) for lease in batch]
        if pushes:
            keys.append(self.keys.runnable)
        return keys, [good_for_ms, self.owner, due, pushes, *(lease.epoch for lease in batch)]

    def batches(self, items: list[T], room_of: Callable[[T], str]) -> list[list[T]]:
        """The items (leases or rooms) in batches of at most RENEW_BATCH, one script call
        each: one batch per hash slot on Redis Cluster (a script may touch only one slot)."""
        slots: dict[int, list[T]] = defaultdict(list)
        for item in items:
            slots[key_slot(self.keys.lease(room_of(item)).encode()) if self.cluster else 0
                  ].append(item)
        return [group[start:start + RENEW_BATCH] for group in slots.values()
                for start in range(0, len(group), RENEW_BATCH)]

    async def release(self, lease: Lease) -> bool:
        """Give the room up; False if it was no longer ours."""
        lease.valid_until = 0.0
        return bool(await self.scripts.release(keys=[self.keys.lease(lease.room)],
                                               args=[lease.token]))
