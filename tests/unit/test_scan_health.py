"""A coordinator whose scans keep failing goes round (live) but takes no room: its
readiness names the scan and the last error after SCANS_FAILED_NOT_READY scans in a row,
and ``parley status`` says so beside its heartbeat. On fakeredis."""

from __future__ import annotations

import asyncio

import pytest
from typer.testing import CliRunner

from parley import cli
from parley.client import Client
from parley.coordinator.service import SCANS_FAILED_NOT_READY, Coordinator
from parley.coordinator.transport import InMemoryTransport
from parley.shared.health import FailedRounds, Liveness, Probes
from parley.shared.keys import Keys
from parley.shared.settings import Settings
from parley.shared.store import RoomStore

SETTINGS = Settings(key_prefix="t", lease_ttl_s=5.0)


@pytest.fixture
def keys() -> Keys:
    return Keys("t")


@pytest.fixture
def served(async_redis) -> Coordinator:
    return Coordinator(SETTINGS, InMemoryTransport(), "c1", client=async_redis)


def scan(coordinator: Coordinator, times: int) -> None:
    async def scans() -> None:
        for _ in range(times):
            await coordinator.scan_once()

    asyncio.run(scans())


def break_the_runnable_set(sync_redis, keys: Keys) -> None:
    """Another tool overwrote the runnable set: every scan fails to read it."""
    sync_redis.set(keys.runnable, "not a sorted set")


def readiness(coordinator: Coordinator) -> tuple[int, dict]:
    return Probes(Liveness(30), {"scan": coordinator.scans.check}).readyz()


def test_a_coordinator_whose_scans_keep_failing_is_not_ready_naming_the_scan(
        served, sync_redis, keys):
    break_the_runnable_set(sync_redis, keys)

    scan(served, SCANS_FAILED_NOT_READY - 1)
    assert readiness(served)[0] == 200
    scan(served, 1)
    status, body = readiness(served)

    assert (status, body["down"]) == (503, ["scan"])
    assert body["checks"]["scan"].startswith(
        f"RoundsFailing: {SCANS_FAILED_NOT_READY} scans in a row failed, the last with "
        "ResponseError: WRONGTYPE")


def test_a_scan_that_works_again_makes_the_coordinator_ready_again(served, sync_redis, keys):
    break_the_runnable_set(sync_redis, keys)
    scan(served, SCANS_FAILED_NOT_READY)
    assert sync_redis.exists(keys.scans_failing("c1"))

    sync_redis.delete(keys.runnable)
    scan(served, 1)

    assert readiness(served) == (200, {"ready": True, "checks": {"scan": "ok"}})
    assert not sync_redis.exists(keys.scans_failing("c1"))


def test_status_shows_a_coordinator_whose_scans_keep_failing(served, sync_redis, keys,
                                                             monkeypatch):
    break_the_runnable_set(sync_redis, keys)
    scan(served, SCANS_FAILED_NOT_READY + 2)
    client = Client(SETTINGS)
    client.redis, client.store = sync_redis, RoomStore(sync_redis, keys)
    monkeypatch.setattr(cli.common, "Client", lambda: client)

    result = CliRunner().invoke(cli.app, ["status"])

    assert result.exit_code == 0, result.output
    (line,) = [line for line in result.output.splitlines() if line.startswith("coordinator")]
    assert line.startswith("coordinator c1: live, last heartbeat ")
    assert (f", not ready: {SCANS_FAILED_NOT_READY + 2} scans in a row failed, the last with "
            "ResponseError: WRONGTYPE") in line


def test_rounds_that_fail_count_until_one_works():
    rounds = FailedRounds("scans", 2)
    rounds.failed("ResponseError: boom")
    rounds.check()
    rounds.failed("ResponseError: bang")
    with pytest.raises(Exception, match="2 scans in a row failed, the last with "
                                        "ResponseError: bang"):
        rounds.check()
    rounds.succeeded()
    rounds.check()
