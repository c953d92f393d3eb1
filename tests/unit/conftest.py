"""Fixtures of the unit layer: one in-memory Redis per test, shared by its sync and
asyncio clients (fakeredis shares data between clients only through one server)."""

from __future__ import annotations

import fakeredis
import pytest


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
