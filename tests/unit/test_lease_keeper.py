"""The coordinator stops work on a room before its lease can run out; on fakeredis."""

from __future__ import annotations

import asyncio
import os
import time
from typing import cast

import fakeredis
import orjson
import pytest
import structlog
from redis.crc import key_slot

from parley.coordinator.keeper import Keeper
from parley.coordinator.lease import CLUSTER_SCRIPTS_AT_ONCE, RENEW_BATCH, Lease, LeaseLost, Leases
from parley.coordinator.lease_keeper import InProcessKeeper, KeeperProcess, LapseLooks
from parley.coordinator.outages import OutageClock
from parley.coordinator.outbox import Outbox
from parley.coordinator.service import Coordinator, scan_share
from parley.coordinator.transport import HeldTransport, InMemoryTransport
from parley.shared.keys import Keys
from parley.shared.models import AnswerStatus, StopReason
from parley.shared.scripts import Scripts
from parley.shared.settings import Settings
from tests.support.local_worker import LocalWorkerTransport
from tests.support.polling import wait_until_async
from tests.support.rooms import rotating_scripts, scripted_spec

ROOM = "room-1"


def lease_with(seconds_left: float, margin_s: float = 1.0) -> Lease:
    return Lease(ROOM, "c1", 1, time.monotonic() + seconds_left, margin_s)


def room_of(lease: Lease) -> str:
    return lease.room


def test_a_lease_with_less_than_its_margin_left_is_no_longer_held():
    lease_with(5.0).ensure_held()
    with pytest.raises(LeaseLost):
        lease_with(0.5).ensure_held()


def test_renewals_go_in_batches_of_one_slot_each_on_a_cluster(server):
    client = fakeredis.FakeAsyncRedis(server=server)
    leases = Leases(client, Keys("t"), Scripts(client), "c1", 5.0)
    held = [Lease(f"room-{i}", "c1", 1) for i in range(RENEW_BATCH + 5)]
    assert [len(batch) for batch in leases.batches(held, room_of)] == [RENEW_BATCH, 5]
    leases.cluster = True
    slots = [{leases.keys.lease(lease.room) for lease in batch}
             for batch in leases.batches(held, room_of)]
    assert all(len({key_slot(key.encode()) for key in keys}) == 1 for keys in slots)
    assert sum(map(len, slots)) == len(held)


def test_one_batched_renewal_renews_the_held_leases_and_reports_the_lost(server):
    async def renew() -> list[bool]:
        client = fakeredis.FakeAsyncRedis(server=server)
        leases = Leases(client, Keys("t"), Scripts(client), "c1", 5.0)
        held = [Lease(f"room-{i}", "c1", 1) for i in range(3)]
        for lease in held[:2]:
            await client.set(leases.keys.lease(lease.room), lease.token, px=100)
        renewed = await leases.renew(held)
        assert all(lease.seconds_left() > 4 for lease in held[:2])
        assert held[2].seconds_left() < 0
        return renewed

    assert asyncio.run(renew()) == [True, True, False]


def test_bid_requests_are_sent_while_a_third_of_the_lease_margin_is_left():
    sent = InMemoryTransport()
    with pytest.raises(LeaseLost):
        asyncio.run(HeldTransport(Outbox(sent), lease_with(0.3)).send([("q", object())]))
    assert sent.sent == []
    # Under its margin of 1 s, as after a pause its keeper covered: sent all the same.
    asyncio.run(HeldTransport(Outbox(sent), lease_with(0.6)).send([("q", object())]))
    assert len(sent.sent) == 1


def test_settings_refuse_a_renewal_period_that_leaves_no_second_chance():
    assert Settings(lease_ttl_s=6).lease_renew_every_s == 2
    assert Settings(lease_ttl_s=6, lease_renew_s=1).lease_renew_every_s == 1
    with pytest.raises(ValueError, match="lease_renew_s"):
        Settings(lease_ttl_s=6, lease_renew_s=3)


def test_settings_refuse_a_key_prefix_with_a_hash_tag():
    """renew.lua finds each room as its lease key's hash tag, the first {...} of the key."""
    with pytest.raises(ValueError, match="key_prefix"):
        Settings(key_prefix="team{a}")


def serving(server, store, ttl_s: float, transport=None) -> Coordinator:
    """A coordinator on fakeredis whose room waits for bids that never come."""
    store.create_room(ROOM, scripted_spec(rotating_scripts(2, 3), bid_timeout_s=60))
    store.post(ROOM, "User", "go")
    return Coordinator(Settings(key_prefix="t", lease_ttl_s=ttl_s, scan_interval_s=0.05),
                       transport or InMemoryTransport(), "c1",
                       client=fakeredis.FakeAsyncRedis(server=server))


async def waiting_for_bids(coordinator: Coordinator) -> None:
    """Until the coordinator's room has sent its turn's calls (it then waits for bids)."""
    sent = cast(InMemoryTransport, coordinator.transport).sent
    await wait_until_async(lambda: sent, 5, "the room to wait for bids")


def test_a_room_whose_renewals_fail_is_dropped_before_its_lease_expires(server, store):
    coordinator = serving(server, store, ttl_s=1.5)

    async def lose_redis() -> None:
        await coordinator.scan()
        lease, task = coordinator.rooms[ROOM]
        acquired_until = lease.valid_until
        keeper = asyncio.create_task(coordinator.keeper.keep_leases(coordinator.leases))
        await wait_until_async(lambda: lease.valid_until > acquired_until, 5,
                               "one renewal to go through")
        server.connected = False
        await asyncio.wait_for(asyncio.gather(task, return_exceptions=True), 1.5)
        keeper.cancel()

    with structlog.testing.capture_logs() as logs:
        asyncio.run(lose_redis())

    # Its work stopped within the lease's ttl (wait_for above). Mostly the keeper's renewal
    # fails and the room is dropped once its lease is no longer vouched for; on a loaded
    # machine the room's own next Redis call may fail first, which stops it as well.
    dropped = [e for e in logs if e["event"] == "room_dropped"]
    stopped = [e for e in logs if e["event"] == "room_redis_error"]
    assert [e["reason"] for e in dropped] == ["lease not renewed in time"] or (
        stopped and not dropped), [e["event"] for e in logs]
    assert all(e["lease_left_s"] > 0 for e in dropped), "work went on past the lease's expiry"
    assert ROOM not in coordinator.rooms


def test_a_room_whose_lease_was_taken_is_dropped_at_the_next_renewal(server, store):
    # A ttl long enough that the lease is still vouched for when the keeper starts, even
    # on a loaded machine: the renewal, not the vouch's expiry, must find the theft.
    coordinator = serving(server, store, ttl_s=3)

    async def steal() -> None:
        await coordinator.scan()
        _, task = coordinator.rooms[ROOM]
        await waiting_for_bids(coordinator)
        store.redis.set(Keys("t").lease(ROOM), "thief:9")
        keeper = asyncio.create_task(coordinator.keeper.keep_leases(coordinator.leases))
        await asyncio.wait_for(asyncio.gather(task, return_exceptions=True), 5)
        keeper.cancel()

    with structlog.testing.capture_logs() as logs:
        asyncio.run(steal())

    assert [e["reason"] for e in logs if e["event"] == "room_dropped"] == ["lease lost"]
    assert store.lease_holder(ROOM) == "thief:9"


def test_shutdown_releases_the_lease_and_makes_the_room_due_now(server, store):
    coordinator = serving(server, store, ttl_s=5)

    async def serve_then_stop() -> None:
        await coordinator.scan()
        await waiting_for_bids(coordinator)
        await coordinator.shutdown()

    asyncio.run(serve_then_stop())

    assert store.lease_holder(ROOM) is None
    assert store.redis.zscore(Keys("t").runnable, ROOM) <= time.time() * 1000
    assert store.redis.zscore(Keys("t").coordinators, "c1") is None


class LosesTheFirstTask(LocalWorkerTransport):
    """A worker that dies with the first task of each turn (its bids never come)."""

    def __init__(self, client, keys) -> None:
        super().__init__(client, keys)
        self.asked: list[int] = []

    def send(self, requests) -> None:
        answered = [(queue, request) for queue, request in requests if request.turn in self.asked]
        self.asked.extend(request.turn for _, request in requests)
        super().send(answered)


def test_a_turn_nobody_answered_is_asked_once_more_before_it_counts_as_no_bids(server, store):
    store.create_room(ROOM, scripted_spec(rotating_scripts(2, 2), bid_timeout_s=0.3))
    store.post(ROOM, "User", "go")
    transport = LosesTheFirstTask(store.redis, Keys("t"))
    coordinator = Coordinator(Settings(key_prefix="t"), transport, "c1",
                              client=fakeredis.FakeAsyncRedis(server=server))

    async def serve() -> None:
        await coordinator.scan()
        _, task = coordinator.rooms[ROOM]
        await asyncio.wait_for(task, 5)

    asyncio.run(serve())

    turns = store.read_turns(ROOM)
    assert [t.winner for t in turns] == ["agent1", "agent0", None]
    assert all(b.status is AnswerStatus.OK for t in turns for b in t.bids)
    assert turns[-1].stop_reason is StopReason.LULL
    assert transport.asked == [1, 1, 2, 2, 3, 3]


class Reports:
    """The keeper process's report pipe, kept in memory."""

    def __init__(self) -> None:
        self.lines: list[dict] = []

    def is_closing(self) -> bool:
        return False

    def write(self, data: bytes) -> None:
        self.lines.append(orjson.loads(data))


def keeper_of(server, ttl_s: float = 3.0, renew_s: float = 0.0
              ) -> tuple[Keeper, Leases, Reports]:
    client = fakeredis.FakeAsyncRedis(server=server)
    reports = Reports()
    settings = Settings(key_prefix="t", lease_ttl_s=ttl_s, lease_renew_s=renew_s)
    keeper = Keeper(settings, "c1", os.getppid(), reports)  # type: ignore[arg-type]
    return keeper, Leases(client, Keys("t"), Scripts(client), "c1", ttl_s), reports


def test_the_keeper_makes_a_lease_good_until_one_ttl_past_the_coordinators_last_signal(server):
    keeper, leases, reports = keeper_of(server)
    signalled = time.monotonic() - 0.5
    keeper.heard({"at": signalled, "hold": [[ROOM, 1, False], ["gone", 1, False]]})

    async def renew() -> int:
        await leases.redis.set(leases.keys.lease(ROOM), "c1:1", px=100)
        await keeper.renew_held(leases, list(keeper.held.values()))
        return await leases.redis.pttl(leases.keys.lease(ROOM))

    left_ms = asyncio.run(renew())

    assert 2300 < left_ms <= 2500
    renewed, lost = reports.lines
    assert renewed["renewed"] == [[ROOM, 1]]
    assert renewed["until"] == pytest.approx(signalled + 3.0, abs=0.05)
    assert lost == {"lost": [["gone", 1]]}
    assert list(keeper.held) == [ROOM]


def test_a_keeper_renews_a_freshly_held_lease_at_once_not_at_its_next_tick(server):
    """A lease taken by a busy coordinator may have little more than its margin left when
    the keeper hears of it: waiting a renewal period would let the coordinator drop it."""
    keeper, leases, reports = keeper_of(server, ttl_s=60.0, renew_s=20.0)

    async def hold_while_keeping() -> list[dict]:
        await leases.redis.set(leases.keys.lease(ROOM), "c1:1", px=5000)
        keeper.heard({"at": time.monotonic(), "hold": []})
        keeping = asyncio.create_task(keeper.keep(leases))
        await asyncio.sleep(0)  # its first tick renews nothing: nothing is held yet
        keeper.heard({"at": time.monotonic(), "hold": [[ROOM, 1, False]]})
        await wait_until_async(lambda: reports.lines, 5.0, "the fresh lease renewed")
        keeping.cancel()
        return reports.lines

    (renewed,) = asyncio.run(hold_while_keeping())
    assert renewed["renewed"] == [[ROOM, 1]]
    assert renewed["until"] > time.monotonic() + 50


def test_a_keeper_renews_nothing_once_its_coordinator_was_silent_for_a_third_of_the_ttl(server):
    keeper, leases, reports = keeper_of(server)
    keeper.heard({"at": time.monotonic() - 1.1, "hold": [[ROOM, 1, False]]})

    async def keep_a_while() -> int:
        await leases.redis.set(leases.keys.lease(ROOM), "c1:1", px=60_000)
        # Silent: the keeper waits to hear from its coordinator, renewing nothing.
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(keeper.keep(leases), 0.2)
        return await leases.redis.pttl(leases.keys.lease(ROOM))

    assert asyncio.run(keep_a_while()) > 59_000
    assert reports.lines == []


def test_a_keeper_forgets_a_dropped_lease_only_under_its_epoch(server):
    keeper, _, _ = keeper_of(server)
    keeper.heard({"at": time.monotonic(), "hold": [[ROOM, 2, True]]})
    keeper.heard({"at": time.monotonic(), "drop": [[ROOM, 1]]})
    assert keeper.held[ROOM].epoch == 2 and keeper.held[ROOM].idling
    keeper.heard({"at": time.monotonic(), "drop": [[ROOM, 2]]})
    assert keeper.held == {}


def test_a_scan_share_splits_the_due_rooms_among_live_coordinators_within_bounds():
    assert scan_share(due=10_000, free=10_000, live=1, capacity=10_000) == 10_000
    assert scan_share(due=10_000, free=10_000, live=3, capacity=10_000) == 3334
    assert scan_share(due=50, free=10_000, live=4, capacity=10_000) == 1000  # a tenth at least
    assert scan_share(due=10_000, free=120, live=1, capacity=10_000) == 120
    assert scan_share(due=0, free=5, live=0, capacity=5) == 1


def test_a_scan_takes_every_room_no_live_coordinator_took_for_several_scans():
    # A dead coordinator counts as live for two ttls: its rooms, overdue, are not split.
    assert scan_share(due=1000, free=1000, live=2, capacity=1000, overdue=1000) == 1000
    assert scan_share(due=1000, free=1000, live=2, capacity=1000, overdue=400) == 700
    assert scan_share(due=1000, free=300, live=2, capacity=1000, overdue=1000) == 300


def test_a_standby_takes_in_one_scan_every_room_left_overdue_by_a_dead_coordinator(server, store):
    """A coordinator killed a moment ago still counts as live: a scan takes half of the
    rooms just due, and all of those that every live coordinator's scans have left."""
    rooms = [f"room-{i}" for i in range(40)]
    for room in rooms:
        store.create_room(room, scripted_spec(rotating_scripts(2, 3), bid_timeout_s=60))
        store.post(room, "User", "go")
    settings = Settings(key_prefix="t", coordinator_capacity=100, scan_interval_s=0.2)

    async def one_scan(due_s_ago: float) -> int:
        client = fakeredis.FakeAsyncRedis(server=server)
        coordinator = Coordinator(settings, InMemoryTransport(), "standby", client=client)
        keys = coordinator.keys
        due_ms = (time.time() - due_s_ago) * 1000
        await client.zadd(keys.runnable, {room: due_ms for room in rooms})
        await client.zadd(keys.coordinators, {"killed": time.time() * 1000})
        taken: list[Lease] = []
        coordinator.start_room = taken.append  # type: ignore[method-assign]
        await coordinator.scan()
        await client.delete(*(keys.lease(lease.room) for lease in taken))
        return len(taken)

    assert asyncio.run(one_scan(due_s_ago=0.0)) == 20  # its share of two
    assert asyncio.run(one_scan(due_s_ago=1.0)) == 40  # overdue: five scan intervals


def test_a_cluster_runs_a_few_slots_scripts_at_a_time(server):
    """A cluster client refuses a command past its pool per node instead of waiting."""
    client = fakeredis.FakeAsyncRedis(server=server)
    leases = Leases(client, Keys("t"), Scripts(client), "c1", 5.0)
    leases.cluster = True
    running = most = 0

    async def script(keys: list[str], args: list[object]) -> int:
        nonlocal running, most
        running += 1
        most = max(most, running)
        await asyncio.sleep(0.001)
        running -= 1
        return len(keys)

    calls = [([f"k{i}"], []) for i in range(50)]
    replies = asyncio.run(leases.run_batches(script, calls))

    assert replies == [1] * 50
    assert most == CLUSTER_SCRIPTS_AT_ONCE


def test_a_look_for_lapsing_leases_waits_for_a_renewal_counted_from_after_a_pause():
    looks = LapseLooks(period_s=1.0, beat_s=0.25)
    start = time.monotonic()
    assert looks.after_signal(start, confirmed=0.0) is False  # due: waits for a renewal
    # Back from a 2 s pause: what the keeper confirmed before it does not count.
    assert looks.after_signal(start + 2.0, confirmed=start) is False
    assert looks.after_signal(start + 2.25, confirmed=start + 2.0) is True


def test_a_look_goes_ahead_after_a_renewal_periods_beats_without_a_renewal():
    looks = LapseLooks(period_s=1.0, beat_s=0.25)
    start = time.monotonic()
    answers = [looks.after_signal(start + beat * 0.25, confirmed=0.0) for beat in range(5)]
    assert answers == [False, False, False, False, True]


def test_a_keeper_settles_an_ask_once_the_renewals_begun_before_it_have_ended(server):
    """A room going idle reads its due time once its keeper settled: a renewal begun before
    the keeper heard of the idling, still in flight, would push the due time past that read,
    and the room would stay runnable (a failed room taken again)."""
    keeper, leases, reports = keeper_of(server)
    runnable = leases.keys.runnable

    async def idle_during_a_renewal() -> tuple[float, float]:
        released = asyncio.Event()
        renew = leases.renew

        async def held_back(held: list[Lease], good_for_s: float | None = None) -> list[bool]:
            await released.wait()
            return await renew(held, good_for_s)

        leases.renew = held_back  # type: ignore[method-assign]
        await leases.redis.set(leases.keys.lease(ROOM), "c1:1", px=60_000)
        keeper.heard({"at": time.monotonic(), "hold": [[ROOM, 1, False]]})
        keeper.renewing(leases, list(keeper.held.values()))
        keeper.heard({"at": time.monotonic(), "hold": [[ROOM, 1, True]], "settle": 7})
        for _ in range(5):  # the settling task runs up to its wait for the renewal
            await asyncio.sleep(0)
        assert reports.lines == []
        released.set()
        await wait_until_async(lambda: {"settled": 7} in reports.lines, 5.0, "settled")
        pushed = await leases.redis.zscore(runnable, ROOM)
        await keeper.renew_held(leases, list(keeper.held.values()))  # begun after the ask
        return pushed, await leases.redis.zscore(runnable, ROOM)

    pushed, after = asyncio.run(idle_during_a_renewal())
    assert "renewed" in reports.lines[0] and reports.lines[1] == {"settled": 7}
    assert after == pushed  # the renewal after the ask left the due time alone


def test_a_keeper_confirms_an_ask_after_a_renewal_of_every_lease_begun_after_it(server):
    """A look for lapsing leases judges by a renewal begun after it: one in flight when the
    ask came does not answer it, and the renewal's report comes before the answer."""
    keeper, leases, reports = keeper_of(server, ttl_s=60.0, renew_s=20.0)

    async def confirm_during_a_renewal() -> list[dict]:
        released = asyncio.Event()
        renew = leases.renew
        renewals = 0

        async def first_held_back(held: list[Lease], good_for_s: float | None = None) -> list[bool]:
            nonlocal renewals
            renewals += 1
            if renewals == 1:
                await released.wait()
            return await renew(held, good_for_s)

        leases.renew = first_held_back  # type: ignore[method-assign]
        await leases.redis.set(leases.keys.lease(ROOM), "c1:1", px=60_000)
        keeper.heard({"at": time.monotonic(), "hold": [[ROOM, 1, False]]})
        keeping = asyncio.create_task(keeper.keep(leases))
        await wait_until_async(lambda: renewals == 1, 5.0, "the first renewal")
        keeper.heard({"at": time.monotonic(), "confirm": 3})
        released.set()
        await wait_until_async(lambda: {"confirmed": 3} in reports.lines, 5.0, "confirmed")
        keeping.cancel()
        assert renewals == 2  # the next tick is 20 s away: the ask started this one
        return reports.lines

    first, second, answer = asyncio.run(confirm_during_a_renewal())
    assert "renewed" in first and "renewed" in second and answer == {"confirmed": 3}


def lapsing_rooms(keeper: KeeperProcess, seconds_left: float) -> tuple[Lease, asyncio.Task]:
    """One room served with ``seconds_left`` on its lease (under its margin of 1.5 s)."""
    lease = Lease(ROOM, "c1", 1, time.monotonic() + seconds_left, margin_s=1.5)
    task = asyncio.create_task(asyncio.Event().wait())
    keeper.rooms[ROOM] = (lease, task)
    return lease, task


def test_a_look_keeps_a_lease_found_short_that_the_renewal_it_asked_for_confirms():
    """Back from a pause of the whole process, a look may run before the reports the
    keeper wrote meanwhile are applied: it asks for a renewal first, and judges by it."""
    keeper = KeeperProcess(Settings(lease_ttl_s=3.0), "c1", {}, OutageClock())

    async def look() -> tuple[bool, str]:
        keeper.loop = asyncio.get_running_loop()
        lease, task = lapsing_rooms(keeper, seconds_left=1.2)
        looking = asyncio.create_task(keeper.look_for_lapsing())
        change, ask = await asyncio.to_thread(keeper.changes.get, timeout=5.0)
        keeper.apply({"renewed": [[ROOM, 1]], "until": time.monotonic() + 3.0})
        keeper.apply({"confirmed": ask})
        await looking
        kept = task.cancelling() == 0 and lease.seconds_left() > 2.5
        task.cancel()
        return kept, change

    kept, change = asyncio.run(look())
    assert (kept, change) == (True, "confirm")


def test_a_look_whose_keeper_does_not_answer_drops_the_room_with_half_a_period_left():
    keeper = KeeperProcess(Settings(lease_ttl_s=3.0), "c1", {}, OutageClock())

    async def look() -> tuple[bool, float]:
        keeper.loop = asyncio.get_running_loop()
        lease, task = lapsing_rooms(keeper, seconds_left=0.9)
        await keeper.look_for_lapsing()
        return task.cancelling() == 1, lease.seconds_left()

    dropped, left_s = asyncio.run(look())
    assert dropped and 0.4 < left_s <= 0.5 + 0.05  # waited until half a period (0.5 s) was left


def test_the_in_process_keeper_settles_once_its_renewal_in_flight_has_ended(server, store):
    coordinator = serving(server, store, ttl_s=3.0)
    keeper = coordinator.keeper
    assert isinstance(keeper, InProcessKeeper)

    async def settle_during_a_renewal() -> list[str]:
        released = asyncio.Event()
        order: list[str] = []

        async def renewal() -> None:
            await released.wait()
            order.append("renewal ended")

        keeper.renewal = asyncio.create_task(renewal())
        settling = asyncio.create_task(keeper.settled())
        for _ in range(5):
            await asyncio.sleep(0)
        order.append("settled" if settling.done() else "waiting")
        released.set()
        await settling
        order.append("settled")
        return order

    assert asyncio.run(settle_during_a_renewal()) == ["waiting", "renewal ended", "settled"]


def test_a_keeper_renews_every_lease_at_once_when_its_coordinator_is_back_from_a_pause(server):
    """After a pause its coordinator looks for lapsing leases once a renewal counted from a
    signal sent since is confirmed, and waits a renewal period at most: the keeper's next
    tick could come later than that."""
    keeper, leases, reports = keeper_of(server, ttl_s=60.0, renew_s=20.0)

    async def pause_while_keeping() -> list[dict]:
        await leases.redis.set(leases.keys.lease(ROOM), "c1:1", px=60_000)
        signalled = time.monotonic()
        keeper.heard({"at": signalled - 15.0, "hold": [[ROOM, 1, False]]})
        keeping = asyncio.create_task(keeper.keep(leases))
        await wait_until_async(lambda: reports.lines, 5.0, "the first renewal")
        keeper.heard({"at": signalled - 12.0})  # a beat: nothing renewed before the tick
        keeper.heard({"at": signalled})  # 12 s later: back from a pause
        await wait_until_async(lambda: len(reports.lines) == 2, 5.0, "a renewal at once")
        keeping.cancel()
        return reports.lines

    first, again = asyncio.run(pause_while_keeping())
    assert again["until"] == pytest.approx(first["until"] + 15.0, abs=0.01)


def test_a_keeper_renews_sooner_while_its_round_trips_are_long(server):
    """Each lease's confirmation comes within a period of its renewal's signal: a round
    trip of a whole second at a 1.67 s period would otherwise leave it under the margin."""
    keeper, _, _ = keeper_of(server, ttl_s=6.0)
    assert keeper.renewal_interval() == 2.0
    keeper.round_trip_s = 0.5
    assert keeper.renewal_interval() == pytest.approx(1.5)
    keeper.round_trip_s = 1.8
    assert keeper.renewal_interval() == 1.0  # half a period at least
