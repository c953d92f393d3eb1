"""Rooms just taken open their first turn before the rooms under way open their next."""

from __future__ import annotations

import asyncio
import time

from parley.coordinator.first_turns import FirstTurns
from parley.coordinator.lease import Leases
from parley.coordinator.outages import OutageClock
from parley.coordinator.outbox import Outbox
from parley.coordinator.room_io import RoomIO
from parley.coordinator.turn_loop import RoomRunner, TurnOptions
from parley.shared.scripts import Scripts
from parley.shared.store import RoomStore
from tests.support.local_worker import LocalWorkerTransport
from tests.support.polling import wait_until_async
from tests.support.rooms import rotating_scripts, scripted_spec


async def waiting(first_turns: FirstTurns, ticket: int) -> asyncio.Task[None]:
    """``before_turn`` of ``ticket`` as a task, run until it waits or is done."""
    task = asyncio.create_task(first_turns.before_turn(ticket))
    await asyncio.sleep(0)  # its first step: it registers its wait or returns
    return task


def test_a_first_turn_goes_at_once_and_a_later_one_waits_for_the_rooms_taken_before():
    async def check() -> None:
        first_turns = FirstTurns()
        under_way = first_turns.take()
        await first_turns.before_turn(under_way)  # its first turn: at once
        just_taken = first_turns.take()
        later_turn = await waiting(first_turns, under_way)
        assert not later_turn.done()
        await first_turns.before_turn(just_taken)
        await asyncio.wait_for(later_turn, 5)
        # Nobody still to start: no wait at all.
        assert (await waiting(first_turns, under_way)).done()

    asyncio.run(check())


def test_rooms_taken_after_a_wait_began_do_not_prolong_it():
    async def check() -> None:
        first_turns = FirstTurns()
        under_way = first_turns.take()
        first_turns.opened(under_way)
        before = first_turns.take()
        later_turn = await waiting(first_turns, under_way)
        after = first_turns.take()
        first_turns.opened(before)
        await asyncio.wait_for(later_turn, 5)
        # The room taken later still holds up a turn that asks after its take.
        assert not (await waiting(first_turns, under_way)).done()
        first_turns.opened(after)

    asyncio.run(check())


def test_a_room_that_stops_before_its_first_turn_holds_nobody_up():
    async def check() -> None:
        first_turns = FirstTurns()
        under_way = first_turns.take()
        first_turns.opened(under_way)
        stopping = first_turns.take()
        later_turn = await waiting(first_turns, under_way)
        first_turns.opened(stopping)  # its runner's finally: it went without a turn
        first_turns.opened(stopping)  # said twice, counted once
        await asyncio.wait_for(later_turn, 5)
        assert not first_turns.waiting and not first_turns.behind

    asyncio.run(check())


def test_a_room_slow_to_start_delays_the_others_no_longer_than_the_bound():
    async def check() -> float:
        first_turns = FirstTurns(most_wait_s=0.2)
        under_way = first_turns.take()
        first_turns.opened(under_way)
        first_turns.take()  # never opens a turn
        started = time.monotonic()
        await asyncio.wait_for(first_turns.before_turn(under_way), 5)
        return time.monotonic() - started

    assert asyncio.run(check()) >= 0.2


def test_a_room_under_way_lets_a_room_taken_meanwhile_open_its_first_turn_first(
        sync_redis, async_redis, keys):
    store = RoomStore(sync_redis, keys)
    for room in ("a", "b"):
        store.create_room(room, scripted_spec(rotating_scripts(2, 6), max_messages=6))
        store.post(room, "User", "go")
    scripts = Scripts(async_redis)
    leases = Leases(async_redis, keys, scripts, "c1", 60.0)
    opened: list[tuple[str, int]] = []
    b_may_start: list[asyncio.Event] = []  # made on the test's loop

    class OrderedIO(RoomIO):
        async def read_spec(self, room):
            if room == "b":
                await b_may_start[0].wait()
            return await super().read_spec(room)

        async def open_turn(self, lease, *args, **kwargs):
            turn = await super().open_turn(lease, *args, **kwargs)
            if turn is not None:
                opened.append((lease.room, turn.number))
            return turn

    async def serve() -> None:
        b_may_start.append(asyncio.Event())
        io = OrderedIO(async_redis, keys, scripts)
        first_turns = FirstTurns(most_wait_s=60)

        async def runner(room: str) -> None:
            lease = await leases.acquire(room)
            assert lease is not None
            await RoomRunner(lease, io, Outbox(LocalWorkerTransport(sync_redis, keys)),
                             TurnOptions("t", 8, 1000), OutageClock(), first_turns).run()

        a = asyncio.create_task(runner("a"))
        await wait_until_async(lambda: ("a", 2) in opened, 10, "room a under way")
        b = asyncio.create_task(runner("b"))
        await wait_until_async(lambda: first_turns.behind, 10, "room a to wait for room b")
        held_at = len(opened)
        b_may_start[0].set()
        await asyncio.wait_for(asyncio.gather(a, b), 30)
        assert opened[held_at] == ("b", 1)

    asyncio.run(serve())

    assert [turn for room, turn in opened if room == "a"] == [1, 2, 3, 4, 5]
    assert [turn for room, turn in opened if room == "b"] == [1, 2, 3, 4, 5]
