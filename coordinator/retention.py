"""Idle rooms expire: every coordinator sweeps the ``rooms`` set (rooms by last activity)
for rooms idle longer than ``room_idle_expiry_s`` and deletes them with delete.lua.

A room expires only when nothing is going on in it: no coordinator holds it, no run is in
progress, no turn is open, no post waits (delete.lua checks all of it in the same script as
the delete), and its state is the one the sweep read before it looked at the room's last
activity. Every lifecycle change marks the room active before it changes its state, so a
room that just moved on is never taken for an idle one. Coordinators may sweep at the same
time: the second delete finds no room.

A background task's room goes with its parent: it never expires on its own while its
parent is there, and when its parent expires it is deleted right after (in its own script:
another Redis Cluster slot, maybe). One whose parent is gone (a delete that stopped
between the two) expires as any room.
"""

from __future__ import annotations

import time
from typing import Any

import orjson
import structlog
from redis.exceptions import ResponseError

from parley.shared.keys import Keys
from parley.shared.models import DEFAULT_ORGANIZATION
from parley.shared.records import decode
from parley.shared.refusals import NOT_IDLE, refused_with
from parley.shared.scripts import Scripts
from parley.shared.store import ARCHIVE_GUARD_FIELDS, now_ms

log = structlog.get_logger("parley.coordinator")

# Rooms looked at per sweep; the next sweep goes on after the last one's activity time.
SWEEP_BATCH = 100


def sweep_period_s(expiry_s: float) -> float:
    """How often a coordinator sweeps: a quarter of the expiry, at most once a minute."""
    return min(60.0, expiry_s / 4)


class IdleRooms:
    """Deletes rooms idle longer than ``expiry_s`` (0: never), a page per sweep."""

    def __init__(self, client: Any, keys: Keys, scripts: Scripts, expiry_s: float) -> None:
        self.redis = client
        self.keys = keys
        self.scripts = scripts
        self.expiry_s = expiry_s
        self.cursor = "-inf"  # the activity time (ms) the next sweep starts after
        self.next_sweep = 0.0  # time.monotonic() of the next sweep

    async def maybe_sweep(self) -> list[str]:
        """Sweep when one is due; returns the rooms that expired."""
        if not self.expiry_s or time.monotonic() < self.next_sweep:
            return []
        self.next_sweep = time.monotonic() + sweep_period_s(self.expiry_s)
        return await self.sweep()

    async def sweep(self) -> list[str]:
        """Look at the next page of rooms idle past the expiry; delete those still idle."""
        cutoff = now_ms() - int(self.expiry_s * 1000)
        page = await self.redis.zrangebyscore(self.keys.rooms, self.cursor, cutoff, 0,
                                              SWEEP_BATCH, withscores=True)
        self.cursor = f"({page[-1][1]!r}" if len(page) == SWEEP_BATCH else "-inf"
        return [decode(member) for member, _ in page if await self.expire(decode(member), cutoff)]

    async def expire(self, room: str, cutoff: int) -> bool:
        """Delete the room if it is still idle since before ``cutoff`` (ms)."""
        # The state first, then the activity time: a change after the state was read
        # fails the delete's check, one before it shows in the activity time.
        *values, organization, parent = await self.redis.hmget(
            self.keys.state(room), *ARCHIVE_GUARD_FIELDS, "organization", "parent")
        if parent is not None and await self.redis.exists(self.keys.state(decode(parent))):
            return False
        expect = {name: decode(value) if value is not None else ""
                  for name, value in zip(ARCHIVE_GUARD_FIELDS, values, strict=True)}
        children = await self.redis.smembers(self.keys.children(room))
        active = await self.redis.zscore(self.keys.rooms, room)
        if active is None or active > cutoff:
            return False
        try:
            deleted = await self.scripts.delete(keys=self.keys.room_keys(room),
                                                args=["0", "1", orjson.dumps(expect), ""])
        except ResponseError as error:
            if refused_with(error, NOT_IDLE):  # the room is left alone
                return False
            raise
        await self.unlist(room)
        for child in map(decode, children):
            await self.scripts.delete(keys=self.keys.room_keys(child), args=["1", "0", "{}", ""])
            await self.unlist(child)
        if deleted:
            # Its organization's place is free again.
            await self.redis.srem(self.keys.org_rooms(
                decode(organization or b"") or DEFAULT_ORGANIZATION), room)
            log.info("room_expired", room=room, idle_s=round((now_ms() - active) / 1000, 1),
                     keys_deleted=int(deleted))
        return bool(deleted)

    async def unlist(self, room: str) -> None:
        """Take a deleted room off the rooms and runnable sets."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.zrem(self.keys.rooms, room)
        pipe.zrem(self.keys.runnable, room)
        await pipe.execute()
