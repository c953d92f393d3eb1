"""The lifecycle scripts (create, post, answers, pause, resume, cancel, delete) and the log's
cap, on fakeredis and on the real Redis: each checks before it writes, and each is safe
against a coordinator committing at the same moment."""

from __future__ import annotations

import orjson
import pytest
import redis

from parley.shared.keys import Keys
from parley.shared.models import Answer, StopReason
from parley.shared.scripts import Scripts
from parley.shared.store import RoomChanged, RoomExists, RoomHeld, RoomNotFound, RoomStore
from tests.support.rooms import scripted_spec
from tests.support.script_calls import (
    DRAIN_LIMITS,
    ROOM,
    TTL_MS,
    acquire,
    commit,
    drain,
    open_turn,
)

LOG_CAP = 100


def room_keys_present(client: redis.Redis, keys: Keys, room: str = ROOM) -> list[str]:
    return [key for key in keys.room_keys(room) if client.exists(key)]


def running_with_open_turn(store: RoomStore, scripts: Scripts, keys: Keys) -> None:
    """c1 holds the room, its run started with one post, and turn 1 is open."""
    acquire(scripts, keys, "c1")
    store.post(ROOM, "User", "task")
    drain(scripts, keys, "c1:1")
    open_turn(scripts, keys, "c1:1")


# --- create, post and answers: a room that is gone stays gone


def test_creating_a_room_twice_is_refused_and_changes_nothing(store):
    before = store.redis.hgetall(store.keys.state(ROOM))
    with pytest.raises(RoomExists):
        store.create_room(ROOM, scripted_spec({"C": [], "D": []}))
    assert store.redis.hgetall(store.keys.state(ROOM)) == before
    assert store.agent_names(ROOM) == ["A", "B"]


def test_a_create_in_import_mode_needs_a_reserved_id(any_redis, keys, scripts):
    with pytest.raises(redis.ResponseError, match="NOTRESERVED"):
        scripts.create(keys=[keys.state("r2"), keys.spec("r2"), keys.log("r2")],
                       args=["import", 1, "name", "x", "status", "idle"])
    assert room_keys_present(any_redis, keys, "r2") == []


def test_a_post_into_a_room_that_is_gone_is_refused_and_leaves_no_key(store):
    store.delete(ROOM)
    with pytest.raises(RoomNotFound):
        store.post(ROOM, "User", "anyone?")
    assert room_keys_present(store.redis, store.keys) == []


def test_answers_for_a_room_that_is_gone_are_dropped(store):
    assert store.write_answers(ROOM, [Answer(agent="A", turn=1)], 100) == 1
    store.delete(ROOM)
    # Not even its totals or its answer ids come back.
    late = [Answer(agent="A", turn=1, answer_id="a", prompt_tokens=5), Answer(agent="B", turn=1)]
    assert store.write_answers(ROOM, late, 100) == 0
    assert room_keys_present(store.redis, store.keys) == []


def test_answers_keep_their_fields_and_order(store):
    bids = [Answer(agent="A", turn=3, score=0.5, message="x"), Answer(agent="B", turn=3)]
    store.write_answers(ROOM, bids, 100)
    entries = store.redis.xrange(store.keys.bids(ROOM))
    assert [fields[b"agent"] for _, fields in entries] == [b"A", b"B"]
    assert entries[0][1][b"message"] == b"x" and entries[0][1][b"score"] == b"0.5"


# --- pause and resume


def test_a_paused_room_opens_no_turn(store, scripts, keys):
    acquire(scripts, keys, "c1")
    store.post(ROOM, "User", "task")
    drain(scripts, keys, "c1:1")
    assert store.pause(ROOM) is True
    with pytest.raises(redis.ResponseError, match="PAUSED"):
        open_turn(scripts, keys, "c1:1")
    state = store.read_state(ROOM)
    assert (state.turn, state.turn_open, state.paused) == (0, False, True)


def test_a_paused_room_keeps_posts_in_its_inbox_until_resumed(store, scripts, keys):
    acquire(scripts, keys, "c1")
    store.pause(ROOM)
    store.post(ROOM, "User", "first")
    store.post(ROOM, "Ann", "second")
    assert store.redis.zscore(keys.runnable, ROOM) is None  # no coordinator is woken
    assert drain(scripts, keys, "c1:1") == 0
    assert (store.read_state(ROOM).status, store.redis.xlen(keys.inbox(ROOM))) == ("idle", 2)

    assert store.resume(ROOM) is True

    assert store.redis.zscore(keys.runnable, ROOM) is not None
    assert drain(scripts, keys, "c1:1") == 2
    assert [m.content for m in store.read_messages(ROOM)] == ["first", "second"]


def test_pause_and_resume_say_whether_they_changed_anything(store):
    assert store.pause(ROOM) is True
    assert store.pause(ROOM) is False
    assert store.resume(ROOM) is True
    assert store.resume(ROOM) is False
    assert store.read_state(ROOM).paused is False
    # An idle room with nothing waiting needs no coordinator.
    assert store.redis.zscore(store.keys.runnable, ROOM) is None


def test_a_turn_open_when_the_room_was_paused_still_commits(store, scripts, keys):
    running_with_open_turn(store, scripts, keys)
    store.pause(ROOM)
    assert commit(scripts, keys, "c1:1", 1, 1) == 2
    with pytest.raises(redis.ResponseError, match="PAUSED"):
        open_turn(scripts, keys, "c1:1")


@pytest.mark.parametrize("operation", ["pause", "resume", "cancel"])
def test_lifecycle_changes_of_a_missing_room_are_refused(store, operation):
    with pytest.raises(RoomNotFound):
        getattr(store, operation)("nope")
    assert room_keys_present(store.redis, store.keys, "nope") == []


# --- cancel


def test_cancel_while_a_turn_is_open_fences_the_commit_out(store, scripts, keys):
    running_with_open_turn(store, scripts, keys)

    result = store.cancel(ROOM, "stop")

    assert (result.cancelled, result.run, result.waiting) == (True, 1, 0)
    state = store.read_state(ROOM)
    assert (state.status, state.stop_reason, state.stop_detail, state.turn_open) == (
        "idle", StopReason.CANCELLED, "stop", False)
    assert store.lease_holder(ROOM) is None
    with pytest.raises(redis.ResponseError, match="LEASELOST"):
        commit(scripts, keys, "c1:1", 1, 1)
    # Nothing of the abandoned turn was written.
    assert [m.seq for m in store.read_messages(ROOM)] == [1]
    assert store.redis.xlen(keys.turns(ROOM)) == 0
    assert store.read_state(ROOM).last_seq == 1


def test_a_commit_that_comes_first_ends_the_run_and_cancel_finds_none(store, scripts, keys):
    running_with_open_turn(store, scripts, keys)
    payload = {"fields": {"recent": "[]"}, "usage": {}, "record": {"turn": "1"},
               "stop": {"status": "idle", "reason": "lull", "detail": ""}, "turns_maxlen": "100",
               "log_maxlen": "0", "events_maxlen": "100"}
    scripts.commit(keys=[keys.lease(ROOM), keys.state(ROOM), keys.log(ROOM), keys.turns(ROOM),
                         keys.events(ROOM)], args=["c1:1", 1, 1, orjson.dumps(payload)])

    result = store.cancel(ROOM)

    assert result.cancelled is False
    state = store.read_state(ROOM)
    assert (state.status, state.stop_reason) == ("idle", StopReason.LULL)
    assert store.lease_holder(ROOM) == "c1:1"


def test_after_a_cancel_a_new_holder_starts_the_posts_waiting_as_a_new_run(store, scripts, keys):
    running_with_open_turn(store, scripts, keys)
    store.post(ROOM, "Ann", "and now?")
    assert store.cancel(ROOM).waiting == 1
    assert acquire(scripts, keys, "c2") == 2
    assert drain(scripts, keys, "c2:2") == 1
    state = store.read_state(ROOM)
    assert (state.status, state.run, state.turn, state.stop_reason) == ("running", 2, 1, None)


# --- delete


def test_delete_is_refused_while_a_coordinator_holds_the_room(store, scripts, keys):
    running_with_open_turn(store, scripts, keys)
    before = room_keys_present(store.redis, keys)
    with pytest.raises(RoomHeld, match="held by coordinator c1"):
        store.delete(ROOM)
    assert room_keys_present(store.redis, keys) == before
    assert store.lease_holder(ROOM) == "c1:1"


def test_a_forced_delete_fences_the_holder_out_and_leaves_nothing(store, scripts, keys):
    running_with_open_turn(store, scripts, keys)
    store.write_answers(ROOM, [Answer(agent="A", turn=1)], 100)

    assert store.delete(ROOM, force=True) >= 5

    assert room_keys_present(store.redis, keys) == []
    assert store.redis.zscore(keys.rooms, ROOM) is None
    assert store.redis.zscore(keys.runnable, ROOM) is None
    with pytest.raises(redis.ResponseError, match="LEASELOST"):
        commit(scripts, keys, "c1:1", 1, 1)
    with pytest.raises(redis.ResponseError, match="NOROOM"):
        scripts.acquire(keys=[keys.lease(ROOM), keys.state(ROOM), keys.events(ROOM)],
                        args=["c2", TTL_MS, 1000])
    assert room_keys_present(store.redis, keys) == []


def test_a_delete_that_expects_a_state_the_room_left_changes_nothing(store):
    store.post(ROOM, "User", "hi")
    with pytest.raises(RoomChanged, match="inbox"):
        store.delete(ROOM, expect={"last_seq": "0"}, inbox_newest="0-0")
    with pytest.raises(RoomChanged, match="last_seq"):
        store.delete(ROOM, expect={"last_seq": "7"})
    assert store.redis.xlen(store.keys.inbox(ROOM)) == 1


def test_deleting_a_room_that_is_not_there_says_so(store):
    with pytest.raises(RoomNotFound):
        store.delete("nope")


@pytest.mark.parametrize(("setup", "why"), [
    ("running", "a run is in progress"), ("posts", "posts are waiting"), ("held", "HELD")])
def test_an_expiry_deletes_only_an_idle_room(store, scripts, keys, setup, why):
    if setup == "running":
        acquire(scripts, keys, "c1")
        store.post(ROOM, "User", "task")
        drain(scripts, keys, "c1:1")
        scripts.release(keys=[keys.lease(ROOM)], args=["c1:1"])
    elif setup == "posts":
        store.post(ROOM, "User", "task")
    else:
        acquire(scripts, keys, "c1")
    with pytest.raises(redis.ResponseError, match=why):
        scripts.delete(keys=keys.room_keys(ROOM), args=["0", "1", "{}", ""])
    assert store.read_state(ROOM)


# --- the log's cap


def test_a_capped_log_keeps_about_its_cap_of_the_newest_messages(store, scripts, keys):
    acquire(scripts, keys, "c1")
    for i in range(1, 351):
        store.post(ROOM, "User", f"m{i}")
        scripts.drain(keys=[keys.lease(ROOM), keys.state(ROOM), keys.inbox(ROOM),
                            keys.log(ROOM), keys.dead_letters(ROOM), keys.events(ROOM)],
                      args=["c1:1", 1, 100, *DRAIN_LIMITS[:4], LOG_CAP, 1000])
    length = store.redis.xlen(keys.log(ROOM))
    assert 100 <= length <= 200
    messages = store.read_messages(ROOM)
    assert messages[-1].seq == 350 and [m.seq for m in messages] == list(range(351 - length, 351))


def test_a_commit_trims_the_log_to_its_cap_and_zero_never_trims(store, scripts, keys):
    # Nothing renews the lease: it must outlast 300 turns on fakeredis on a loaded machine.
    acquire(scripts, keys, "c1", ttl_ms=120_000)
    for turn in range(1, 301):
        store.post(ROOM, "User", "go")
        drain(scripts, keys, "c1:1")
        open_turn(scripts, keys, "c1:1")
        seq = store.read_state(ROOM).last_seq
        payload = {"message": {"sender": "A", "content": "hi"}, "fields": {}, "usage": {},
                   "record": {}, "turns_maxlen": "1000", "events_maxlen": "1000",
                   "log_maxlen": str(LOG_CAP) if turn > 200 else "0"}
        scripts.commit(keys=[keys.lease(ROOM), keys.state(ROOM), keys.log(ROOM),
                             keys.turns(ROOM), keys.events(ROOM)],
                       args=["c1:1", turn, seq, orjson.dumps(payload)])
        if turn == 200:
            assert store.redis.xlen(keys.log(ROOM)) == 400
    assert 100 <= store.redis.xlen(keys.log(ROOM)) <= 200
    assert store.read_state(ROOM).last_seq == 600


def test_an_import_in_progress_is_never_taken_by_a_coordinator(any_redis, keys):
    store = RoomStore(any_redis, keys)
    store.reserve("incoming")
    # A stale runnable entry (a renewal that raced a delete) points a scan at it.
    any_redis.zadd(keys.runnable, {"incoming": 0})
    with pytest.raises(redis.ResponseError, match="NOROOM the room is being imported"):
        Scripts(any_redis).acquire(
            keys=[keys.lease("incoming"), keys.state("incoming"), keys.events("incoming")],
            args=["c1", TTL_MS, 1000])
    assert any_redis.get(keys.lease("incoming")) is None
    assert any_redis.hgetall(keys.state("incoming")) == {b"importing": b"1"}
