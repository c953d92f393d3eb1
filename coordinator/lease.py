"""Room leases: which coordinator serves a room, fenced by the room's epoch.

A lease is ``SET lease <coordinator id>:<epoch> NX PX ttl``; acquiring bumps the epoch in
the room's state. Every write a coordinator makes to a room checks the whole token inside
its Lua script, so a coordinator that lost its lease cannot write, even if it has not
noticed yet. The epoch alone is not enough: a Redis restart that lost recent writes can
hand out the same epoch twice, but never to the same coordinator id at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shared.keys import Keys
from shared.scripts import Scripts
from shared.store import now_ms


class LeaseLost(Exception):
    """This coordinator no longer holds the room: stop working on it at once."""


@dataclass(frozen=True)
class Lease:
    """A held lease: the token every fenced write presents."""

    room: str
    owner: str
    epoch: int

    @property
    def token(self) -> str:
        """``<coordinator id>:<epoch>``, the lease key's value."""
        return f"{self.owner}:{self.epoch}"


class Leases:
    """Acquire, renew and release room leases for one coordinator."""

    def __init__(self, client: Any, keys: Keys, scripts: Scripts, owner: str, ttl_s: float):
        self.redis = client
        self.keys = keys
        self.scripts = scripts
        self.owner = owner
        self.ttl_ms = int(ttl_s * 1000)

    async def acquire(self, room: str) -> Lease | None:
        """Take the room if nobody holds it, and push its due time past our ttl."""
        keys = [self.keys.lease(room), self.keys.state(room)]
        epoch = int(await self.scripts.acquire(keys=keys, args=[self.owner, self.ttl_ms]))
        if not epoch:
            return None
        await self.redis.zadd(self.keys.runnable, {room: now_ms() + self.ttl_ms}, xx=True)
        return Lease(room, self.owner, epoch)

    async def renew(self, leases: list[Lease]) -> list[bool]:
        """Renew many leases in one round trip; False where a lease was lost.

        Held rooms' due times move past the ttl, so other coordinators' scans skip them
        until this one stops renewing.
        """
        pipe = self.redis.pipeline(transaction=False)
        for lease in leases:
            await self.scripts.renew(keys=[self.keys.lease(lease.room)], args=[lease.token, self.ttl_ms],
                                     client=pipe)
        due = now_ms() + self.ttl_ms
        for lease in leases:
            pipe.zadd(self.keys.runnable, {lease.room: due}, xx=True)
        replies = await pipe.execute()
        return [bool(reply) for reply in replies[: len(leases)]]

    async def release(self, lease: Lease) -> bool:
        """Give the room up; False if it was no longer ours."""
        return bool(await self.scripts.release(keys=[self.keys.lease(lease.room)],
                                               args=[lease.token]))
