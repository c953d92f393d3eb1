"""The lease keeper: renews the leases of every room a coordinator serves, on a fixed
schedule from a thread of its own, and stops work at once on any room whose lease it
cannot vouch for (lost, or with less than the margin left)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from typing import Any

import structlog
from redis.exceptions import RedisError

from parley.coordinator.connections import CONTROL_CONNECTIONS, connect
from parley.coordinator.lease import Lease, Leases
from parley.coordinator.outages import OutageClock
from parley.shared import metrics
from parley.shared.keys import Keys
from parley.shared.scripts import Scripts
from parley.shared.settings import Settings

log = structlog.get_logger("parley.coordinator")

# The rooms a coordinator serves: each room's lease and the task running its turn loop.
ServedRooms = dict[str, tuple[Lease, asyncio.Task[None]]]


class LeaseKeeper:
    """Keeps the leases of the rooms in ``rooms`` (the scheduler's table, read here; a
    room is dropped by cancelling its task, and its task takes it out of the table)."""

    def __init__(self, settings: Settings, owner: str, rooms: ServedRooms,
                 outages: OutageClock) -> None:
        self.settings = settings
        self.owner = owner
        self.rooms = rooms
        self.outages = outages
        self.renew_every_s = settings.lease_renew_every_s
        # Set by start(): the loop the rooms run on. The thread's stop flag.
        self.loop: asyncio.AbstractEventLoop | None = None
        self.stopping = threading.Event()

    def start(self) -> None:
        """Keep the leases of the rooms running on the current event loop, from a thread."""
        self.loop = asyncio.get_running_loop()
        threading.Thread(target=self.keep_leases_apart, name="lease-keeper", daemon=True).start()

    def stop(self) -> None:
        """Ask the keeper's thread to stop renewing and close its client."""
        self.stopping.set()

    def keep_leases_apart(self) -> None:
        """Keep the leases from a thread with its own event loop and Redis client: when a
        thousand rooms wake at once the rooms' loop falls seconds behind, and renewals
        queued behind them would let every lease lapse."""

        async def keep() -> None:
            client = connect(self.settings, CONTROL_CONNECTIONS)
            leases = Leases(client, Keys(self.settings.key_prefix), Scripts(client), self.owner,
                            self.settings.lease_ttl_s)
            keeper = asyncio.create_task(self.keep_leases(leases))
            while not self.stopping.is_set():
                await asyncio.sleep(self.renew_every_s / 4)
            keeper.cancel()
            with contextlib.suppress(RedisError, TimeoutError):
                await asyncio.wait_for(client.aclose(), self.renew_every_s)

        asyncio.run(keep())

    async def keep_leases(self, leases: Leases) -> None:
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
                    renewal = asyncio.create_task(self.renew_held(leases), name="lease-renewal")
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
            self.outages.note_unreachable(error)
            log.warning("renew_failed", rooms=len(held), error=str(error) or type(error).__name__)
            return
        except Exception:
            log.exception("renew_failed", rooms=len(held))
            return
        lost = [lease for lease, ok in zip(held, renewed, strict=True) if not ok]
        metrics.LEASE_RENEWALS.inc(len(held) - len(lost))
        self.on_rooms_loop(self.drop_rooms, lost, "lease lost")
        self.on_rooms_loop(self.drop_lapsing)

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
                metrics.LEASE_LOSSES.inc()
                task.cancel()
