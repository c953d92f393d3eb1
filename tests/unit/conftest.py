"""Fixtures of the unit layer: one in-memory Redis per test, shared by its sync and
asyncio clients (fakeredis shares data between clients only through one server)."""

from __future__ import annotations

from collections.abc import Iterator

import fakeredis
import pytest
from fastapi.testclient import TestClient

from tests.support.api import TOKEN, app_client


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
def api(server: fakeredis.FakeServer) -> Iterator[TestClient]:
    """The HTTP API on the test's server, without tokens."""
    with app_client(server) as client:
        yield client


@pytest.fixture
def secured(server: fakeredis.FakeServer) -> Iterator[TestClient]:
    """The HTTP API on the test's server with tokens: TOKEN and "another"."""
    with app_client(server, api_tokens=(TOKEN, "another")) as client:
        yield client
