"""Calls of many rooms share a task message, on real worker and coordinator processes: one
message carrying calls of rooms with different deadlines has the expired call dropped and
the others answered in their own rooms; many rooms running at once share messages; and a
room alone is not delayed by it."""

from __future__ import annotations

import statistics
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from prometheus_client import REGISTRY

from parley.client import Client
from parley.coordinator.transport import CeleryTransport
from parley.processes import free_port
from parley.shared.metrics import added_seconds
from parley.shared.models import CallRequest, StopReason
from tests.e2e.test_metrics import scrape, status_of, value
from tests.support.observe import log_events
from tests.support.polling import wait_until
from tests.support.rooms import rotating_scripts, scripted_spec

pytestmark = [pytest.mark.e2e, pytest.mark.redis]

AGENTS, TURNS, ROOMS = 3, 3, 12
# A coordinator that waited a scan (or any fixed window) to gather calls would add at
# least this much to every turn of a room alone; sending at once adds a loop iteration.
ALONE_ADDED_S = 0.1


def call_of(room: str, deadline_in_s: float) -> CallRequest:
    """Turn 1's bids of a fresh room's agents, on its empty log."""
    return CallRequest(prefix="", room=room, turn=1, attempt=1,
                       agents=[f"agent{i}" for i in range(AGENTS)], snapshot_seq=0,
                       deadline=time.time() + deadline_in_s, spec_version=1)


def sent_messages() -> float:
    return REGISTRY.get_sample_value("parley_call_messages_total") or 0.0


def test_a_shared_message_drops_its_expired_call_and_answers_the_others_in_their_own_rooms(
        processes, settings, queue):
    processes.worker("-Q", queue, "-c", "2")
    client = Client(settings)
    spec = scripted_spec(rotating_scripts(AGENTS, 1), queue)
    near, far, late = (client.create_room(spec) for _ in range(3))
    requests = [call_of(near, 20), call_of(late, -1), call_of(far, 60)]
    requests = [req.model_copy(update={"prefix": settings.key_prefix}) for req in requests]
    before = sent_messages()

    CeleryTransport(settings.broker_url, settings=settings).send(
        [(queue, request) for request in requests])

    assert sent_messages() - before == 1  # the three rooms' nine calls in one message
    store = client.store
    for room in (near, far):
        wait_until(lambda room=room: len(store.read_answers(room)) == AGENTS, 60,
                   f"room {room}'s own answers")
        assert {answer.agent for _, answer in store.read_answers(room)} == {
            f"agent{i}" for i in range(AGENTS)}
    wait_until(lambda: log_events(processes, "bid_request_expired", late), 10,
               "the expired call to be dropped")
    assert store.read_answers(late) == []


def test_many_rooms_share_messages_and_a_room_alone_is_not_delayed(processes, settings, queue):
    port = free_port()
    processes.worker("-Q", queue, "-c", "4")
    processes.coordinator("--health-port", str(port))
    wait_until(lambda: status_of(port, "/readyz") == 200, 60, "the coordinator to be ready")
    client = Client(settings)
    spec = scripted_spec(rotating_scripts(AGENTS, TURNS), queue, max_messages=TURNS + 1)
    alone = client.run(spec, "warm up, alone", timeout_s=60)

    rooms = [client.create_room(spec) for _ in range(ROOMS)]
    with ThreadPoolExecutor(ROOMS) as pool:
        posts = list(pool.map(lambda room: client.post(room, "go"), rooms))
        results = list(pool.map(lambda pair: client.wait(*pair, timeout_s=120),
                                zip(rooms, posts, strict=True)))

    assert {result.stop_reason for result in results} == {StopReason.MAX_MESSAGES}
    metrics = scrape(port)
    calls, messages = (value(metrics, "parley_calls_sent_total"),
                       value(metrics, "parley_call_messages_total"))
    assert calls == AGENTS * TURNS * (ROOMS + 1)
    assert messages < calls / AGENTS, "no message carried the calls of more than one room"
    added = [added_seconds(record) for record in client.turns(alone.room)]
    assert statistics.median(a for a in added if a is not None) < ALONE_ADDED_S
