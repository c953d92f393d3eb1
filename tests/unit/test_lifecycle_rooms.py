"""Pause, resume, cancel, delete and idle expiry against the coordinator's turn loop, on
fakeredis with an in-process worker twin."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import fakeredis
import pytest
import structlog

from parley.coordinator.lease import LeaseLost, Leases
from parley.coordinator.retention import SWEEP_BATCH, IdleRooms, sweep_period_s
from parley.coordinator.room_io import RoomIO
from parley.coordinator.service import Coordinator
from parley.shared.models import Answer, CallRequest, StopReason
from parley.shared.scripts import Scripts
from parley.shared.settings import Settings
from parley.shared.store import RoomStore, now_ms
from tests.support.fake_turns import serve_once
from tests.support.local_worker import LocalWorkerTransport
from tests.support.rooms import rotating_scripts, scripted_spec

ROOM = "room-1"
# agent1, agent2, agent0, agent1 speak, then a lull: the run of an undisturbed room.
UNDISTURBED = ["User", "agent1", "agent2", "agent0", "agent1"]


@pytest.fixture
def store(sync_redis, keys) -> RoomStore:
    store = RoomStore(sync_redis, keys)
    store.create_room(ROOM, scripted_spec(rotating_scripts(3, 4)))
    return store


class HookedTransport(LocalWorkerTransport):
    """Calls ``hook`` as the calls of turn ``on_turn`` go out, before any answer is
    written (``answer_first``: after they are written)."""

    def __init__(self, client, keys, hook: Callable[[], None], on_turn: int = 2,
                 answer_first: bool = False) -> None:
        super().__init__(client, keys)
        self.hook, self.on_turn, self.answer_first = hook, on_turn, answer_first

    def send(self, requests: list[tuple[str, CallRequest]]) -> None:
        """Run the hook at the chosen turn, around answering as the workers would."""
        hooked = any(request.turn == self.on_turn for _, request in requests)
        if hooked and not self.answer_first:
            self.hook()
        super().send(requests)
        if hooked and self.answer_first:
            self.hook()


def senders(store: RoomStore) -> list[str]:
    return [m.sender for m in store.read_messages(ROOM)]


# --- pause and resume


def test_a_room_paused_mid_turn_finishes_that_turn_then_starts_no_other(
        store, sync_redis, async_redis, keys):
    store.post(ROOM, "User", "go")
    transport = HookedTransport(sync_redis, keys, lambda: store.pause(ROOM), on_turn=2)

    with structlog.testing.capture_logs() as logs:
        asyncio.run(serve_once(async_redis, keys, transport))

    assert senders(store) == ["User", "agent1", "agent2"]
    state = store.read_state(ROOM)
    assert (state.status, state.paused, state.turn, state.turn_open) == ("running", True, 2, False)
    assert sync_redis.zscore(keys.runnable, ROOM) is None
    assert "room_paused" in [entry["event"] for entry in logs]


def test_resume_picks_the_run_up_where_it_was(store, sync_redis, async_redis, keys):
    store.post(ROOM, "User", "go")
    transport = HookedTransport(sync_redis, keys, lambda: store.pause(ROOM), on_turn=2)
    asyncio.run(serve_once(async_redis, keys, transport))

    assert store.resume(ROOM) is True
    assert sync_redis.zscore(keys.runnable, ROOM) is not None
    asyncio.run(serve_once(async_redis, keys, transport, owner="c2"))

    assert senders(store) == UNDISTURBED
    state = store.read_state(ROOM)
    assert (state.status, state.stop_reason, state.run) == ("idle", StopReason.LULL, 1)


def test_posts_into_a_paused_room_wait_and_resume_runs_them(store, sync_redis, async_redis, keys):
    store.pause(ROOM)
    store.post(ROOM, "User", "go")
    store.post(ROOM, "Ann", "and quickly")
    # Nothing wakes a coordinator; one that takes the room anyway moves nothing.
    assert sync_redis.zscore(keys.runnable, ROOM) is None
    asyncio.run(serve_once(async_redis, keys, LocalWorkerTransport(sync_redis, keys)))
    assert senders(store) == [] and sync_redis.xlen(keys.inbox(ROOM)) == 2

    store.resume(ROOM)
    asyncio.run(serve_once(async_redis, keys, LocalWorkerTransport(sync_redis, keys)))

    assert senders(store)[:3] == ["User", "Ann", "agent1"]
    assert store.read_state(ROOM).stop_reason is StopReason.LULL


def test_a_room_paused_between_its_drain_and_its_next_turn_opens_none(
        store, sync_redis, async_redis, keys):
    store.post(ROOM, "User", "go")

    async def drain_then_pause() -> object:
        scripts = Scripts(async_redis)
        io = RoomIO(async_redis, keys, scripts)
        lease = await Leases(async_redis, keys, scripts, "c1", 5.0).acquire(ROOM)
        await io.drain_inbox(lease)
        store.pause(ROOM)
        return await io.open_turn(lease, 30)

    assert asyncio.run(drain_then_pause()) is None
    assert (store.read_state(ROOM).turn, store.read_state(ROOM).turn_open) == (0, False)


# --- cancel and delete while a turn is in flight


def test_a_cancel_while_a_turn_is_in_flight_writes_nothing_of_it(
        store, sync_redis, async_redis, keys):
    store.post(ROOM, "User", "go")
    transport = HookedTransport(sync_redis, keys, lambda: store.cancel(ROOM, "enough"),
                                on_turn=2, answer_first=True)

    with pytest.raises(LeaseLost, match="LEASELOST"):
        asyncio.run(serve_once(async_redis, keys, transport))

    assert senders(store) == ["User", "agent1"]
    assert [t.turn for t in store.read_turns(ROOM)] == [1]
    state = store.read_state(ROOM)
    assert (state.status, state.stop_reason, state.stop_detail, state.turn_open) == (
        "idle", StopReason.CANCELLED, "enough", False)
    # The abandoned turn's answers arrived and stay unused in the answers stream.
    assert {b"2"} <= {fields[b"turn"] for _, fields in sync_redis.xrange(keys.bids(ROOM))}


def test_after_a_cancel_a_post_starts_a_new_run(store, sync_redis, async_redis, keys):
    store.post(ROOM, "User", "go")
    transport = HookedTransport(sync_redis, keys, lambda: store.cancel(ROOM), on_turn=2)
    with pytest.raises(LeaseLost):
        asyncio.run(serve_once(async_redis, keys, transport))

    store.post(ROOM, "User", "again")
    asyncio.run(serve_once(async_redis, keys, LocalWorkerTransport(sync_redis, keys), "c2"))

    state = store.read_state(ROOM)
    assert (state.run, state.status, state.stop_reason) == (2, "idle", StopReason.LULL)
    # Turn 2 was abandoned: the new run's first turn is turn 3.
    assert [t.turn for t in store.read_turns(ROOM)][:2] == [1, 3]


def test_a_forced_delete_while_a_turn_is_in_flight_leaves_no_key(sync_redis, async_redis, keys):
    store = RoomStore(sync_redis, keys)
    store.create_room(ROOM, scripted_spec(rotating_scripts(3, 4), bid_timeout_s=0.1))
    store.post(ROOM, "User", "go")

    class DeletingTransport(LocalWorkerTransport):
        def send(self, requests: list[tuple[str, CallRequest]]) -> None:
            if any(request.turn == 2 for _, request in requests):
                if sync_redis.exists(keys.state(ROOM)):
                    store.delete(ROOM, force=True)
                # The workers' answers arrive after the delete.
                for _, request in requests:
                    written = store.write_answers(ROOM, [Answer(agent=name, turn=2, score=0.9)
                                                      for name in request.agents], 100)
                    assert written == 0
                return
            super().send(requests)

    with pytest.raises(LeaseLost):
        asyncio.run(serve_once(async_redis, keys, DeletingTransport(sync_redis, keys)))

    # The answers written after the delete found no room: nothing came back.
    assert [key for key in keys.room_keys(ROOM) if sync_redis.exists(key)] == []
    assert sync_redis.zscore(keys.rooms, ROOM) is None


def test_the_scheduler_takes_a_deleted_room_off_the_runnable_set(store, sync_redis, async_redis,
                                                                 keys):
    store.post(ROOM, "User", "go")
    store.delete(ROOM)
    sync_redis.zadd(keys.runnable, {ROOM: now_ms()})  # a stale holder's renewal put it back
    coordinator = Coordinator(Settings(key_prefix="t"), LocalWorkerTransport(sync_redis, keys),
                              "c1", client=async_redis)

    asyncio.run(coordinator.scan())

    assert coordinator.rooms == {} and sync_redis.zscore(keys.runnable, ROOM) is None
    assert [key for key in keys.room_keys(ROOM) if sync_redis.exists(key)] == []


# --- idle expiry


def sweeper(async_redis, keys, expiry_s: float = 60.0) -> IdleRooms:
    return IdleRooms(async_redis, keys, Scripts(async_redis), expiry_s)


def idle_since(sync_redis, keys, room: str, seconds: float) -> None:
    sync_redis.zadd(keys.rooms, {room: now_ms() - int(seconds * 1000)})


def test_a_room_idle_past_the_expiry_is_deleted(store, sync_redis, async_redis, keys):
    store.create_room("fresh", scripted_spec(rotating_scripts(2, 1)))
    idle_since(sync_redis, keys, ROOM, 61)
    idle_since(sync_redis, keys, "fresh", 59)

    with structlog.testing.capture_logs() as logs:
        expired = asyncio.run(sweeper(async_redis, keys).sweep())

    assert expired == [ROOM]
    assert [key for key in keys.room_keys(ROOM) if sync_redis.exists(key)] == []
    assert sync_redis.zscore(keys.rooms, ROOM) is None
    assert store.read_state("fresh")
    assert [e["room"] for e in logs if e["event"] == "room_expired"] == [ROOM]
    # Its place among its organization's live rooms is free again.
    assert sync_redis.smembers(keys.org_rooms("default")) == {b"fresh"}


def test_a_paused_idle_room_expires_like_any_idle_room(store, sync_redis, async_redis, keys):
    store.pause(ROOM)
    assert sync_redis.xlen(keys.events(ROOM)) == 1  # room_paused
    idle_since(sync_redis, keys, ROOM, 120)
    assert asyncio.run(sweeper(async_redis, keys).sweep()) == [ROOM]
    assert [key for key in keys.room_keys(ROOM) if sync_redis.exists(key)] == []


@pytest.mark.parametrize("busy", ["held", "running", "posts waiting"])
def test_a_room_with_something_going_on_never_expires(store, sync_redis, async_redis, keys, busy):
    scripts = Scripts(sync_redis)
    if busy == "held":
        scripts.acquire(keys=[keys.lease(ROOM), keys.state(ROOM), keys.events(ROOM)],
                        args=["c1", 5000, 1000])
    elif busy == "running":
        sync_redis.hset(keys.state(ROOM), "status", "running")
    else:
        store.post(ROOM, "User", "anyone?")
    idle_since(sync_redis, keys, ROOM, 3600)

    assert asyncio.run(sweeper(async_redis, keys).sweep()) == []
    assert store.read_state(ROOM)


def test_a_room_that_moved_on_after_its_state_was_read_is_kept(store, sync_redis, async_redis,
                                                               keys):
    idle_since(sync_redis, keys, ROOM, 3600)

    class MovingRedis(fakeredis.FakeAsyncRedis):
        async def zscore(self, name, value):  # noqa: ANN001, ANN201
            # Between the sweep's state read and its activity read, a post was drained.
            sync_redis.hset(keys.state(ROOM), "inbox_last_id", "9-0")
            return await super().zscore(name, value)

    moving = MovingRedis(server=async_redis.connection_pool.connection_kwargs["server"])
    assert asyncio.run(sweeper(moving, keys).sweep()) == []
    assert store.read_state(ROOM)


def test_a_sweep_pages_through_rooms_that_cannot_expire(sync_redis, async_redis, keys):
    store = RoomStore(sync_redis, keys)
    scripts = Scripts(sync_redis)
    for i in range(SWEEP_BATCH + 1):
        store.create_room(f"r{i:03}", scripted_spec(rotating_scripts(2, 1)))
        idle_since(sync_redis, keys, f"r{i:03}", 3600 - i)
        if i < SWEEP_BATCH:  # the oldest page is all held
            scripts.acquire(keys=[keys.lease(f"r{i:03}"), keys.state(f"r{i:03}"),
                                  keys.events(f"r{i:03}")], args=["c1", 60000, 1000])
    rooms = sweeper(async_redis, keys)

    assert asyncio.run(rooms.sweep()) == []
    assert asyncio.run(rooms.sweep()) == [f"r{SWEEP_BATCH:03}"]


def test_expiry_is_off_by_default_and_sweeps_a_quarter_of_its_time_at_most_each_minute(
        store, sync_redis, async_redis, keys):
    idle_since(sync_redis, keys, ROOM, 10 ** 6)
    assert asyncio.run(sweeper(async_redis, keys, 0).maybe_sweep()) == []
    assert store.read_state(ROOM)
    assert (sweep_period_s(2), sweep_period_s(30 * 86400)) == (0.5, 60.0)


def test_a_coordinators_scan_expires_idle_rooms(store, sync_redis, async_redis, keys):
    idle_since(sync_redis, keys, ROOM, 10)
    coordinator = Coordinator(Settings(key_prefix="t", room_idle_expiry_s=5),
                              LocalWorkerTransport(sync_redis, keys), "c1", client=async_redis)
    asyncio.run(coordinator.scan())
    assert not sync_redis.exists(keys.state(ROOM))


def test_a_room_let_go_counts_as_active_for_expiry(store, sync_redis, async_redis, keys):
    idle_since(sync_redis, keys, ROOM, 3600)
    store.post(ROOM, "User", "go")
    idle_since(sync_redis, keys, ROOM, 3600)  # as if the run had lasted an hour
    coordinator = Coordinator(Settings(key_prefix="t"), LocalWorkerTransport(sync_redis, keys),
                              "c1", client=async_redis)

    async def serve() -> None:
        lease = await coordinator.leases.acquire(ROOM)
        await coordinator.serve(lease)

    asyncio.run(serve())
    assert sync_redis.zscore(keys.rooms, ROOM) > now_ms() - 60_000
