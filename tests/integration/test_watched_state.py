"""A policy's watched fields: commit.lua and end_run.lua write the event its record names
when a write changes one of them (a mention room's queue_changed), and name no policy
themselves. On fakeredis and on the real Redis."""

from __future__ import annotations

import orjson
import pytest
import redis

from parley.coordinator.policies import mention
from parley.coordinator.policies.base import WatchedState
from parley.coordinator.room_io import watch_payload
from parley.shared.keys import Keys
from parley.shared.scripts import Scripts
from parley.shared.store import RoomStore
from tests.support.rooms import scripted_spec

ROOM = "r1"
TOKEN = "c1:1"
ACTIVE = WatchedState("floor_changed", (("active", "nobody"), ("since", "0")))


@pytest.fixture
def store(any_redis: redis.Redis, keys: Keys) -> RoomStore:
    store = RoomStore(any_redis, keys)
    store.create_room(ROOM, scripted_spec({"A": [], "B": []}))
    scripts = Scripts(any_redis)
    scripts.acquire(keys=[keys.lease(ROOM), keys.state(ROOM), keys.events(ROOM)],
                    args=["c1", 60_000, 1000])
    return store


def commit(store: RoomStore, fields: dict[str, str], watched: WatchedState | None) -> None:
    keys, scripts = store.keys, Scripts(store.redis)
    turn, _, _ = scripts.open_turn(keys=[keys.lease(ROOM), keys.state(ROOM), keys.bids(ROOM),
                                         keys.events(ROOM)],
                                   args=[TOKEN, "2000000000.0", "1000.0", 1000])
    payload = {"fields": fields, "usage": {}, "record": {}, "turns_maxlen": "100",
               "log_maxlen": "0", "events_maxlen": "100"}
    if watched is not None:
        payload["watch"] = watch_payload(watched)
    scripts.commit(keys=[keys.lease(ROOM), keys.state(ROOM), keys.log(ROOM), keys.turns(ROOM),
                         keys.events(ROOM)], args=[TOKEN, turn, 0, orjson.dumps(payload)])


def end_run(store: RoomStore, fields: dict[str, str], watch: str) -> None:
    keys = store.keys
    pairs = [item for pair in fields.items() for item in pair]
    Scripts(store.redis).end_run(keys=[keys.lease(ROOM), keys.state(ROOM), keys.events(ROOM)],
                                 args=[TOKEN, "idle", "lull", "", 100, watch, *pairs])


def events(store: RoomStore, kind: str) -> list[dict[str, str]]:
    entries = store.redis.xrange(store.keys.events(ROOM))
    found = [{k.decode(): v.decode() for k, v in fields.items()} for _, fields in entries]
    return [event for event in found if event["type"] == kind]


def test_a_commit_that_changes_a_watched_field_writes_the_event_the_record_names(store):
    commit(store, {"floor:active": "A"}, ACTIVE)
    [changed] = events(store, "floor_changed")
    assert (changed["active"], changed["since"], changed["run"]) == ("A", "0", "0")
    commit(store, {"floor:active": "A", "policy:other": "1"}, ACTIVE)  # nothing watched moved
    assert len(events(store, "floor_changed")) == 1


def test_without_a_watch_a_commit_writes_no_queue_event_whatever_fields_it_sets(store):
    commit(store, {"floor:queue": '["A"]', "floor:waiting": "1"}, None)
    assert events(store, "queue_changed") == []


def test_a_mention_rooms_watch_is_its_speak_queue(store):
    commit(store, {"floor:queue": '["A"]'}, mention.POLICY.watched)
    [changed] = events(store, "queue_changed")
    assert {name: changed[name] for name in ("queue", "listening", "asked", "waiting", "over")
            } == {"queue": '["A"]', "listening": "[]", "asked": "[]", "waiting": "0",
                  "over": "0"}


def test_the_end_of_a_run_writes_the_watch_event_before_run_ended(store):
    end_run(store, {"floor:active": "B"}, orjson.dumps(watch_payload(ACTIVE)).decode())
    types = [event["type"] for event in events(store, "floor_changed") + events(store, "run_ended")]
    assert types == ["floor_changed", "run_ended"]


@pytest.mark.parametrize("watch", ["{", '{"event": 1, "fields": []}',
                                   '{"event": "x", "fields": [["floor:a", "a"]]}'])
def test_a_malformed_watch_is_refused_and_nothing_is_written(store, watch):
    before = store.redis.hgetall(store.keys.state(ROOM))
    with pytest.raises(redis.ResponseError, match="BADARG watch"):
        end_run(store, {"floor:active": "B"}, watch)
    assert store.redis.hgetall(store.keys.state(ROOM)) == before
