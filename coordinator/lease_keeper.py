"""The coordinator's side of its lease keeper: which rooms' leases it vouches for, and how
it stops work at once on any room whose lease it cannot vouch for (lost, or with less than
the margin left).

The renewals themselves run in a process of the keeper's own (``KeeperProcess``, the code
of that process in coordinator/keeper.py), so that nothing that stops the turn loop's
interpreter (a full garbage collection, a CPU-starved or blocked event loop) can make the
leases lapse. A coordinator given its Redis client (the tests on fakeredis) renews from its
own event loop instead (``InProcessKeeper``): a process of its own could not reach that
client.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import IO, Any

import orjson
import structlog
from redis.exceptions import RedisError

from parley.coordinator.lease import Lease, Leases
from parley.coordinator.outages import OutageClock
from parley.shared import metrics
from parley.shared.settings import Settings

log = structlog.get_logger("parley.coordinator")

# The rooms a coordinator serves: each room's lease and the task running its turn loop.
ServedRooms = dict[str, tuple[Lease, asyncio.Task[None]]]
# The coordinator signals its keeper this many times per renewal period: the keeper stops
# renewing after a third of the ttl without a signal, at least a renewal period.
BEATS_PER_RENEWAL = 4
# A keeper process that died is started again after this pause (not in a tight loop).
RESPAWN_PAUSE_S = 0.2
# How long a coordinator starting waits for its keeper to be ready to renew.
KEEPER_READY_S = 30.0
KEEPER_COMMAND = [sys.executable, "-m", "parley.coordinator.keeper"]


class LeaseKeeper:
    """Vouches for the leases of the rooms in ``rooms`` (the scheduler's table, read here;
    a room is dropped by cancelling its task, and its task takes it out of the table)."""

    def __init__(self, settings: Settings, owner: str, rooms: ServedRooms,
                 outages: OutageClock) -> None:
        self.settings = settings
        self.owner = owner
        self.rooms = rooms
        self.outages = outages
        self.renew_every_s = settings.lease_renew_every_s
        # Held while a renewal's confirmations are applied and while leases are looked at:
        # a look between the first and the last lease of a renewal of thousands (applied
        # by another thread) would find the rest short and drop them.
        self.vouching = threading.Lock()
        # Set by start(): the loop the rooms run on.
        self.loop: asyncio.AbstractEventLoop | None = None

    def start(self) -> None:
        """Keep the leases of the rooms running on the current event loop."""
        self.loop = asyncio.get_running_loop()

    async def ready(self) -> None:
        """Return once the keeper can renew (rooms taken before would lapse)."""

    def stop(self) -> None:
        """Stop renewing."""

    def hold(self, lease: Lease) -> None:
        """Renew ``lease`` from now on (again when its ``idling`` changed)."""

    def forget(self, lease: Lease) -> None:
        """Stop renewing ``lease``: its room is being let go."""

    async def changed(self, lease: Lease) -> None:
        """Renew ``lease`` as it is now (its ``idling`` changed). Going idle returns once
        no renewal that began before is in flight, or after a renewal period without word
        (a keeper being restarted): the room's due time is then left alone."""
        self.hold(lease)
        if lease.idling:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.settled(), self.renew_every_s)

    async def settled(self) -> None:
        """Return once every renewal in flight began after the latest ``hold``."""

    def on_rooms_loop(self, function: Callable[..., None], *args: Any) -> None:
        """Call ``function`` on the loop the rooms run on (at once when already there)."""
        try:
            here = asyncio.get_running_loop()
        except RuntimeError:
            here = None
        if self.loop is None or self.loop is here:
            function(*args)
        else:
            with contextlib.suppress(RuntimeError):  # the loop closed: nothing left to drop
                self.loop.call_soon_threadsafe(function, *args)

    def lapsing(self) -> tuple[list[Lease], float]:
        """The leases with less than their margin left, and the least time any has left
        (0 when none is lapsing)."""
        with self.vouching:
            lapsing = [lease for lease, _ in self.rooms.values() if lease.lapsing()]
            return lapsing, min((lease.seconds_left() for lease in lapsing), default=0.0)

    def drop_lapsing(self) -> None:
        """Stop work on rooms whose lease this coordinator can no longer vouch for."""
        lapsing, least_left_s = self.lapsing()
        if lapsing:
            log.warning("leases_lapsing", rooms=len(lapsing), held=len(self.rooms),
                        least_left_s=round(least_left_s, 3))
        self.drop_rooms(lapsing, "lease not renewed in time")

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


class InProcessKeeper(LeaseKeeper):
    """Renews from the rooms' own event loop with the coordinator's own client: the twin
    of the keeper process for a coordinator given its client (fakeredis in tests)."""

    def __init__(self, settings: Settings, owner: str, rooms: ServedRooms,
                 outages: OutageClock, leases: Leases) -> None:
        super().__init__(settings, owner, rooms, outages)
        self.leases = leases
        self.task: asyncio.Task[None] | None = None
        self.renewal: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Renew on the current event loop."""
        super().start()
        self.task = asyncio.create_task(self.keep_leases(self.leases), name="lease-keeper")

    def stop(self) -> None:
        """Stop renewing."""
        if self.task is not None:
            self.task.cancel()

    async def keep_leases(self, leases: Leases) -> None:
        """Renew every held lease each period, on a fixed schedule, and stop work at once
        on any room whose lease was lost or has less than the margin left.

        The lapse check never waits for a renewal: a renewal may reply late, and it still
        counts from when it was sent. One renewal is in flight at a time.
        """
        loop = asyncio.get_running_loop()
        next_tick = loop.time()
        try:
            while True:
                self.drop_lapsing()
                if self.renewal is None or self.renewal.done():
                    self.renewal = asyncio.create_task(self.renew_held(leases),
                                                       name="lease-renewal")
                next_tick = max(next_tick + self.renew_every_s, loop.time())
                await asyncio.sleep(next_tick - loop.time())
        finally:
            if self.renewal is not None:
                self.renewal.cancel()

    async def settled(self) -> None:
        """Return once the renewal in flight, which may have read a lease's ``idling``
        before it changed, has ended."""
        if self.renewal is not None and not self.renewal.done():
            await asyncio.wait([self.renewal])

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
        self.drop_rooms(lost, "lease lost")
        self.drop_lapsing()


class KeeperProcess(LeaseKeeper):
    """Starts and supervises the coordinator's keeper process, tells it which leases to
    renew and signals it that the coordinator lives, and applies what it reports.

    Two threads of the coordinator talk to it over its stdin and stdout, not the rooms'
    event loop: the coordinator's signals and its vouching go on while the loop is busy.
    The keeper counts each lease good until a ttl past the coordinator's last signal, so
    a coordinator stopped or wedged as a whole loses its rooms within one ttl.
    """

    def __init__(self, settings: Settings, owner: str, rooms: ServedRooms,
                 outages: OutageClock) -> None:
        super().__init__(settings, owner, rooms, outages)
        self.beat_every_s = self.renew_every_s / BEATS_PER_RENEWAL
        self.changes: queue.SimpleQueue[tuple[str, Lease] | tuple[str, int]] = queue.SimpleQueue()
        # The keeper's answers awaited, by report and the number of their ask: "settled"
        # (no renewal begun before the ask is in flight) for settled(), "confirmed" (a
        # renewal of every lease begun after it has ended) for a look at lapsing leases.
        # The rooms' loop alone touches these.
        self.asks = 0
        self.awaited: dict[str, dict[int, asyncio.Future[None]]] = {"settled": {}, "confirmed": {}}
        self.looking: asyncio.Task[None] | None = None
        self.stopping = threading.Event()
        # One writer at a time on the keeper's stdin: the signals' thread and a respawn.
        self.writing = threading.Lock()
        self.process: subprocess.Popen[bytes] | None = None
        # Set once the keeper process first said it can renew.
        self.renewing = threading.Event()
        # The latest signal a confirmed renewal counted from (its lease good for one ttl
        # past it): the keeper's reports say how long, so this is their ``until`` less ttl.
        self.confirmed_signal = 0.0

    @property
    def pid(self) -> int | None:
        """The keeper process's pid (None before it started)."""
        return None if self.process is None else self.process.pid

    def start(self) -> None:
        """Start the keeper process and the threads that talk to it."""
        super().start()
        self.spawn()
        threading.Thread(target=self.signal_forever, name="lease-keeper-signals",
                         daemon=True).start()
        threading.Thread(target=self.read_forever, name="lease-keeper-reports",
                         daemon=True).start()

    def spawn(self) -> None:
        """Start a keeper process and tell it every lease held now."""
        process = subprocess.Popen(KEEPER_COMMAND, stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE)
        hello = {"owner": self.owner, "parent": os.getpid(),
                 "settings": self.settings.model_dump(mode="json")}
        held = [lease for lease, _ in list(self.rooms.values())]
        with self.writing:
            self.process = process
            self.send({**hello, "hold": [holding(lease) for lease in held]})
        log.info("keeper_started", pid=process.pid, rooms=len(held))

    async def ready(self) -> None:
        """Return once the keeper process can renew (it has loaded and reached Redis), or
        after a while without it: a keeper that does not start is logged, and the rooms
        taken meanwhile are dropped as their leases lapse."""
        if not await asyncio.to_thread(self.renewing.wait, KEEPER_READY_S):
            log.error("keeper_not_ready", waited_s=KEEPER_READY_S)

    def stop(self) -> None:
        """Stop the keeper process: its stdin closes, and it exits."""
        self.stopping.set()
        process = self.process
        if process is None:
            return
        with self.writing, contextlib.suppress(OSError):
            cast_io(process.stdin).close()
        try:
            process.wait(self.renew_every_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def hold(self, lease: Lease) -> None:
        """Renew ``lease`` from now on (again when its ``idling`` changed)."""
        self.changes.put(("hold", lease))

    def forget(self, lease: Lease) -> None:
        """Stop renewing ``lease``: its room is being let go."""
        self.changes.put(("drop", lease))

    async def settled(self) -> None:
        """Ask the keeper to say once every renewal it has in flight began after the
        changes sent before the ask, and wait for its word."""
        await self.ask("settle", "settled")

    async def confirmed(self) -> None:
        """Ask the keeper to renew every lease now, and wait until that renewal's
        confirmations are applied."""
        await self.ask("confirm", "confirmed")

    async def ask(self, change: str, answer: str) -> None:
        """Send the keeper an ask (``change``, numbered) and wait for its ``answer``."""
        self.asks += 1
        ask = self.asks
        awaited = self.awaited[answer]
        awaited[ask] = asyncio.get_running_loop().create_future()
        self.changes.put((change, ask))
        try:
            await awaited[ask]
        finally:
            del awaited[ask]

    def answered(self, answer: str, up_to: int) -> None:
        """The keeper's ``answer`` to every ask of its kind up to ``up_to``."""
        for ask, waiting in self.awaited[answer].items():
            if ask <= up_to and not waiting.done():
                waiting.set_result(None)

    def look(self) -> None:
        """Look for lapsing leases (one look at a time)."""
        if self.looking is None or self.looking.done():
            self.looking = asyncio.create_task(self.look_for_lapsing(), name="lapse-look")

    async def look_for_lapsing(self) -> None:
        """Drop the rooms whose leases are lapsing, judged by a renewal begun after the
        look: leases found short may have a renewal in flight, or confirmations not yet
        applied (the whole process back from a pause), and giving rooms up on that would
        hand thousands over at once. It waits at most until the shortest lease has half a
        renewal period left, what a send needs (HeldTransport), so a keeper that does not
        answer still has the rooms dropped in time."""
        lapsing, least_left_s = self.lapsing()
        if not lapsing:
            return
        patience_s = least_left_s - self.renew_every_s / 2
        if patience_s > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.confirmed(), patience_s)
        self.drop_lapsing()

    def signal_forever(self) -> None:
        """Send the changes as they come and a signal every beat, and look for lapsing
        leases when ``LapseLooks`` says, until stopped."""
        looks = LapseLooks(self.renew_every_s, self.beat_every_s)
        while not self.stopping.is_set():
            message: dict[str, Any] = {"hold": [], "drop": []}
            with contextlib.suppress(queue.Empty):
                change, what = self.changes.get(timeout=self.beat_every_s)
                while True:
                    if isinstance(what, int):  # an ask: after the changes before it
                        message[change] = what
                    else:
                        message[change].append(holding(what) if change == "hold"
                                               else [what.room, what.epoch])
                    change, what = self.changes.get_nowait()
            with self.writing:
                signalled = self.send(message)
            if looks.after_signal(signalled, self.confirmed_signal):
                self.on_rooms_loop(self.look)

    def send(self, message: dict[str, Any]) -> float:
        """Write one line to the keeper (with the writing lock held); the signal's time.
        A keeper that died is started again by the reports' thread."""
        at = time.monotonic()
        if self.process is None:
            return at
        try:
            stdin = cast_io(self.process.stdin)
            stdin.write(orjson.dumps({"at": at, **message}) + b"\n")
            stdin.flush()
        except (OSError, ValueError):  # a closed pipe: the keeper is gone
            pass
        return at

    def read_forever(self) -> None:
        """Apply the keeper's reports; start the keeper again whenever it dies."""
        while True:
            process = self.process
            assert process is not None
            for line in cast_io(process.stdout):
                self.apply(orjson.loads(line))
            if self.stopping.is_set():
                return
            log.error("keeper_exited", pid=process.pid, code=process.wait())
            while not self.stopping.is_set():
                self.stopping.wait(RESPAWN_PAUSE_S)
                try:
                    self.spawn()
                    break
                except OSError as error:
                    log.error("keeper_not_started", error=str(error))

    def apply(self, report: dict[str, Any]) -> None:
        """Vouch for each renewed lease until the keeper says; drop the rooms whose lease
        was lost; note an unreachable Redis for the turns' outage graces."""
        until = report.get("until", 0.0)
        renewed = 0
        with self.vouching:
            for room, epoch in report.get("renewed", ()):
                lease = self.lease_of(room, epoch)
                if lease is not None:
                    lease.valid_until = until  # the renewal set the expiry, maybe sooner
                    renewed += 1
        if renewed:
            metrics.LEASE_RENEWALS.inc(renewed)
        if report.get("renewed"):
            self.confirmed_signal = max(self.confirmed_signal,
                                        until - self.settings.lease_ttl_s)
        lost = [lease for room, epoch in report.get("lost", ())
                if (lease := self.lease_of(room, epoch)) is not None]
        if lost:
            self.on_rooms_loop(self.drop_rooms, lost, "lease lost")
        if report.get("unreachable"):
            self.outages.failed()
        for answer in ("settled", "confirmed"):
            if answer in report:
                self.on_rooms_loop(self.answered, answer, int(report[answer]))
        if report.get("ready"):
            self.renewing.set()

    def lease_of(self, room: str, epoch: int) -> Lease | None:
        """The lease held on ``room`` under ``epoch``, if it still is."""
        lease = self.rooms.get(room, (None,))[0]
        return lease if lease is not None and lease.epoch == epoch else None


class LapseLooks:
    """When the coordinator looks for lapsing leases: once per renewal period, after its
    keeper confirmed a renewal counted from a signal sent since the look came due (or, back
    from a pause, since the first signal after it), and after a renewal period's beats
    without one all the same, so that a keeper renewing nothing still has its rooms dropped
    as their leases lapse.

    Back from a pause of the whole process (a full collection holds every thread), the
    leases look short by the pause until the keeper's next renewal, which follows at once:
    looking before it would drop rooms whose leases the keeper kept.
    """

    def __init__(self, period_s: float, beat_s: float) -> None:
        self.period_s = period_s
        self.beat_s = beat_s
        self.next_look = self.previous = time.monotonic()
        self.due_since: float | None = None  # the signal the look waits to see confirmed
        self.beats_waited = 0

    def after_signal(self, signalled: float, confirmed: float) -> bool:
        """Whether to look now, after the signal sent at ``signalled``, the keeper's
        renewals confirmed up to the signal at ``confirmed``."""
        paused = signalled - self.previous > 2 * self.beat_s
        self.previous = signalled
        if self.due_since is None:
            if signalled < self.next_look:
                return False
            self.due_since, self.beats_waited = signalled, 0
        elif paused:
            self.due_since, self.beats_waited = signalled, 0
        self.beats_waited += 1
        # A millisecond's slack: ``until`` less ttl is the signal's time, to rounding.
        if confirmed < self.due_since - 0.001 and self.beats_waited <= BEATS_PER_RENEWAL:
            return False
        self.due_since = None
        self.next_look = time.monotonic() + self.period_s
        return True


def holding(lease: Lease) -> list[Any]:
    """A held lease as the keeper is told of it: room, epoch, idling."""
    return [lease.room, lease.epoch, lease.idling]


def cast_io(stream: IO[bytes] | None) -> IO[bytes]:
    """A pipe of the keeper process (always there: it is started with both)."""
    assert stream is not None
    return stream
