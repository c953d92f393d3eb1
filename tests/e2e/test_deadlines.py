"""Every call stops at its deadline, on a real `parley worker -c 8` and coordinator: calls
whose script sleeps for an hour hold none of the worker's slots past their turn's
deadline, other rooms on the same worker still get answers, and a warm shutdown does not
wait for the sleeps."""

from __future__ import annotations

import signal
import time
import uuid

import pytest

from parley.client import Client
from parley.coordinator.transport import CeleryTransport
from parley.shared.models import AnswerStatus, RoomSpec
from tests.chaos.harness import TASK
from tests.support.polling import wait_until
from tests.support.rooms import scripted_spec

pytestmark = [pytest.mark.e2e, pytest.mark.redis]

SLOTS = 8
# 160 agents at 20 a task (agents_per_task) are eight tasks: every slot of a -c 8 worker.
SLEEPERS = 160
HOUR = 3600


def sleeping_room(queue: str, bid_timeout_s: float) -> RoomSpec:
    """A room whose every agent sleeps an hour before it answers."""
    return RoomSpec.model_validate({
        "name": "sleepers", "policy": {"kind": "bid", "bid_timeout_s": bid_timeout_s},
        "agents": [{"name": f"s{i:03}", "model": "scripted", "queue": queue,
                    "script": [{"score": 0.9, "message": "at last", "sleep": HOUR}]}
                   for i in range(SLEEPERS)],
    })


class Worker:
    """A `parley worker -c 8` under a node name of its own, and what it is running now
    (Celery's remote control, asked of that node only)."""

    def __init__(self, processes, settings, queue: str) -> None:
        self.node = f"deadlines-{uuid.uuid4().hex[:8]}@test"
        self.process = processes.worker("-Q", queue, "-c", str(SLOTS), "-n", self.node)
        self.control = CeleryTransport(settings.broker_url, settings=settings).app.control

    def active(self) -> int | None:
        """The tasks the worker runs now; None until it answers."""
        replies = self.control.inspect(destination=[self.node], timeout=1.0).active() or {}
        return len(replies[self.node]) if self.node in replies else None


def sleepers_holding_every_slot(processes, settings, queue: str, bid_timeout_s: float
                                ) -> tuple[Worker, Client, str]:
    """A worker and a coordinator, and a room of sleepers whose calls hold every slot."""
    worker = Worker(processes, settings, queue)
    processes.coordinator()
    client = Client(settings)
    room = client.create_room(sleeping_room(queue, bid_timeout_s))
    client.post(room, TASK)
    wait_until(lambda: worker.active() == SLOTS, 30, "the sleepers' calls to hold every slot")
    return worker, client, room


def test_calls_past_their_deadline_free_the_workers_slots_for_other_rooms(
        processes, settings, queue):
    worker, client, sleepers = sleepers_holding_every_slot(processes, settings, queue, 2)

    other = client.create_room(scripted_spec(
        {"Quick": [{"score": 0.9, "message": "on time"}], "Calm": [{"score": 0.2, "message": "-"}]},
        queue=queue, bid_timeout_s=30))
    inbox_id = client.post(other, TASK)
    result = client.wait(other, inbox_id, timeout_s=25)

    # The other room's calls got slots once the sleepers' deadline passed, an hour early.
    assert [(m.sender, m.content) for m in result.messages] == [("User", TASK),
                                                                ("Quick", "on time")]
    wait_until(lambda: worker.active() == 0, 20, "the worker's slots to be free again")
    # Its calls were cut at the deadline: none answered in time.
    assert not any(bid.status is AnswerStatus.OK for bid in client.turns(sleepers)[0].bids)


def test_a_worker_stopped_warmly_does_not_wait_for_its_calls_sleeps(processes, settings, queue):
    worker, client, room = sleepers_holding_every_slot(processes, settings, queue, 60)
    deadline = client.state(room).turn_deadline

    started = time.time()
    worker.process.send_signal(signal.SIGTERM)
    code = worker.process.wait(max(1.0, deadline - started))

    # Out before the calls' deadline (and an hour before their sleeps would have ended).
    assert code == 0
    assert time.time() < deadline
