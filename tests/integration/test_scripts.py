"""Lease and commit scripts, on fakeredis and on the real Redis."""

from __future__ import annotations

import orjson
import pytest
import redis

from parley.shared.keys import Keys
from parley.shared.models import Answer, Usage
from parley.shared.records import RoomState, answer_from_fields, usage_increments
from parley.shared.scripts import Scripts
from parley.shared.store import RoomStore
from tests.support.polling import wait_until
from tests.support.rooms import scripted_spec
from tests.support.script_calls import (
    DRAIN_LIMITS,
    ROOM,
    TTL_MS,
    acquire,
    commit,
    drain,
    open_turn,
    renew,
)


def test_acquire_takes_a_free_lease_and_bumps_the_epoch(store, scripts, keys):
    assert acquire(scripts, keys, "c1") == 1
    assert store.lease_holder(ROOM) == "c1:1"
    assert store.read_state(ROOM).epoch == 1


def test_concurrent_acquire_lets_exactly_one_coordinator_in(store, scripts, keys):
    results = [acquire(scripts, keys, f"c{i}") for i in range(5)]
    assert results == [1, 0, 0, 0, 0]
    assert store.lease_holder(ROOM) == "c0:1"


def test_acquire_of_an_unknown_room_is_an_error(scripts, keys):
    with pytest.raises(redis.ResponseError, match="NOROOM"):
        scripts.acquire(keys=[keys.lease("nope"), keys.state("nope"), keys.events("nope")],
                        args=["c1", TTL_MS, 1000])


def test_renew_by_a_non_holder_is_refused(store, scripts, keys):
    acquire(scripts, keys, "c1")
    assert renew(scripts, keys, "c2", 1) == [0]
    assert renew(scripts, keys, "c1", 1) == [1]


def test_renew_answers_for_each_lease_of_a_batch(store, scripts, keys):
    acquire(scripts, keys, "c1")
    store.redis.set(keys.lease("other"), "c2:4", px=TTL_MS)
    store.redis.pexpire(keys.lease(ROOM), 50)
    assert scripts.renew(keys=[keys.lease(ROOM), keys.lease("other"), keys.lease("gone")],
                         args=[TTL_MS, "c1", 0, 0, 1, 4, 1]) == [1, 0, 0]
    assert store.redis.pttl(keys.lease(ROOM)) > 50
    assert store.redis.get(keys.lease("other")) == b"c2:4"


def test_renew_pushes_the_due_times_of_the_renewed_rooms_it_is_given_only(store, scripts, keys):
    """The first ARGV[4] leases' rooms move to the due time (a room going idle comes after
    them and keeps its own); a lease that was not renewed moves nothing."""
    for room, holder in ((ROOM, "c1:1"), ("other", "c2:1"), ("idling", "c1:1")):
        store.redis.set(keys.lease(room), holder, px=TTL_MS)
        store.redis.zadd(keys.runnable, {room: 5})
    leases = [keys.lease(room) for room in (ROOM, "other", "idling")]
    assert scripts.renew(keys=[*leases, keys.runnable],
                         args=[TTL_MS, "c1", 777, 2, 1, 1, 1]) == [1, 0, 1]
    assert {room: store.redis.zscore(keys.runnable, room) for room in (ROOM, "other", "idling")
            } == {ROOM: 777, "other": 5, "idling": 5}


def test_release_by_a_non_holder_changes_nothing(store, scripts, keys):
    acquire(scripts, keys, "c1")
    assert scripts.release(keys=[keys.lease(ROOM)], args=["c2:1"]) == 0
    assert store.lease_holder(ROOM) == "c1:1"
    assert scripts.release(keys=[keys.lease(ROOM)], args=["c1:1"]) == 1
    assert store.lease_holder(ROOM) is None


def test_drain_moves_posts_to_the_log_in_order_and_starts_a_run(store, scripts, keys):
    acquire(scripts, keys, "c1")
    store.post(ROOM, "User", "first")
    store.post(ROOM, "Ann", "second")
    assert drain(scripts, keys, "c1:1") == 2
    messages = store.read_messages(ROOM)
    assert [(m.seq, m.sender, m.content, m.score) for m in messages] == [
        (1, "User", "first", None), (2, "Ann", "second", None)]
    state = store.read_state(ROOM)
    assert (state.status, state.run, state.messages_in_run, state.last_seq) == ("running", 1, 2, 2)
    assert store.redis.xlen(keys.inbox(ROOM)) == 0


def test_drain_with_a_stale_token_writes_nothing(store, scripts, keys):
    acquire(scripts, keys, "c1")
    store.post(ROOM, "User", "hi")
    with pytest.raises(redis.ResponseError, match="LEASELOST"):
        drain(scripts, keys, "c2:1")
    assert store.redis.xlen(keys.inbox(ROOM)) == 1
    assert store.read_messages(ROOM) == []


def test_drain_returns_the_state_it_leaves(store, scripts, keys):
    acquire(scripts, keys, "c1")
    store.post(ROOM, "User", "first")
    moved, fields, _ = scripts.drain(keys=[keys.lease(ROOM), keys.state(ROOM), keys.inbox(ROOM),
                                           keys.log(ROOM), keys.dead_letters(ROOM), keys.events(ROOM)],
                                     args=["c1:1", 1, 100, *DRAIN_LIMITS])
    state = RoomState(dict(zip(fields[::2], fields[1::2], strict=True)))
    assert (moved, state.status, state.last_seq, state.epoch) == (1, "running", 1, 1)


def test_drain_moves_nothing_while_a_turn_is_open(store, scripts, keys):
    acquire(scripts, keys, "c1")
    store.post(ROOM, "User", "task")
    drain(scripts, keys, "c1:1")
    open_turn(scripts, keys, "c1:1")
    store.post(ROOM, "Ann", "while the agents think")
    # The open turn's bids are formed against seq 1: the log must not move under them.
    assert drain(scripts, keys, "c1:1") == 0
    assert [m.seq for m in store.read_messages(ROOM)] == [1]
    assert commit(scripts, keys, "c1:1", 1, 1) == 2
    assert drain(scripts, keys, "c1:1") == 1
    assert [m.sender for m in store.read_messages(ROOM)] == ["User", "A", "Ann"]


def test_commit_appends_the_winner_and_closes_the_turn(store, scripts, keys):
    acquire(scripts, keys, "c1")
    store.post(ROOM, "User", "task")
    drain(scripts, keys, "c1:1")
    turn, snapshot, _ = open_turn(scripts, keys, "c1:1")
    assert (turn, snapshot) == (1, 1)
    assert commit(scripts, keys, "c1:1", 1, 1) == 2
    state = store.read_state(ROOM)
    assert (state.last_seq, state.turn_open, state.recent, state.messages_in_run) == (
        2, False, ["A"], 2)
    assert state.totals() == {"prompt_tokens": 10.0, "completion_tokens": 0.0, "cost_usd": 0.0,
                              "agent:A:prompt_tokens": 10.0}
    assert state.usage == Usage(prompt_tokens=10)
    assert [m.seq for m in store.read_messages(ROOM)] == [1, 2]


def test_a_new_run_starts_its_totals_from_zero_and_the_rooms_carry_on(store, scripts, keys):
    acquire(scripts, keys, "c1")
    store.post(ROOM, "User", "task")
    drain(scripts, keys, "c1:1")
    open_turn(scripts, keys, "c1:1")
    usage = usage_increments([Answer(agent="A", turn=1, prompt_tokens=7, completion_tokens=3,
                                  cost_usd=0.25)])
    payload = {"fields": {}, "usage": usage, "record": {"turn": "1"}, "turns_maxlen": "1000",
               "log_maxlen": "0", "events_maxlen": "1000",
               "stop": {"status": "idle", "reason": "lull", "detail": ""}}
    scripts.commit(keys=[keys.lease(ROOM), keys.state(ROOM), keys.log(ROOM), keys.turns(ROOM),
                         keys.events(ROOM)], args=["c1:1", 1, 1, orjson.dumps(payload)])
    ended = store.read_state(ROOM)
    assert ended.run_usage == ended.usage == Usage(prompt_tokens=7, completion_tokens=3,
                                                   cost_usd=0.25)

    store.post(ROOM, "User", "again")
    drain(scripts, keys, "c1:1")

    state = store.read_state(ROOM)
    assert (state.run, state.run_usage) == (2, Usage())
    assert state.usage == Usage(prompt_tokens=7, completion_tokens=3, cost_usd=0.25)


PRICED = {"prompt_tokens": 100, "completion_tokens": 10, "cached_tokens": 40, "cost_usd": 0.02}


def test_an_answer_counts_in_the_totals_as_it_lands_whether_its_turn_waits_for_it_or_not(
        store, scripts, keys):
    acquire(scripts, keys, "c1")
    store.post(ROOM, "User", "task")
    drain(scripts, keys, "c1:1")
    open_turn(scripts, keys, "c1:1")
    store.write_answers(ROOM, [Answer(agent="A", turn=1, **PRICED)], 100)  # in time
    commit(scripts, keys, "c1:1", 1, 1)
    store.write_answers(ROOM, [Answer(agent="B", turn=1, **PRICED)], 100)  # after its turn's commit
    store.cancel(ROOM)
    store.write_answers(ROOM, [Answer(agent="B", turn=2, **PRICED)], 100)  # after a cancel

    state = store.read_state(ROOM)
    # The commit adds only its own 10 prompt tokens (see commit()): answers count as they land.
    for usage, prompt in ((state.usage, 310), (state.run_usage, 300)):
        assert (usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens) == (
            prompt, 30, 120)
        assert usage.cost_usd == pytest.approx(0.06)
    assert state.agent_totals("cost_usd") == pytest.approx({"A": 0.02, "B": 0.04})
    assert state.agent_totals("prompt_tokens") == {"A": 110, "B": 200}


def test_an_answer_written_again_under_its_id_is_kept_and_counted_once(store, keys):
    first = Answer(agent="A", turn=1, answer_id="a1", **PRICED)
    assert store.write_answers(ROOM, [first], 100) == 1
    # A write retried after its reply was lost: the same answer again, beside a new one.
    again = [first, Answer(agent="B", turn=1, answer_id="b1", **PRICED)]
    assert store.write_answers(ROOM, again, 100) == 1
    # Answers without an id are never taken for a repeat.
    assert store.write_answers(ROOM, [Answer(agent="A", turn=1, **PRICED)] * 2, 100) == 2

    written = [answer_from_fields(fields) for _, fields in store.redis.xrange(keys.bids(ROOM))]
    assert [bid.agent for bid in written] == ["A", "B", "A", "A"]
    assert store.read_state(ROOM).usage.prompt_tokens == 400


def test_the_answer_ids_kept_are_as_many_as_the_answers_stream_keeps(store, keys):
    store.write_answers(ROOM, [Answer(agent="A", turn=1, answer_id=f"a{i}") for i in range(150)], 100)

    assert store.redis.zcard(keys.answer_ids(ROOM)) == 100
    assert store.write_answers(ROOM, [Answer(agent="A", turn=1, answer_id="a149")], 100) == 0


def test_commit_with_a_stale_epoch_is_refused(store, scripts, keys):
    acquire(scripts, keys, "c1")
    store.post(ROOM, "User", "task")
    drain(scripts, keys, "c1:1")
    open_turn(scripts, keys, "c1:1")
    # c1's lease lapses and c2 takes the room under epoch 2.
    store.redis.delete(keys.lease(ROOM))
    assert acquire(scripts, keys, "c2") == 2
    with pytest.raises(redis.ResponseError, match="LEASELOST"):
        commit(scripts, keys, "c1:1", 1, 1)
    assert [m.seq for m in store.read_messages(ROOM)] == [1]
    assert store.redis.xlen(keys.turns(ROOM)) == 0


def test_commit_with_the_same_epoch_but_another_owner_is_refused(store, scripts, keys):
    acquire(scripts, keys, "c1")
    with pytest.raises(redis.ResponseError, match="LEASELOST"):
        commit(scripts, keys, "c9:1", 1, 0)


def test_commit_with_a_wrong_expected_seq_is_refused(store, scripts, keys):
    acquire(scripts, keys, "c1")
    store.post(ROOM, "User", "task")
    drain(scripts, keys, "c1:1")
    open_turn(scripts, keys, "c1:1")
    with pytest.raises(redis.ResponseError, match="STALESEQ"):
        commit(scripts, keys, "c1:1", 1, 0)
    assert store.read_state(ROOM).turn_open


def test_commit_of_a_turn_that_is_not_open_is_refused(store, scripts, keys):
    acquire(scripts, keys, "c1")
    store.post(ROOM, "User", "task")
    drain(scripts, keys, "c1:1")
    open_turn(scripts, keys, "c1:1")
    commit(scripts, keys, "c1:1", 1, 1)
    with pytest.raises(redis.ResponseError, match="NOTURN"):
        commit(scripts, keys, "c1:1", 1, 2)
    assert [m.seq for m in store.read_messages(ROOM)] == [1, 2]


def test_open_turn_twice_is_refused(store, scripts, keys):
    acquire(scripts, keys, "c1")
    open_turn(scripts, keys, "c1:1")
    with pytest.raises(redis.ResponseError, match="TURNOPEN"):
        open_turn(scripts, keys, "c1:1")


def test_open_turn_records_where_its_bids_start(store, scripts, keys):
    acquire(scripts, keys, "c1")
    late = store.redis.xadd(keys.bids(ROOM), {"agent": "A", "turn": "0"})
    _, _, bids_from = open_turn(scripts, keys, "c1:1")
    assert bids_from == late
    state = RoomState(store.redis.hgetall(keys.state(ROOM)))
    assert state.turn_bids_from == late.decode()


def test_end_run_sets_the_stop_reason(store, scripts, keys):
    acquire(scripts, keys, "c1")
    scripts.end_run(keys=[keys.lease(ROOM), keys.state(ROOM), keys.events(ROOM)],
                    args=["c1:1", "idle", "max_messages", "", 1000])
    state = store.read_state(ROOM)
    assert (state.status, state.stop_reason) == ("idle", "max_messages")


@pytest.mark.redis
def test_a_lease_expires_after_its_ttl(real_redis, keys):
    store = RoomStore(real_redis, keys)
    store.create_room(ROOM, scripted_spec({"A": [], "B": []}))
    scripts = Scripts(real_redis)
    assert int(scripts.acquire(keys=[keys.lease(ROOM), keys.state(ROOM), keys.events(ROOM)],
                               args=["c1", 150, 1000])) == 1
    assert int(scripts.acquire(keys=[keys.lease(ROOM), keys.state(ROOM), keys.events(ROOM)],
                               args=["c2", 150, 1000])) == 0
    wait_until(lambda: not real_redis.exists(keys.lease(ROOM)), 5, "the lease to expire")
    assert int(scripts.acquire(keys=[keys.lease(ROOM), keys.state(ROOM), keys.events(ROOM)],
                               args=["c2", 150, 1000])) == 2


def test_renew_by_the_same_owner_under_an_older_epoch_is_refused(store, scripts, keys):
    acquire(scripts, keys, "c1")
    store.redis.delete(keys.lease(ROOM))
    assert acquire(scripts, keys, "c1") == 2
    assert renew(scripts, keys, "c1", 1) == [0]
    assert store.lease_holder(ROOM) == "c1:2"


def test_release_by_the_same_owner_under_an_older_epoch_changes_nothing(store, scripts, keys):
    acquire(scripts, keys, "c1")
    store.redis.delete(keys.lease(ROOM))
    acquire(scripts, keys, "c1")
    assert scripts.release(keys=[keys.lease(ROOM)], args=["c1:1"]) == 0
    assert store.lease_holder(ROOM) == "c1:2"


def test_open_turn_and_end_run_with_a_stale_token_write_nothing(store, scripts, keys):
    acquire(scripts, keys, "c1")
    before = store.redis.hgetall(keys.state(ROOM))
    with pytest.raises(redis.ResponseError, match="LEASELOST"):
        open_turn(scripts, keys, "c2:1")
    with pytest.raises(redis.ResponseError, match="LEASELOST"):
        scripts.end_run(keys=[keys.lease(ROOM), keys.state(ROOM), keys.events(ROOM)],
                        args=["c2:1", "idle", "lull", "", 1000])
    assert store.redis.hgetall(keys.state(ROOM)) == before


@pytest.mark.redis
def test_acquire_from_many_clients_at_once_lets_exactly_one_in(real_redis, keys):
    import threading

    from tests.conftest import REDIS_URL

    RoomStore(real_redis, keys).create_room(ROOM, scripted_spec({"A": [], "B": []}))
    clients = [redis.Redis.from_url(REDIS_URL) for _ in range(8)]
    start = threading.Barrier(len(clients))
    epochs: dict[str, int] = {}

    def race(index: int) -> None:
        scripts = Scripts(clients[index])
        start.wait()
        epochs[f"c{index}"] = int(scripts.acquire(
            keys=[keys.lease(ROOM), keys.state(ROOM), keys.events(ROOM)],
            args=[f"c{index}", TTL_MS, 1000]))

    threads = [threading.Thread(target=race, args=(i,)) for i in range(len(clients))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    winners = [owner for owner, epoch in epochs.items() if epoch]
    assert len(winners) == 1 and epochs[winners[0]] == 1
    assert RoomStore(real_redis, keys).lease_holder(ROOM) == f"{winners[0]}:1"
    for client in clients:
        client.close()


@pytest.mark.redis
def test_an_expired_lease_can_neither_be_renewed_nor_commit(real_redis, keys):
    store = RoomStore(real_redis, keys)
    store.create_room(ROOM, scripted_spec({"A": [], "B": []}))
    scripts = Scripts(real_redis)
    assert int(scripts.acquire(keys=[keys.lease(ROOM), keys.state(ROOM), keys.events(ROOM)],
                               args=["c1", 150, 1000])) == 1
    store.post(ROOM, "User", "task")
    drain(scripts, keys, "c1:1")
    open_turn(scripts, keys, "c1:1")
    wait_until(lambda: not real_redis.exists(keys.lease(ROOM)), 5, "the lease to expire")
    assert renew(scripts, keys, "c1", 1) == [0]
    with pytest.raises(redis.ResponseError, match="LEASELOST"):
        commit(scripts, keys, "c1:1", 1, 1)
    assert [m.seq for m in store.read_messages(ROOM)] == [1]
    assert store.lease_holder(ROOM) is None


def unschedule(scripts: Scripts, keys: Keys, expected: str) -> int:
    return int(scripts.unschedule(keys=[keys.runnable], args=[ROOM, expected]))


def test_unschedule_removes_a_room_whose_due_time_is_unchanged(store, scripts, keys):
    store.redis.zadd(keys.runnable, {ROOM: 1764500000123})
    assert unschedule(scripts, keys, repr(1764500000123.0)) == 1
    assert store.redis.zscore(keys.runnable, ROOM) is None


def test_unschedule_keeps_a_room_whose_due_time_a_post_moved(store, scripts, keys):
    store.redis.zadd(keys.runnable, {ROOM: 9999999999999})
    store.post(ROOM, "User", "racing post")  # moves the due time to now
    assert unschedule(scripts, keys, repr(9999999999999.0)) == 0
    assert store.redis.zscore(keys.runnable, ROOM) is not None


def test_unschedule_keeps_a_room_a_post_added_after_it_was_read_absent(store, scripts, keys):
    assert unschedule(scripts, keys, "") == 1
    store.post(ROOM, "User", "racing post")
    assert unschedule(scripts, keys, "") == 0
    assert store.redis.zscore(keys.runnable, ROOM) is not None
