"""An organization's max_live_rooms on the real Redis: the check and the count are one
script (claim_org_room.lua), so creates at once take exactly the places there are; a
delete gives its place back, and a background task's own room takes none."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
import redis

from parley.shared.keys import Keys
from parley.shared.organizations import OrgLimits, RoomLimitReached, write_limits
from parley.shared.store import RoomExists, RoomStore
from tests.conftest import REDIS_URL
from tests.support.rooms import scripted_spec

SPEC = scripted_spec({"A": [], "B": []})


def at_limit(client: redis.Redis, keys: Keys, most: int) -> RoomStore:
    write_limits(client, keys, {"acme": OrgLimits(max_live_rooms=most)})
    return RoomStore(client, keys)


def test_creates_at_once_at_a_limit_of_k_leave_exactly_k_rooms(real_redis, keys):
    at_limit(real_redis, keys, 3)
    tries = 12
    start = threading.Barrier(tries)

    def create(n: int) -> str:
        store = RoomStore(redis.Redis.from_url(REDIS_URL), keys)  # a connection of its own
        start.wait()
        try:
            store.create_room(f"room-{n}", SPEC, "acme")
            return "created"
        except RoomLimitReached:
            return "refused"
        finally:
            store.redis.close()

    with ThreadPoolExecutor(tries) as pool:
        outcomes = list(pool.map(create, range(tries)))

    assert outcomes.count("created") == 3 and outcomes.count("refused") == tries - 3
    made = [n for n in range(tries) if real_redis.exists(keys.state(f"room-{n}"))]
    assert len(made) == 3
    assert real_redis.smembers(keys.org_rooms("acme")) == {f"room-{n}".encode() for n in made}


def test_a_delete_frees_a_place_and_the_next_create_takes_it(real_redis, keys):
    store = at_limit(real_redis, keys, 2)
    store.create_room("a", SPEC, "acme")
    store.create_room("b", SPEC, "acme")
    with pytest.raises(RoomLimitReached, match="organization acme has 2 rooms, its "
                                               "max_live_rooms is 2: delete or archive"):
        store.create_room("c", SPEC, "acme")
    store.delete("a")
    store.create_room("c", SPEC, "acme")
    with pytest.raises(RoomLimitReached):
        store.create_room("d", SPEC, "acme")
    assert real_redis.smembers(keys.org_rooms("acme")) == {b"b", b"c"}


def test_a_task_room_is_created_past_the_limit(real_redis, keys):
    store = at_limit(real_redis, keys, 1)
    store.create_room("top", SPEC, "acme")
    assert store.create_task_room("top.task-abc123", SPEC, "top", "abc123", "acme")
    assert real_redis.smembers(keys.org_rooms("acme")) == {b"top"}
    store.delete("top.task-abc123")
    assert real_redis.smembers(keys.org_rooms("acme")) == {b"top"}


def test_a_create_refused_for_an_id_taken_gives_its_place_back(real_redis, keys):
    store = at_limit(real_redis, keys, 5)
    store.create_room("taken", SPEC, "other")
    with pytest.raises(RoomExists):
        store.create_room("taken", SPEC, "acme")
    assert real_redis.scard(keys.org_rooms("acme")) == 0
    assert real_redis.smembers(keys.org_rooms("other")) == {b"taken"}
