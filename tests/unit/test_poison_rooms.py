"""A room that fails every take ends failed (room_error) after room_max_errors takes in a row,
instead of being taken again forever; a post gives it its tries again. On fakeredis."""

from __future__ import annotations

import asyncio

import orjson
import pytest
import structlog
from redis.exceptions import ConnectionError as RedisConnectionError

from parley.client import RunTimeout
from parley.coordinator.lease import LeaseLost
from parley.coordinator.service import Coordinator, error_line
from parley.coordinator.transport import InMemoryTransport, Transport
from parley.shared.keys import Keys
from parley.shared.models import RoomStatus, StopReason
from parley.shared.scripts import Scripts
from parley.shared.settings import Settings
from parley.shared.store import RoomStore
from tests.support.local_worker import LocalWorkerTransport
from tests.support.rooms import rotating_scripts, scripted_spec

ROOM = "room-1"


@pytest.fixture
def store(sync_redis, keys) -> RoomStore:
    store = RoomStore(sync_redis, keys)
    store.create_room(ROOM, scripted_spec(rotating_scripts(2, 2)))
    return store


def corrupt_spec(store: RoomStore, keys: Keys) -> None:
    """Another tool sets a field of the stored spec to null: it no longer validates."""
    spec = orjson.loads(store.redis.hget(keys.spec(ROOM), "json"))
    spec["agents"][0]["name"] = None
    store.redis.hset(keys.spec(ROOM), "json", orjson.dumps(spec))


def repair_spec(store: RoomStore, keys: Keys) -> None:
    spec = scripted_spec(rotating_scripts(2, 2))
    store.redis.hset(keys.spec(ROOM), "json", spec.model_dump_json())


def coordinator(async_redis, transport: Transport, most: int = 3) -> Coordinator:
    settings = Settings(key_prefix="t", room_max_errors=most, lease_ttl_s=5.0)
    return Coordinator(settings, transport, "c1", client=async_redis)


async def take(coordinator: Coordinator, sync_redis, keys: Keys, times: int) -> None:
    """Scan ``times`` times, serving each take to its end. A room still runnable is made due
    now first: as if its lease's ttl had passed (the retry's back-off)."""
    for _ in range(times):
        sync_redis.zadd(keys.runnable, {ROOM: 0}, xx=True)
        await coordinator.scan()
        for _, task in list(coordinator.rooms.values()):
            await task


def events(logs: list[dict], name: str) -> list[dict]:
    return [entry for entry in logs if entry["event"] == name]


def test_a_room_whose_spec_no_longer_validates_fails_after_room_max_errors_takes(
        store, sync_redis, async_redis, keys):
    corrupt_spec(store, keys)
    store.post(ROOM, "User", "go")

    with structlog.testing.capture_logs() as logs:
        asyncio.run(take(coordinator(async_redis, InMemoryTransport()), sync_redis, keys, 6))

    state = store.read_state(ROOM)
    assert (state.status, state.stop_reason, state.failed_takes) == (
        RoomStatus.FAILED, StopReason.ROOM_ERROR, 3)
    assert state.stop_detail.startswith("ValidationError: 1 validation error for RoomSpec")
    assert "agents.0.name" in state.stop_detail and "\n" not in state.stop_detail
    # Six chances, three takes: the failed room left the runnable set.
    assert state.epoch == 3
    assert sync_redis.zscore(keys.runnable, ROOM) is None
    assert [e["attempt"] for e in events(logs, "room_take_failed")] == [1, 2, 3]
    (failed,) = events(logs, "room_failed")
    assert (failed["attempts"], failed["error"]) == (3, state.stop_detail)


def test_a_post_after_the_spec_is_repaired_runs_the_room_again(store, sync_redis, async_redis,
                                                               keys):
    corrupt_spec(store, keys)
    store.post(ROOM, "User", "go")
    asyncio.run(take(coordinator(async_redis, InMemoryTransport()), sync_redis, keys, 3))
    assert store.read_state(ROOM).stop_reason is StopReason.ROOM_ERROR

    repair_spec(store, keys)
    store.post(ROOM, "User", "again")
    worker = LocalWorkerTransport(sync_redis, keys)
    asyncio.run(take(coordinator(async_redis, worker), sync_redis, keys, 1))

    state = store.read_state(ROOM)
    assert (state.status, state.stop_reason, state.failed_takes) == (
        RoomStatus.IDLE, StopReason.LULL, 0)
    assert [m.sender for m in store.read_messages(ROOM)] == [
        "User", "User", "agent1", "agent0"]


def test_a_later_post_gives_a_failed_room_its_tries_again(store, sync_redis, async_redis, keys):
    corrupt_spec(store, keys)
    store.post(ROOM, "User", "go")
    asyncio.run(take(coordinator(async_redis, InMemoryTransport()), sync_redis, keys, 3))

    store.post(ROOM, "User", "still there?")
    assert store.read_state(ROOM).failed_takes == 0
    asyncio.run(take(coordinator(async_redis, InMemoryTransport()), sync_redis, keys, 2))
    assert store.read_state(ROOM).failed_takes == 2
    assert sync_redis.zscore(keys.runnable, ROOM) is not None
    asyncio.run(take(coordinator(async_redis, InMemoryTransport()), sync_redis, keys, 2))

    state = store.read_state(ROOM)
    assert (state.failed_takes, state.epoch) == (3, 6)
    assert sync_redis.zscore(keys.runnable, ROOM) is None


@pytest.mark.parametrize("error", [RedisConnectionError("Redis went away"),
                                   ConnectionResetError("broker reset"),
                                   LeaseLost("lease on room-1 lost")])
def test_outages_and_lost_leases_are_not_counted_against_the_room(
        store, sync_redis, async_redis, keys, error):
    store.post(ROOM, "User", "go")
    served = coordinator(async_redis, InMemoryTransport(), most=2)

    async def fail(room: str):
        raise error

    served.io.read_spec = fail  # type: ignore[method-assign]
    asyncio.run(take(served, sync_redis, keys, 4))

    state = store.read_state(ROOM)
    assert (state.failed_takes, state.status, state.epoch) == (0, RoomStatus.IDLE, 4)


def test_a_commit_resets_the_count_of_failed_takes(store, sync_redis, async_redis, keys):
    store.post(ROOM, "User", "go")

    class FailsOnce(LocalWorkerTransport):
        def send(self, requests):
            if not self.sent:
                self.sent.append(requests[0])
                raise RuntimeError("publish refused")
            super().send(requests)

    served = coordinator(async_redis, FailsOnce(sync_redis, keys))
    asyncio.run(take(served, sync_redis, keys, 1))
    assert store.read_state(ROOM).failed_takes == 1
    asyncio.run(take(served, sync_redis, keys, 1))

    state = store.read_state(ROOM)
    assert (state.failed_takes, state.status, state.stop_reason) == (
        0, RoomStatus.IDLE, StopReason.LULL)
    assert state.last_error == "RuntimeError: publish refused"


def test_an_error_is_one_line_with_its_class():
    error = ValueError("first line\n  second   line")
    assert error_line(error) == "ValueError: first line second line"
    assert error_line(KeyError()) == "KeyError"
    assert len(error_line(RuntimeError("x" * 2000))) == 500


# --- how a waiting client sees it


def fail_room(sync_redis, keys: Keys, takes: int, error: str = "ValidationError: bad spec"):
    """What a coordinator does when each of ``takes`` takes of the room fails."""
    scripts = Scripts(sync_redis)
    for _ in range(takes):
        sync_redis.delete(keys.lease(ROOM))
        epoch = int(scripts.acquire(keys=[keys.lease(ROOM), keys.state(ROOM), keys.events(ROOM)],
                                    args=["c1", 5000, 1000]))
        scripts.count_failed_take(keys=[keys.lease(ROOM), keys.state(ROOM), keys.inbox(ROOM),
                                        keys.events(ROOM)],
                                  args=[f"c1:{epoch}", 3, error, 1000])


def test_wait_reports_a_room_that_failed_after_its_post(client, sync_redis, keys):
    inbox_id = client.post(ROOM, "go")
    fail_room(sync_redis, keys, 3)

    result = client.wait(ROOM, inbox_id, timeout_s=5, start_timeout_s=5)

    assert (result.status, result.stop_reason, result.stop_detail) == (
        RoomStatus.FAILED, StopReason.ROOM_ERROR, "ValidationError: bad spec")


def test_wait_does_not_take_a_failure_from_before_its_post_for_its_own(client, sync_redis,
                                                                        keys):
    client.post(ROOM, "earlier")
    fail_room(sync_redis, keys, 3)
    assert client.state(ROOM).stop_reason is StopReason.ROOM_ERROR

    inbox_id = client.post(ROOM, "later")
    with pytest.raises(RunTimeout, match="no coordinator took room"):
        client.wait(ROOM, inbox_id, timeout_s=5, start_timeout_s=0.3)


def test_wait_that_times_out_names_the_failed_takes_since_its_post(client, sync_redis, keys):
    inbox_id = client.post(ROOM, "go")
    fail_room(sync_redis, keys, 1, "KeyError: 'json'")

    with pytest.raises(RunTimeout, match=r"1 take\(s\) failed, last with KeyError: 'json'"):
        client.wait(ROOM, inbox_id, timeout_s=5, start_timeout_s=0.3)
