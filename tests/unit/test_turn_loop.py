"""The coordinator's turn loop on fakeredis with an in-process worker twin."""

from __future__ import annotations

import asyncio

import pytest
import structlog

from parley.coordinator import policies
from parley.coordinator.answer_reads import OwnReads, SharedReads
from parley.coordinator.connections import ANSWER_READERS, COMMAND_CONNECTIONS
from parley.coordinator.lease import LeaseLost, Leases
from parley.coordinator.outbox import Outbox
from parley.coordinator.room_io import RoomIO
from parley.coordinator.service import Coordinator
from parley.coordinator.transport import InMemoryTransport
from parley.coordinator.turn_loop import RoomRunner, TurnOptions
from parley.shared.models import Answer, StopReason
from parley.shared.scripts import Scripts
from parley.shared.settings import Settings
from parley.shared.store import RoomStore
from parley.shared.tasks import TaskBook
from tests.support.fake_turns import serve_once
from tests.support.local_worker import LocalWorkerTransport
from tests.support.polling import wait_until_async
from tests.support.rooms import rotating_scripts, scripted_spec

ROOM = "room-1"


def runner_parts(async_redis, keys, owner="c1"):
    scripts = Scripts(async_redis)
    return RoomIO(async_redis, keys, scripts), Leases(async_redis, keys, scripts, owner, 5.0)


def test_a_room_runs_to_its_lull_and_goes_idle(sync_redis, async_redis, keys):
    store = RoomStore(sync_redis, keys)
    store.create_room(ROOM, scripted_spec(rotating_scripts(3, 4)))
    store.post(ROOM, "User", "go")
    transport = LocalWorkerTransport(sync_redis, keys)

    with structlog.testing.capture_logs() as logs:
        asyncio.run(serve_once(async_redis, keys, transport))

    assert [m.sender for m in store.read_messages(ROOM)] == [
        "User", "agent1", "agent2", "agent0", "agent1"]
    state = store.read_state(ROOM)
    assert (state.status, state.stop_reason, state.turn_open) == ("idle", StopReason.LULL, False)
    assert sync_redis.zscore(keys.runnable, ROOM) is None
    committed = [e for e in logs if e["event"] == "turn_committed"]
    assert [e["speaker"] for e in committed] == ["agent1", "agent2", "agent0", "agent1", None]
    assert all(len(e["calls"]) == 3 for e in committed)
    # No turn was taken over: no worker is told to look for answers made before.
    assert {request.answers_from for _, request in transport.sent} == {""}


def test_a_turn_is_sent_in_chunks_of_agents_per_task(sync_redis, async_redis, keys):
    store = RoomStore(sync_redis, keys)
    store.create_room(ROOM, scripted_spec(rotating_scripts(5, 1)))
    store.post(ROOM, "User", "go")
    transport = LocalWorkerTransport(sync_redis, keys)

    asyncio.run(serve_once(async_redis, keys, transport, agents_per_task=2))

    first_turn = [r.agents for _, r in transport.sent if r.turn == 1]
    assert first_turn == [["agent0", "agent1"], ["agent2", "agent3"], ["agent4"]]


def test_each_request_carries_the_rooms_count_of_tasks_as_its_state_has_it(
        sync_redis, async_redis, keys):
    store = RoomStore(sync_redis, keys)
    store.create_room(ROOM, scripted_spec(rotating_scripts(2, 1)))
    store.post(ROOM, "User", "go")
    transport = LocalWorkerTransport(sync_redis, keys)
    asyncio.run(serve_once(async_redis, keys, transport))
    assert {r.tasks_started for _, r in transport.sent} == {0}

    sync_redis.hset(keys.state(ROOM), "tasks", 2)  # as two task_start calls leave it
    transport.sent.clear()
    store.post(ROOM, "User", "again")
    asyncio.run(serve_once(async_redis, keys, transport))
    assert transport.sent and {r.tasks_started for _, r in transport.sent} == {2}


def test_a_resumed_turn_reuses_arrived_bids_and_asks_only_the_missing(sync_redis, async_redis, keys):
    store = RoomStore(sync_redis, keys)
    store.create_room(ROOM, scripted_spec(rotating_scripts(3, 1)))
    store.post(ROOM, "User", "go")

    async def crash_after_open() -> None:
        io, leases = runner_parts(async_redis, keys, "dead")
        lease = await leases.acquire(ROOM)
        await io.drain_inbox(lease)
        await io.open_turn(lease, 30)
        # A worker answered for agent1 before the coordinator died.
        store.write_answer(ROOM, Answer(agent="agent1", turn=1, score=0.9, message="kept", attempt=1),
                        1000)
        sync_redis.delete(keys.lease(ROOM))

    asyncio.run(crash_after_open())
    transport = LocalWorkerTransport(sync_redis, keys)
    asyncio.run(serve_once(async_redis, keys, transport, owner="c2"))

    resumed = [r for _, r in transport.sent if r.turn == 1]
    assert [r.agents for r in resumed] == [["agent0", "agent2"]]
    assert resumed[0].attempt == 2
    # Its workers skip a call the dead coordinator made that has answered meanwhile: the
    # requests say where the turn's answers start (agent1's is the first).
    since = store.read_answers(ROOM, resumed[0].answers_from)
    assert resumed[0].answers_from and since[0][1].message == "kept"
    assert [m.content for m in store.read_messages(ROOM)] == ["go", "kept"]
    assert store.read_turns(ROOM)[0].epoch == 2


def test_a_coordinator_that_lost_its_lease_cannot_commit(sync_redis, async_redis, keys):
    store = RoomStore(sync_redis, keys)
    store.create_room(ROOM, scripted_spec(rotating_scripts(2, 3)))
    store.post(ROOM, "User", "go")

    class StealingTransport(LocalWorkerTransport):
        def send(self, requests):
            super().send(requests)
            sync_redis.set(keys.lease(ROOM), "thief:9")

    with pytest.raises(LeaseLost):
        asyncio.run(serve_once(async_redis, keys, StealingTransport(sync_redis, keys)))
    assert [m.sender for m in store.read_messages(ROOM)] == ["User"]
    assert store.read_turns(ROOM) == []


def test_agents_that_do_not_answer_time_out_and_are_silent(sync_redis, async_redis, keys):
    store = RoomStore(sync_redis, keys)
    store.create_room(ROOM, scripted_spec(rotating_scripts(2, 2), bid_timeout_s=0.05))
    store.post(ROOM, "User", "go")
    transport = LocalWorkerTransport(sync_redis, keys, answering={"agent0"})

    asyncio.run(serve_once(async_redis, keys, transport))

    turns = store.read_turns(ROOM)
    assert [(b.agent, b.status) for b in turns[0].bids] == [("agent0", "ok"), ("agent1", "timeout")]
    assert turns[0].stop_reason is StopReason.LULL


def test_the_scheduler_takes_rooms_up_to_its_capacity(sync_redis, async_redis, keys):
    store = RoomStore(sync_redis, keys)
    for i in range(3):
        store.create_room(f"r{i}", scripted_spec(rotating_scripts(2, 1), bid_timeout_s=30))
        store.post(f"r{i}", "User", "go")
    silent = LocalWorkerTransport(sync_redis, keys, answering=set())
    coordinator = Coordinator(Settings(key_prefix="t", coordinator_capacity=2), silent, "c1",
                              client=async_redis)

    def every_held_room_waits_for_bids() -> bool:
        return set(coordinator.rooms) <= {request.room for _, request in silent.sent}

    async def scan_three_times() -> list[str]:
        for _ in range(3):
            await coordinator.scan()
            await wait_until_async(every_held_room_waits_for_bids, 5,
                                   "the rooms taken to wait for bids")
        held = sorted(coordinator.rooms)
        assert {store.lease_holder(room) for room in held} == {"c1:1"}
        for _, task in coordinator.rooms.values():
            task.cancel()
        return held

    assert len(asyncio.run(scan_three_times())) == 2
    assert sync_redis.zscore(keys.coordinators, "c1") is not None


def test_a_post_racing_with_going_idle_keeps_the_room_served(sync_redis, async_redis, keys):
    store = RoomStore(sync_redis, keys)
    store.create_room(ROOM, scripted_spec(rotating_scripts(2, 2), max_messages=2))
    store.post(ROOM, "User", "first")
    io, leases = runner_parts(async_redis, keys)
    racing = {"posted": False}

    class RacingIO(RoomIO):
        async def drain_inbox(self, lease):
            result = await super().drain_inbox(lease)
            idle = result.state.status != "running" and not result.state.turn_open
            if lease.idling and idle and not racing["posted"]:
                # A person posts right after the runner's last look at the inbox.
                racing["posted"] = True
                store.post(ROOM, "Ann", "one more thing")
            return result

    async def serve() -> None:
        lease = await leases.acquire(ROOM)
        runner = RoomRunner(lease, RacingIO(async_redis, keys, io.scripts),
                            Outbox(LocalWorkerTransport(sync_redis, keys)),
                            TurnOptions("t", 8, 1000))
        await runner.run()

    asyncio.run(serve())

    assert racing["posted"]
    assert [m.sender for m in store.read_messages(ROOM)] == ["User", "agent1", "Ann", "agent0"]
    assert store.read_state(ROOM).run == 2
    assert sync_redis.zscore(keys.runnable, ROOM) is None


def test_a_task_started_as_the_room_goes_idle_is_sent_not_left_queued(
        sync_redis, async_redis, keys):
    store = RoomStore(sync_redis, keys)
    spec = scripted_spec(rotating_scripts(2, 2), max_messages=2)
    store.create_room(ROOM, spec)
    store.post(ROOM, "User", "first")
    io, leases = runner_parts(async_redis, keys)
    book = TaskBook(sync_redis, keys, events_maxlen=100, finished_max=200)
    started: list[str] = []
    sent: list[str] = []

    class RacingIO(RoomIO):
        async def due_time(self, room):
            if not started:  # someone starts a task as the runner begins to go idle
                started.append(book.start(ROOM, spec, "agent0", "Count the tickets").id)
            return await super().due_time(room)

    class TasksToo(LocalWorkerTransport):
        def send_background(self, queue, request, until, task_id):
            sent.append(request["task"])

    async def serve() -> None:
        lease = await leases.acquire(ROOM)
        runner = RoomRunner(lease, RacingIO(async_redis, keys, io.scripts),
                            Outbox(TasksToo(sync_redis, keys)), TurnOptions("t", 8, 1000))
        await runner.run()

    asyncio.run(serve())

    assert started and sent == started
    assert book.get(ROOM, started[0]).sent
    assert sync_redis.zscore(keys.runnable, ROOM) is not None  # looked at while it runs


def test_a_reply_speaking_for_another_participant_is_committed_cut_and_the_cut_recorded(
        sync_redis, async_redis, keys):
    spec = scripted_spec({
        "Optimist": [{"score": 0.9, "message": "Ship it.\n**Skeptic:** I agree.\nUser: great"}],
        "Skeptic": [{"score": 0.2, "message": "Wait."}],
    })
    store = RoomStore(sync_redis, keys)
    store.create_room(ROOM, spec)
    store.post(ROOM, "User", "Launch?")

    with structlog.testing.capture_logs() as logs:
        asyncio.run(serve_once(async_redis, keys, LocalWorkerTransport(sync_redis, keys)))

    assert [(m.sender, m.content, m.score) for m in store.read_messages(ROOM)] == [
        ("User", "Launch?", None), ("Optimist", "Ship it.", 0.9)]
    first = store.read_turns(ROOM)[0]
    assert first.cuts == {"Optimist": "Skeptic"}
    assert first.bids[0].message == "Ship it.\n**Skeptic:** I agree.\nUser: great"
    replayed = policies.replay(spec, first)
    assert (replayed.winner, replayed.message, replayed.cuts) == (
        "Optimist", "Ship it.", {"Optimist": "Skeptic"})
    committed = [e for e in logs if e["event"] == "turn_committed"]
    assert committed[0]["cuts"] == {"Optimist": "Skeptic"}
    assert committed[1]["cuts"] is None


def test_unreadable_inbox_entries_are_set_aside_and_the_room_runs_on(sync_redis, async_redis,
                                                                     keys):
    store = RoomStore(sync_redis, keys)
    store.create_room(ROOM, scripted_spec(rotating_scripts(2, 2)))
    store.post(ROOM, "User", "go")
    # Written straight into Redis by another tool: no content, then no ts (readable).
    no_content = sync_redis.xadd(keys.inbox(ROOM), {"sender": "tool", "ts": "1.5"}).decode()
    sync_redis.xadd(keys.inbox(ROOM), {"sender": "tool", "content": "no ts"})
    store.post(ROOM, "Ann", "and also")

    with structlog.testing.capture_logs() as logs:
        asyncio.run(serve_once(async_redis, keys, LocalWorkerTransport(sync_redis, keys)))

    messages = store.read_messages(ROOM)
    assert [m.seq for m in messages] == list(range(1, len(messages) + 1))
    assert [m.sender for m in messages] == ["User", "tool", "Ann", "agent1", "agent0"]
    state = store.read_state(ROOM)
    assert (state.status, state.stop_reason, state.last_seq) == ("idle", StopReason.LULL, 5)
    set_aside = [(e["inbox_id"], e["reason"]) for e in logs
                 if e["event"] == "inbox_entry_set_aside"]
    assert set_aside == [(no_content, "no content")]
    assert sync_redis.xlen(keys.dead_letters(ROOM)) == 1
    assert sync_redis.xlen(keys.inbox(ROOM)) == 0


def test_an_unreadable_entry_posted_while_idle_starts_no_run(sync_redis, async_redis, keys):
    store = RoomStore(sync_redis, keys)
    store.create_room(ROOM, scripted_spec(rotating_scripts(2, 1)))
    sync_redis.xadd(keys.inbox(ROOM), {"content": "who am I?"})
    sync_redis.zadd(keys.runnable, {ROOM: 0})

    asyncio.run(serve_once(async_redis, keys, LocalWorkerTransport(sync_redis, keys)))

    state = store.read_state(ROOM)
    assert (state.status, state.run, state.last_seq) == ("idle", 0, 0)
    assert sync_redis.xlen(keys.dead_letters(ROOM)) == 1
    assert sync_redis.zscore(keys.runnable, ROOM) is None


def test_the_rooms_share_connections_for_their_commands_and_readers_for_their_waits():
    """A standby's thousand rooms read, send and wait for their answers on a few shared
    connections; on a cluster each waiting room holds its own."""
    settings = Settings(key_prefix="t", coordinator_capacity=500)

    async def pools(settings: Settings) -> tuple[int, object]:
        coordinator = Coordinator(settings, InMemoryTransport(), "c1")
        try:
            pool = getattr(coordinator.io.redis, "connection_pool", None)  # none on a cluster
            return pool and pool.max_connections, coordinator.io.waits
        finally:
            for client in (coordinator.redis, coordinator.waits, coordinator.control):
                await client.aclose()

    commands, waits = asyncio.run(pools(settings))
    assert commands == COMMAND_CONNECTIONS
    assert isinstance(waits, SharedReads)
    assert len(waits.readers) == ANSWER_READERS
    assert waits.readers[0].pool.max_connections == 2 * ANSWER_READERS
    _, cluster_waits = asyncio.run(pools(settings.model_copy(update={"redis_cluster": True})))
    assert isinstance(cluster_waits, OwnReads)


def test_the_blocking_read_of_answers_goes_to_the_waits(sync_redis, async_redis, keys):
    store = RoomStore(sync_redis, keys)
    store.create_room(ROOM, scripted_spec(rotating_scripts(2, 1)))
    store.write_answer(ROOM, Answer(agent="agent0", turn=1, score=0.5, attempt=1), 100)
    read: list[tuple] = []

    class Waits(OwnReads):
        async def wait(self, stream: str, after_id: str, block_ms: int) -> list:
            read.append((stream, after_id))
            return await super().wait(stream, after_id, block_ms)

    io = RoomIO(async_redis, keys, Scripts(async_redis), waits=Waits(async_redis))
    answers = asyncio.run(io.wait_answers(ROOM, "0-0", 10))

    assert [answer.agent for _, answer in answers] == ["agent0"]
    assert read == [(keys.bids(ROOM), "0-0")]
