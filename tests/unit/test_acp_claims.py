"""An ACP agent's call is run once however often the broker delivers it: the first worker to
take it claims it until the call's deadline, and a copy reaching any worker meanwhile is
dropped; a call asked again after its deadline is taken afresh."""

from __future__ import annotations

import time

import pytest

from parley.shared.keys import Keys
from parley.shared.models import AgentSpec, CallRequest
from parley.shared.store import RoomStore
from parley.workers.tasks import taken_already

ROOM = "room-1"
DEV = AgentSpec.model_validate({"name": "dev", "model": "acp/dev"})
LEAD = AgentSpec.model_validate({"name": "lead", "model": "scripted", "script": []})


@pytest.fixture
def keys(prefix: str) -> Keys:
    """The test's own prefix: on the real Redis it is deleted afterwards."""
    return Keys(prefix)


def request(deadline: float, turn: int = 3, attempt: int = 1) -> CallRequest:
    return CallRequest(prefix="t", room=ROOM, turn=turn, attempt=attempt, agents=["dev"],
                       snapshot_seq=1, deadline=deadline, spec_version=1)


def test_a_copy_of_a_call_a_worker_took_is_dropped_until_its_deadline(any_redis, keys):
    store = RoomStore(any_redis, keys)
    call = request(time.time() + 60)
    assert not taken_already(store, call, DEV)
    assert taken_already(store, call, DEV)  # the broker's second delivery
    assert not taken_already(store, request(time.time() + 60, turn=4), DEV)
    assert not taken_already(store, request(time.time() + 60, attempt=2), DEV)


def test_only_acp_agents_calls_are_claimed(any_redis, keys):
    store = RoomStore(any_redis, keys)
    call = request(time.time() + 60)
    assert not taken_already(store, call, LEAD)
    assert not taken_already(store, call, LEAD)
    assert not any_redis.exists(keys.acp_turn(ROOM, "lead", "3.0.1"))


def test_the_claim_lasts_until_the_calls_deadline(any_redis, keys):
    store = RoomStore(any_redis, keys)
    deadline = time.time() + 30
    assert store.claim_acp_turn(ROOM, "dev", "3.0.1", "worker-a", deadline)
    assert not store.claim_acp_turn(ROOM, "dev", "3.0.1", "worker-b", deadline)
    left_ms = any_redis.pttl(keys.acp_turn(ROOM, "dev", "3.0.1"))
    assert 25_000 < left_ms <= 30_000
    # A call past its deadline (asked again later) is never left unclaimable.
    assert store.claim_acp_turn(ROOM, "dev", "4.0.1", "worker-a", time.time() - 5)
