"""Fixtures shared by every layer of the suite.

Integration tests use the real Redis at PARLEY_REDIS_URL (default 127.0.0.1:6379/0),
each test under its own key prefix and Celery queue, deleted afterwards.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import fakeredis
import pytest
import redis

from parley.processes import ProcessGroup
from parley.shared.keys import Keys
from parley.shared.litellm_env import use_local_cost_map
from parley.shared.settings import Settings, get_settings

# Tests import litellm themselves (and so do the processes they start): never over the network.
use_local_cost_map()
REDIS_URL = os.environ.get("PARLEY_REDIS_URL", "redis://127.0.0.1:6379/0")


def delete_prefix(client: redis.Redis, prefix: str) -> None:
    """Delete every key under ``prefix``."""
    for key in client.scan_iter(match=f"{prefix}:*", count=1000):
        client.delete(key)


@pytest.fixture
def prefix() -> str:
    """A key prefix no other test uses."""
    return f"parley-test-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def keys(prefix: str) -> Keys:
    """Key names under the test's prefix."""
    return Keys(prefix)


@pytest.fixture
def real_redis(prefix: str) -> Iterator[redis.Redis]:
    """The real Redis; the test's keys are deleted afterwards."""
    client = redis.Redis.from_url(REDIS_URL)
    try:
        client.ping()
    except redis.RedisError as error:
        pytest.skip(f"no Redis answers at {REDIS_URL} ({error}): start one or set PARLEY_REDIS_URL")
    yield client
    delete_prefix(client, prefix)
    client.close()


@pytest.fixture
def fake_redis() -> fakeredis.FakeRedis:
    """An in-memory Redis with Lua, private to the test."""
    return fakeredis.FakeRedis(server=fakeredis.FakeServer())


@pytest.fixture(params=["fakeredis", pytest.param("redis", marks=pytest.mark.redis)])
def any_redis(request: pytest.FixtureRequest) -> redis.Redis:
    """The store tests run on both fakeredis and the real Redis."""
    fixture = "fake_redis" if request.param == "fakeredis" else "real_redis"
    return request.getfixturevalue(fixture)


@pytest.fixture
def queue() -> str:
    """A Celery queue no other test uses."""
    return f"parley-test-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def settings(prefix: str) -> Settings:
    """Settings for the test's prefix on the real Redis."""
    return Settings(redis_url=REDIS_URL, key_prefix=prefix)


@pytest.fixture
def worker_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., None]]:
    """Set environment variables for the test (None deletes one) and read the process's
    settings from them again; undone after the test, and the settings read afresh."""

    def set_env(**values: str | None) -> None:
        for name, value in values.items():
            if value is None:
                monkeypatch.delenv(name, raising=False)
            else:
                monkeypatch.setenv(name, value)
        get_settings.cache_clear()

    yield set_env
    get_settings.cache_clear()


@pytest.fixture
def processes(tmp_path: Path, prefix: str, real_redis: redis.Redis,
              request: pytest.FixtureRequest) -> Iterator[ProcessGroup]:
    """Real coordinator and worker processes for the test; all stopped by PID afterwards,
    and their logs printed when the test failed."""
    env = {
        "PARLEY_REDIS_URL": REDIS_URL,
        "PARLEY_BROKER_URL": REDIS_URL,
        "PARLEY_KEY_PREFIX": prefix,
        "PARLEY_WORKER_PRELOAD_LITELLM": "false",
        "PARLEY_LOG_FORMAT": "json",
        "PARLEY_SCAN_INTERVAL_S": "0.1",
        # No health server unless a test asks for one (--health-port): tests run side by
        # side, and the default ports are one per host.
        "PARLEY_HEALTH_PORT": "0",
    }
    group = ProcessGroup(tmp_path, env)
    try:
        yield group
    finally:
        group.stop_all()
        report = getattr(request.node, "rep_call", None)
        if report is not None and report.failed:
            print(group.log_tail())


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # noqa: ANN201
    """Keep each phase's report on the item, so fixtures can tell a test failed."""
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)


@pytest.fixture(autouse=True)
def fresh_structlog() -> Iterator[None]:
    """Each test starts from structlog's defaults and without parley's log handler (bound
    to the stream of the test that configured it), whatever an earlier test configured."""
    yield
    import logging

    import structlog

    from parley.shared.logs import HANDLER_MARK

    structlog.reset_defaults()
    structlog.contextvars.clear_contextvars()
    root = logging.getLogger()
    root.handlers = [h for h in root.handlers if not getattr(h, HANDLER_MARK, False)]
