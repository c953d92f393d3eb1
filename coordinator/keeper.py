"""The lease keeper's process, ``python -m parley.coordinator.keeper``: renews the leases
of the rooms its coordinator says it holds, batched (one script call per thousand rooms,
per hash slot on a cluster), and reports each confirmed renewal and each loss back.

It is started by its coordinator (coordinator/lease_keeper.py, ``KeeperProcess``) and
talks to it in JSON lines. Its stdin carries, first, ``{"owner", "parent", "settings",
"hold"}``, then the coordinator's signals ``{"at", "hold", "drop"}``: ``at`` is the
coordinator's ``time.monotonic()`` (one clock for every process of the host), ``hold``
lists ``[room, epoch, idling]`` to renew, ``drop`` lists ``[room, epoch]`` no longer held,
and ``settle`` or ``confirm``, when present, numbers an ask. Its stdout carries its reports:
``{"ready": true}`` once it can renew, ``{"renewed": [[room, epoch]...], "until": t}`` (the
leases are good until the monotonic time ``t``), ``{"lost": [[room, epoch]...]}``,
``{"unreachable": true}`` (Redis could not be reached), ``{"settled": n}`` once no renewal
begun before ask ``n`` is in flight (a room going idle then reads a due time no renewal
moves) and ``{"confirmed": n}`` once a renewal of every lease begun after ask ``n`` has
ended, its reports written before (a look for lapsing leases then judges by them).

Each renewal makes a lease good until one ttl past the coordinator's last signal, never
longer, and after a third of the ttl without a signal the keeper renews nothing until it
hears from it again: a coordinator stopped (SIGSTOP) or wedged as a whole loses its rooms
within one ttl. The keeper exits when its stdin closes (its coordinator exited or died) or
when its parent is no longer its coordinator.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

import orjson
import structlog
from redis.exceptions import RedisError

from parley.coordinator.connections import CONTROL_CONNECTIONS, connect, unusable
from parley.coordinator.lease import Lease, Leases
from parley.shared.keys import Keys
from parley.shared.logs import configure_logging
from parley.shared.scripts import Scripts
from parley.shared.settings import Settings

log = structlog.get_logger("parley.coordinator")

# A line of the coordinator's may list every lease it holds (tens of thousands).
MOST_LINE_BYTES = 64 * 1024 * 1024


class Keeper:
    """The leases one coordinator holds, renewed while the coordinator signals."""

    def __init__(self, settings: Settings, owner: str, parent: int,
                 reports: asyncio.WriteTransport) -> None:
        self.settings = settings
        self.owner = owner
        self.parent = parent
        self.reports = reports
        self.ttl_s = settings.lease_ttl_s
        self.renew_every_s = settings.lease_renew_every_s
        # No renewal after this long without a signal: a third of the ttl.
        self.quiet_s = self.ttl_s / 3
        self.held: dict[str, Lease] = {}
        self.last_signal = 0.0  # the monotonic time of the last signal heard; none yet
        self.signalled = asyncio.Event()
        # Leases held since the last renewal: renewed at once, not at the next tick, since a
        # lease is good for one ttl from its acquire and its coordinator drops it with the
        # margin left, which a busy coordinator's acquire may already have eaten into.
        self.fresh: set[str] = set()
        # Set by a signal after a pause of the coordinator: every lease renewed at once.
        self.renew_all = False
        self.round_trip_s = 0.0  # of the last renewal of every lease
        self.woken = asyncio.Event()
        self.in_flight: set[asyncio.Task[None]] = set()  # renewals
        self.settling: set[asyncio.Task[None]] = set()
        self.confirming: list[int] = []  # asks for a renewal of every lease begun after them

    def heard(self, message: dict[str, Any]) -> None:
        """Apply one line of the coordinator's: a signal, maybe with changes."""
        at = float(message.get("at", 0.0))
        if self.last_signal and at - self.last_signal > self.renew_every_s / 2:
            # Back from a pause (signals come four a renewal period): the leases are short
            # by it, and the coordinator looks for lapsing ones after a renewal counted from
            # a signal sent since; waiting for the next tick could outlast its patience.
            self.renew_all = True
            self.woken.set()
        self.last_signal = max(self.last_signal, at)
        self.signalled.set()
        for room, epoch, idling in message.get("hold", ()):
            lease = Lease(room, self.owner, int(epoch))
            lease.idling = bool(idling)
            if room not in self.held or self.held[room].epoch != lease.epoch:
                self.fresh.add(room)
                self.woken.set()
            self.held[room] = lease
        for room, epoch in message.get("drop", ()):
            if room in self.held and self.held[room].epoch == epoch:
                del self.held[room]
        if "confirm" in message:
            self.confirming.append(int(message["confirm"]))
            self.renew_all = True
            self.woken.set()
        if "settle" in message:
            task = asyncio.create_task(self.settle(int(message["settle"]), list(self.in_flight)))
            self.settling.add(task)  # held until done: the loop keeps only weak references
            task.add_done_callback(self.settling.discard)

    async def settle(self, ask: int, renewals: list[asyncio.Task[None]]) -> None:
        """Say that ``ask`` is settled once ``renewals`` (those in flight when it came) end:
        each renewal after it sees the changes that came with it."""
        if renewals:
            await asyncio.wait(renewals)
        self.report({"settled": ask})

    def report(self, message: dict[str, Any]) -> None:
        """Write one report line (buffered: a coordinator not reading cannot block it)."""
        if not self.reports.is_closing():
            self.reports.write(orjson.dumps(message) + b"\n")

    def orphaned(self) -> bool:
        """True once the coordinator that started this keeper is gone."""
        return os.getppid() != self.parent

    async def keep(self, leases: Leases) -> None:
        """Renew every held lease each period (sooner while round trips are long), at once
        after a pause of the coordinator, and each freshly held one at once, while the
        coordinator signals; one renewal of each kind in flight at a time. Returns once the
        coordinator is gone."""
        loop = asyncio.get_running_loop()
        next_tick = loop.time()
        renewal: asyncio.Task[None] | None = None
        fresh_renewal: asyncio.Task[None] | None = None
        while not self.orphaned():
            if time.monotonic() - self.last_signal > self.quiet_s:
                # Silent coordinator: renew nothing, and renew at once when it is heard.
                if self.signalled.is_set():
                    log.warning("keeper_coordinator_silent", rooms=len(self.held),
                                silent_s=round(time.monotonic() - self.last_signal, 3))
                self.signalled.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.signalled.wait(), self.renew_every_s)
                next_tick = loop.time()
                continue
            due = self.renew_all or loop.time() >= next_tick
            if due and (renewal is None or renewal.done()):
                self.fresh.clear()  # this renewal covers them
                self.renew_all = False
                renewal = self.renewing(leases, list(self.held.values()), timed=True)
                if self.confirming:
                    renewal.add_done_callback(self.confirmer(max(self.confirming)))
                    self.confirming = []
                next_tick = loop.time() + self.renewal_interval()
            elif self.fresh and (fresh_renewal is None or fresh_renewal.done()):
                fresh = [self.held[room] for room in self.fresh if room in self.held]
                self.fresh.clear()
                fresh_renewal = self.renewing(leases, fresh)
            self.woken.clear()
            # A renewal due behind the one in flight starts as that one ends (it wakes us).
            wait_s = next_tick - loop.time()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.woken.wait(), wait_s if wait_s > 0 else None)
        log.warning("keeper_orphaned", parent=self.parent)

    def confirmer(self, ask: int) -> Callable[[asyncio.Task[None]], None]:
        """What says, as a renewal of every lease ends, that ``ask`` is confirmed (its own
        reports, written as it ended, come first)."""
        return lambda _: self.report({"confirmed": ask})

    def renewal_interval(self) -> float:
        """From one renewal of every lease to the next: a period less the last one's round
        trip, so that each lease's confirmation comes within a period of its renewal's
        signal (the coordinator stops a room with 1.5 periods left); half a period at least,
        and never before the renewal in flight has ended."""
        return max(self.renew_every_s / 2, self.renew_every_s - self.round_trip_s)

    def renewing(self, leases: Leases, held: list[Lease], timed: bool = False
                 ) -> asyncio.Task[None]:
        """Renew ``held`` in a task of its own (``timed``: its round trip sets the next
        renewal's interval); its end wakes the keeper (for leases held meanwhile)."""
        task = asyncio.create_task(self.renew_held(leases, held, timed), name="lease-renewal")
        self.in_flight.add(task)
        task.add_done_callback(self.in_flight.discard)
        task.add_done_callback(lambda _: self.woken.set())
        return task

    async def renew_held(self, leases: Leases, held: list[Lease], timed: bool = False) -> None:
        """One renewal round trip for the ``held`` leases, each good until a ttl past the
        coordinator's last signal; reports what was renewed and what was lost. A Redis that
        does not answer within the ttl is given up on (the leases lapse meanwhile)."""
        good_for_s = self.last_signal + self.ttl_s - time.monotonic()
        if not held or good_for_s <= 0:
            return
        sent = time.monotonic()
        try:
            renewed = await asyncio.wait_for(leases.renew(held, good_for_s), self.ttl_s)
        except (RedisError, TimeoutError) as error:
            if unusable(error):
                self.report({"unreachable": True})
            log.warning("renew_failed", rooms=len(held), error=str(error) or type(error).__name__)
            return
        except Exception:
            log.exception("renew_failed", rooms=len(held))
            return
        took_s = time.monotonic() - sent
        if timed:
            self.round_trip_s = took_s
        if took_s > self.renew_every_s / 2:
            log.warning("renewal_slow", rooms=len(held), seconds=round(took_s, 3))
        confirmed = [lease for lease, ok in zip(held, renewed, strict=True) if ok]
        lost = [lease for lease, ok in zip(held, renewed, strict=True) if not ok]
        for lease in lost:
            if self.held.get(lease.room) is lease:
                del self.held[lease.room]
        if confirmed:
            self.report({"renewed": [[lease.room, lease.epoch] for lease in confirmed],
                         "until": confirmed[0].valid_until})
        if lost:
            self.report({"lost": [[lease.room, lease.epoch] for lease in lost]})


async def listen(keeper: Keeper, lines: asyncio.StreamReader) -> None:
    """Read the coordinator's lines until its end of the pipe closes."""
    while line := await lines.readline():
        keeper.heard(orjson.loads(line))


async def serve(protocol_out: int) -> None:
    """Keep the leases until the coordinator is gone."""
    loop = asyncio.get_running_loop()
    lines = asyncio.StreamReader(limit=MOST_LINE_BYTES)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(lines), sys.stdin)
    reports, _ = await loop.connect_write_pipe(asyncio.Protocol,
                                               os.fdopen(protocol_out, "wb", buffering=0))
    hello = await lines.readline()
    if not hello:
        return  # the coordinator closed the pipe before it said anything
    message = orjson.loads(hello)
    settings = Settings(**message["settings"])
    configure_logging(settings.log_format, settings.log_level)
    structlog.contextvars.bind_contextvars(coordinator=message["owner"], keeper=os.getpid())
    keeper = Keeper(settings, message["owner"], int(message["parent"]), reports)
    keeper.heard(message)
    client = connect(settings, CONTROL_CONNECTIONS)
    leases = Leases(client, Keys(settings.key_prefix), Scripts(client), keeper.owner,
                    settings.lease_ttl_s)
    keeper.report({"ready": True})
    keeping = asyncio.create_task(keeper.keep(leases))
    listening = asyncio.create_task(listen(keeper, lines))
    await asyncio.wait([keeping, listening], return_when=asyncio.FIRST_COMPLETED)
    keeping.cancel()
    listening.cancel()
    with contextlib.suppress(RedisError, OSError, TimeoutError):
        await asyncio.wait_for(client.aclose(), keeper.renew_every_s)


def main() -> None:
    """The process's entry point: reports go out on a copy of stdout, and stdout itself
    is pointed at stderr, so that nothing else printed can garble them."""
    protocol_out = os.dup(1)
    os.dup2(2, 1)
    # A Ctrl-C reaches the whole process group: the coordinator hands its rooms over, and
    # its keeper renews until it has, then sees its stdin close.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    asyncio.run(serve(protocol_out))


if __name__ == "__main__":
    main()
