"""Fixtures of the unit layer: one in-memory Redis per test, shared by its sync and
asyncio clients (fakeredis shares data between clients only through one server), and the
key names, room store and Client on it."""

from __future__ import annotations

import fakeredis
import pytest

from parley.client import Client
from parley.shared.keys import Keys
from parley.shared.settings import Settings
from parley.shared.store import RoomStore


@pytest.fixture
def server() -> fakeredis.FakeServer:
    """The test's in-memory Redis server."""
    return fakeredis.FakeServer()


@pytest.fixture
def sync_redis(server: fakeredis.FakeServer) -> fakeredis.FakeRedis:
    """A sync client of the test's server (clients, stores, the in-process worker)."""
    return fakeredis.FakeRedis(server=server)


@pytest.fixture
def async_redis(server: fakeredis.FakeServer) -> fakeredis.FakeAsyncRedis:
    """An asyncio client of the test's server (the coordinator's side)."""
    return fakeredis.FakeAsyncRedis(server=server)


@pytest.fixture
def keys() -> Keys:
    """Key names under the unit layer's prefix, ``t`` (each test has its own server)."""
    return Keys("t")


@pytest.fixture
def store(sync_redis: fakeredis.FakeRedis, keys: Keys) -> RoomStore:
    """The room store on the test's server."""
    return RoomStore(sync_redis, keys)


@pytest.fixture
def client(store: RoomStore) -> Client:
    """A Client on the test's store, as the front door and the CLI use it."""
    client = Client(Settings(key_prefix=store.keys.prefix))
    client.redis = store.redis
    client.store = store
    return client
