"""Fixtures of the store tests: room r1 (agents A and B) and the scripts, on fakeredis and
on the real Redis (``any_redis``)."""

from __future__ import annotations

import pytest
import redis

from parley.shared.keys import Keys
from parley.shared.scripts import Scripts
from parley.shared.store import RoomStore
from tests.support.rooms import scripted_spec
from tests.support.script_calls import ROOM


@pytest.fixture
def store(any_redis: redis.Redis, keys: Keys) -> RoomStore:
    """The room store, with room r1 of agents A and B created."""
    store = RoomStore(any_redis, keys)
    store.create_room(ROOM, scripted_spec({"A": [], "B": []}))
    return store


@pytest.fixture
def scripts(any_redis: redis.Redis) -> Scripts:
    """The Lua scripts, registered on the test's Redis."""
    return Scripts(any_redis)
