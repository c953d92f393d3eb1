"""``Client.wait`` and ``Client.timeline`` block on the room's log and events: a run's end is
seen as it is committed, and every message reaches ``on_message`` before ``wait`` returns.
On fakeredis, with the turn loop run beside the waiter (in its callback or a thread)."""

from __future__ import annotations

import asyncio
import threading

import fakeredis
import orjson
import pytest

from parley.client import RunTimeout
from parley.coordinator.lease import Leases
from parley.coordinator.room_io import RoomIO
from parley.shared.events import RunEnded
from parley.shared.models import Message, RoomStatus, StopReason
from parley.shared.scripts import Scripts
from parley.swarms.groupchat import GroupChat
from tests.support.fake_turns import serve_until_idle
from tests.support.local_worker import LocalWorkerTransport
from tests.support.polling import wait_until
from tests.support.reads import BlockingReads
from tests.support.rooms import rotating_scripts, scripted_spec

ROOM = "room-1"


def drain_once(server, keys, owner: str) -> None:
    """A coordinator that takes the room and only moves its inbox to the log."""

    async def drain() -> None:
        async_redis = fakeredis.FakeAsyncRedis(server=server)
        scripts = Scripts(async_redis)
        leases = Leases(async_redis, keys, scripts, owner, 5.0)
        lease = await leases.acquire(ROOM)
        assert lease is not None
        await RoomIO(async_redis, keys, scripts).drain_inbox(lease)
        await leases.release(lease)

    asyncio.run(drain())


def test_the_last_message_reaches_on_message_when_it_lands_with_the_runs_end(
        client, store, server, keys):
    # The run's last message and its end are one commit. It lands while the waiter hands on
    # the task: the end is seen at once, and the message must still reach on_message first.
    store.create_room(ROOM, scripted_spec(rotating_scripts(3, 5), max_messages=4))
    inbox_id = client.post(ROOM, "go")
    drain_once(server, keys, "c0")
    delivered: list[Message] = []

    def on_message(message: Message) -> None:
        delivered.append(message)
        if message.seq == 1:
            serve_until_idle(server, keys)

    result = client.wait(ROOM, inbox_id, timeout_s=5, start_timeout_s=5, on_message=on_message)

    assert [m.seq for m in delivered] == [1, 2, 3, 4]
    assert [m.seq for m in result.messages] == [1, 2, 3, 4]
    assert (result.status, result.stop_reason, result.answer) == (
        RoomStatus.IDLE, StopReason.MAX_MESSAGES, "agent0 on turn 3")


def test_a_post_during_the_last_turn_starts_a_run_the_waiter_does_not_wait_for(
        client, store, server, keys):
    # Someone posts while run 1's last turn is out: the coordinator commits run 1's end and
    # starts run 2 with that post in its next round trip; the waiter reports run 1.
    store.create_room(ROOM, scripted_spec(rotating_scripts(2, 3), max_messages=2,
                                          bid_timeout_s=0.5))
    inbox_id = client.post(ROOM, "go")

    class PostDuringTheLastTurn(LocalWorkerTransport):
        def send(self, requests):
            if requests[0][1].turn == 1:
                super().send(requests)
                store.post(ROOM, "Ann", "and now?")
            # Run 2's turn is never answered: it runs until its deadline, and fails.

    reads = BlockingReads(store)

    def coordinator() -> None:
        reads.wait_until_reading()
        serve_until_idle(server, keys, transport=PostDuringTheLastTurn(store.redis, keys))

    thread = threading.Thread(target=coordinator)
    thread.start()
    try:
        result = client.wait(ROOM, inbox_id, timeout_s=5, start_timeout_s=5)
    finally:
        thread.join()

    assert (result.status, result.stop_reason, result.answer) == (
        RoomStatus.IDLE, StopReason.MAX_MESSAGES, "agent1 on turn 1")
    assert client.state(ROOM).stop_reason is StopReason.NO_BIDS  # how run 2 ended


def test_wait_reports_its_runs_end_even_when_the_next_run_started_before_it_looked(
        client, store, keys):
    # Run 1's end is committed and someone else's post starts run 2 right after, before the
    # waiter runs again: the state only ever shows run 2, the run_ended event run 1's end.
    store.create_room(ROOM, scripted_spec(rotating_scripts(2, 1)))
    inbox_id = client.post(ROOM, "go")
    scripts = Scripts(store.redis)
    lease = [keys.lease(ROOM), keys.state(ROOM), keys.events(ROOM)]
    drain = dict(keys=[keys.lease(ROOM), keys.state(ROOM), keys.inbox(ROOM), keys.log(ROOM),
                       keys.dead_letters(ROOM), keys.events(ROOM)],
                 args=["c1:1", 1, 100, 100, 128, 65536, 1024, 0, 1000])
    last_turn = {"message": {"sender": "agent0", "content": "done", "score": "0.9",
                             "turn": "1", "run": "1"},
                 "fields": {"answer": "done"}, "usage": {}, "record": {"turn": "1"},
                 "stop": {"status": "idle", "reason": "lull", "detail": ""},
                 "turns_maxlen": "1000", "log_maxlen": "0", "events_maxlen": "1000"}

    reads = BlockingReads(store)

    def coordinator() -> None:
        reads.wait_until_reading()
        scripts.acquire(keys=lease, args=["c1", 5000, 1000])
        scripts.drain(**drain)
        scripts.open_turn(keys=[keys.lease(ROOM), keys.state(ROOM), keys.bids(ROOM),
                                keys.events(ROOM)], args=["c1:1", "2000000000.0", "1.0", 1000])
        # At once: the end of run 1, a post, and the drain that starts run 2 with it.
        at_once = store.redis.pipeline(transaction=True)
        scripts.commit(keys=[keys.lease(ROOM), keys.state(ROOM), keys.log(ROOM),
                             keys.turns(ROOM), keys.events(ROOM)],
                       args=["c1:1", 1, 1, orjson.dumps(last_turn)], client=at_once)
        at_once.xadd(keys.inbox(ROOM), {"sender": "Ann", "content": "and now?"})
        scripts.drain(**drain, client=at_once)
        at_once.execute()

    thread = threading.Thread(target=coordinator)
    thread.start()
    try:
        result = client.wait(ROOM, inbox_id, timeout_s=3, start_timeout_s=3)
    finally:
        thread.join()

    assert (result.status, result.stop_reason, result.answer) == (
        RoomStatus.IDLE, StopReason.LULL, "done")
    assert (client.state(ROOM).status, client.state(ROOM).run) == (RoomStatus.RUNNING, 2)


def test_a_cancelled_run_ends_the_wait_even_when_the_next_run_started_before_it_looked(
        client, store, server, keys):
    # The run is cancelled and a post waiting starts run 2 at once: the state only ever
    # shows run 2, the cancel's run_ended event run 1's end.
    store.create_room(ROOM, scripted_spec(rotating_scripts(2, 1)))
    inbox_id = client.post(ROOM, "go")
    drain_once(server, keys, "c1")  # run 1 started with the post; nobody takes its turns
    scripts = Scripts(store.redis)

    reads = BlockingReads(store)

    def cancel_then_start_the_next_run() -> None:
        reads.wait_until_reading()
        at_once = store.redis.pipeline(transaction=True)
        scripts.cancel(keys=[keys.lease(ROOM), keys.state(ROOM), keys.inbox(ROOM),
                             keys.events(ROOM)], args=["stopped by Ann", 1000], client=at_once)
        at_once.xadd(keys.inbox(ROOM), {"sender": "Ann", "content": "this instead"})
        scripts.acquire(keys=[keys.lease(ROOM), keys.state(ROOM), keys.events(ROOM)],
                        args=["c2", 5000, 1000], client=at_once)
        scripts.drain(keys=[keys.lease(ROOM), keys.state(ROOM), keys.inbox(ROOM),
                            keys.log(ROOM), keys.dead_letters(ROOM), keys.events(ROOM)],
                      args=["c2:2", 2, 100, 100, 128, 65536, 1024, 0, 1000], client=at_once)
        at_once.execute()

    thread = threading.Thread(target=cancel_then_start_the_next_run)
    thread.start()
    try:
        result = client.wait(ROOM, inbox_id, timeout_s=3, start_timeout_s=3)
    finally:
        thread.join()

    assert (result.status, result.stop_reason, result.stop_detail) == (
        RoomStatus.IDLE, StopReason.CANCELLED, "stopped by Ann")
    assert [m.content for m in result.messages][:1] == ["go"]
    assert (client.state(ROOM).status, client.state(ROOM).run) == (RoomStatus.RUNNING, 2)


def test_a_post_waiting_while_a_run_is_cancelled_waits_for_its_own_run(
        client, store, server, keys):
    # Run 1 has a turn open, so the post stays in the inbox: its cancel is not the post's
    # end. The post starts run 2, and the wait reports that run.
    store.create_room(ROOM, scripted_spec(rotating_scripts(2, 3), max_messages=2))
    client.post(ROOM, "first")
    scripts = Scripts(store.redis)
    scripts.acquire(keys=[keys.lease(ROOM), keys.state(ROOM), keys.events(ROOM)],
                    args=["c1", 5000, 1000])
    scripts.drain(keys=[keys.lease(ROOM), keys.state(ROOM), keys.inbox(ROOM), keys.log(ROOM),
                        keys.dead_letters(ROOM), keys.events(ROOM)],
                  args=["c1:1", 1, 100, 100, 128, 65536, 1024, 0, 1000])
    scripts.open_turn(keys=[keys.lease(ROOM), keys.state(ROOM), keys.bids(ROOM),
                            keys.events(ROOM)], args=["c1:1", "2000000000.0", "1.0", 1000])
    inbox_id = client.post(ROOM, "second")

    reads = BlockingReads(store)

    def cancel_then_serve() -> None:
        reads.wait_until_reading()
        store.cancel(ROOM)
        reads.wait_until_handed(lambda event: isinstance(event, RunEnded)
                                and event.stop_reason is StopReason.CANCELLED, "the cancel")
        serve_until_idle(server, keys, owner="c2")

    thread = threading.Thread(target=cancel_then_serve)
    thread.start()
    try:
        result = client.wait(ROOM, inbox_id, timeout_s=5, start_timeout_s=5)
    finally:
        thread.join()

    assert (result.status, result.stop_reason) == (RoomStatus.IDLE, StopReason.MAX_MESSAGES)
    assert [(m.content, m.run) for m in result.messages] == [
        ("first", 1), ("second", 2), ("agent1 on turn 1", 2)]


def test_a_room_that_fails_while_the_post_waits_ends_the_wait(client, store, server, keys):
    store.create_room(ROOM, scripted_spec(rotating_scripts(2, 1)))
    inbox_id = client.post(ROOM, "go")
    scripts = Scripts(store.redis)

    reads = BlockingReads(store)

    def failing_coordinator() -> None:
        reads.wait_until_reading()
        for take in range(1, 4):
            store.redis.delete(keys.lease(ROOM))
            scripts.acquire(keys=[keys.lease(ROOM), keys.state(ROOM), keys.events(ROOM)],
                            args=["c1", 5000, 1000])
            scripts.count_failed_take(
                keys=[keys.lease(ROOM), keys.state(ROOM), keys.inbox(ROOM), keys.events(ROOM)],
                args=[f"c1:{take}", 3, "ValidationError: bad spec", 1000])

    thread = threading.Thread(target=failing_coordinator)
    thread.start()
    try:
        result = client.wait(ROOM, inbox_id, timeout_s=5, start_timeout_s=5)
    finally:
        thread.join()

    assert (result.status, result.stop_reason, result.stop_detail) == (
        RoomStatus.FAILED, StopReason.ROOM_ERROR, "ValidationError: bad spec")


def test_a_post_set_aside_unread_ends_the_wait_as_the_room_stands(client, store, server, keys):
    # No event names a post drain set aside: the waiter learns of it from the state.
    store.create_room(ROOM, scripted_spec(rotating_scripts(2, 1)))
    inbox_id = store.redis.xadd(keys.inbox(ROOM), {"sender": "User"}).decode()  # no content
    drain_once(server, keys, "c1")

    result = client.wait(ROOM, inbox_id, timeout_s=5, start_timeout_s=5)

    assert (result.status, result.messages) == (RoomStatus.IDLE, [])


def test_a_post_nobody_picks_up_times_out_with_the_no_coordinator_hint(client, store):
    store.create_room(ROOM, scripted_spec(rotating_scripts(2, 1)))
    inbox_id = client.post(ROOM, "go")
    with pytest.raises(RunTimeout, match="no coordinator took room room-1 within 0.3s"):
        client.wait(ROOM, inbox_id, timeout_s=5, start_timeout_s=0.3)


def test_a_run_that_goes_on_times_out(client, store, server, keys):
    store.create_room(ROOM, scripted_spec(rotating_scripts(2, 1)))
    inbox_id = client.post(ROOM, "go")
    drain_once(server, keys, "c1")  # the run started; nobody takes its turns
    with pytest.raises(RunTimeout, match="did not finish within 0.3s"):
        client.wait(ROOM, inbox_id, timeout_s=0.3, start_timeout_s=5)


def test_the_timeline_gives_each_message_then_its_runs_end(client, store, server, keys):
    store.create_room(ROOM, scripted_spec(rotating_scripts(2, 4), max_messages=2))
    client.post(ROOM, "before")
    drain_once(server, keys, "c0")
    timeline = client.timeline(ROOM, after_seq=0)
    assert next(timeline).content == "before"  # what was there when it started

    serve_until_idle(server, keys)
    client.post(ROOM, "again")
    serve_until_idle(server, keys)

    items = [next(timeline) for _ in range(5)]
    assert [(type(i).__name__, getattr(i, "seq", None) or getattr(i, "run", None))
            for i in items] == [("Message", 2), ("RunEnded", 1), ("Message", 3),
                                ("Message", 4), ("RunEnded", 2)]
    ends = [i for i in items if isinstance(i, RunEnded)]
    assert [e.stop_reason for e in ends] == [StopReason.MAX_MESSAGES] * 2
    assert [next(client.follow(ROOM, after_seq=2)).seq] == [3]


def test_groupchat_streams_every_message_before_run_returns(client, store, server, keys):
    chat = GroupChat(agents=[{"name": name, "model": "scripted", "script": script}
                             for name, script in rotating_scripts(3, 4).items()],
                     max_loops=4, output_type="list", client=client)
    finals: list[str] = []

    def coordinator() -> None:
        room = wait_until(lambda: store.list_rooms(), 5, "GroupChat's room")[0]
        wait_until(lambda: store.redis.xlen(keys.inbox(room)), 5, "the task")
        serve_until_idle(server, keys, room=room)

    thread = threading.Thread(target=coordinator)
    thread.start()
    try:
        history = chat.run("go", streaming_callback=lambda agent, chunk, final: final
                           and finals.append(agent))
    finally:
        thread.join()

    assert [row["role"] for row in history] == ["User", "agent1", "agent2", "agent0"]
    assert finals == ["User", "agent1", "agent2", "agent0"]
