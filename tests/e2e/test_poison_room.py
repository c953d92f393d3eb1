"""A room whose stored spec stops validating, across real processes: it ends failed with
room_error after room_max_errors takes, the waiting client is told so, and a post after the
spec is repaired runs it again."""

from __future__ import annotations

import orjson
import pytest

from parley.client import Client
from parley.shared.keys import Keys
from parley.shared.models import RoomStatus, StopReason
from parley.shared.store import now_ms
from tests.support.commands import run_parley
from tests.support.observe import log_events, wait_for_scans
from tests.support.polling import wait_until
from tests.support.rooms import rotating_scripts, scripted_spec

pytestmark = [pytest.mark.e2e, pytest.mark.redis]

# A short lease: a failed take is retried after the ttl.
COORDINATOR_ENV = {"PARLEY_LEASE_TTL_S": "1", "PARLEY_ROOM_MAX_ERRORS": "3"}


def test_a_room_whose_stored_spec_is_corrupted_fails_and_runs_again_once_repaired(
        processes, settings, queue, real_redis, keys: Keys):
    processes.worker("-Q", queue)
    processes.coordinator(env=COORDINATOR_ENV)
    client = Client(settings)
    spec = scripted_spec(rotating_scripts(2, 2), queue=queue)
    room = client.create_room(spec)
    stored = orjson.loads(real_redis.hget(keys.spec(room), "json"))
    stored["policy"]["bid_timeout_s"] = None  # what a non-finite number used to become
    real_redis.hset(keys.spec(room), "json", orjson.dumps(stored))

    result = client.wait(room, client.post(room, "go"), timeout_s=60)

    assert (result.status, result.stop_reason) == (RoomStatus.FAILED, StopReason.ROOM_ERROR)
    assert result.stop_detail.startswith("ValidationError: 1 validation error for RoomSpec")
    assert "bid_timeout_s" in result.stop_detail
    state = client.state(room)
    assert state.failed_takes == state.epoch == 3
    # The failure is seen as it commits; the coordinator logs it a moment later.
    (failed,) = wait_until(lambda: log_events(processes, "room_failed"), 15, "room_failed")
    assert (failed["room"], failed["attempts"], failed["error"]) == (room, 3, result.stop_detail)
    status = run_parley(processes.env, "status")
    assert f"room {room} failed after 3 take(s): ValidationError" in status.stdout
    # Failed rooms stay down: not taken again while nobody posts, by scans begun after a
    # failed take's lease would have lapsed (when a take that failed is retried).
    lease_ttl_ms = int(float(COORDINATOR_ENV["PARLEY_LEASE_TTL_S"]) * 1000)
    wait_for_scans(real_redis, keys, 2, since_ms=now_ms() + lease_ttl_ms)
    assert client.state(room).epoch == 3

    real_redis.hset(keys.spec(room), "json", spec.model_dump_json())
    again = client.wait(room, client.post(room, "again"), timeout_s=60)

    assert (again.status, again.stop_reason) == (RoomStatus.IDLE, StopReason.LULL)
    assert [m.sender for m in again.messages] == ["User", "User", "agent1", "agent0"]
    assert client.state(room).failed_takes == 0
