"""Calls of many rooms share a task message: how requests are grouped into messages, when
the coordinator's outbox sends what it gathered, and the worker task's two forms."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from structlog.testing import capture_logs

from parley.coordinator.outbox import Outbox
from parley.coordinator.transport import group_requests
from parley.shared.models import CallRequest
from parley.workers import tasks


def request(room: str, agents: int = 1, deadline_in_s: float = 60.0) -> CallRequest:
    """A bid request of ``agents`` agents of ``room``."""
    return CallRequest(prefix="t", room=room, turn=1, attempt=1, snapshot_seq=0,
                       agents=[f"a{i}" for i in range(agents)], spec_version=1,
                       deadline=time.time() + deadline_in_s)


class RecordingTransport:
    """Keeps each send's requests; a send can be held until the test lets it go."""

    def __init__(self, held: bool = False) -> None:
        self.sends: list[list[tuple[str, CallRequest]]] = []
        self.entered = threading.Event()
        self.release = threading.Event()
        if not held:
            self.release.set()

    def send(self, requests: list[tuple[str, CallRequest]]) -> None:
        self.sends.append(list(requests))
        self.entered.set()
        self.release.wait(10)


def rooms_of(send: list[tuple[str, CallRequest]]) -> list[str]:
    return [req.room for _, req in send]


def test_requests_of_one_queue_share_messages_up_to_agents_per_task() -> None:
    sent = [("q", request("r1", 2)), ("q", request("r2", 2)), ("q", request("r3", 1))]
    messages = group_requests(sent, agents_per_task=4)
    assert [(queue, [r.room for r in message]) for queue, message in messages] == [
        ("q", ["r1", "r2"]), ("q", ["r3"])]


def test_requests_of_different_queues_never_share_a_message() -> None:
    sent = [("q1", request("r1")), ("q2", request("r2")), ("q1", request("r3"))]
    messages = group_requests(sent, agents_per_task=20)
    assert [(queue, [r.room for r in message]) for queue, message in messages] == [
        ("q1", ["r1", "r3"]), ("q2", ["r2"])]


def test_a_request_as_big_as_agents_per_task_goes_alone() -> None:
    sent = [("q", request("r1", 1)), ("q", request("r2", 3)), ("q", request("r3", 1))]
    messages = group_requests(sent, agents_per_task=3)
    assert [[r.room for r in message] for _, message in messages] == [["r1"], ["r2"], ["r3"]]


def test_one_room_alone_is_sent_at_once() -> None:
    transport = RecordingTransport()

    async def one_room() -> None:
        await asyncio.wait_for(Outbox(transport).send([("q", request("r1"))]), 5)

    asyncio.run(one_room())
    assert [rooms_of(send) for send in transport.sends] == [["r1"]]


def test_rooms_sending_in_the_same_tick_go_out_in_one_send() -> None:
    transport = RecordingTransport()

    async def rooms() -> None:
        outbox = Outbox(transport)
        await asyncio.gather(*(outbox.send([("q", request(f"r{i}"))]) for i in range(5)))

    asyncio.run(rooms())
    assert [rooms_of(send) for send in transport.sends] == [["r0", "r1", "r2", "r3", "r4"]]


def test_rooms_sending_while_a_publish_is_out_go_together_right_after_it() -> None:
    transport = RecordingTransport(held=True)

    async def rooms() -> None:
        outbox = Outbox(transport)
        first = asyncio.create_task(outbox.send([("q", request("r1"))]))
        await asyncio.to_thread(transport.entered.wait, 5)
        later = [asyncio.create_task(outbox.send([("q", request(room))]))
                 for room in ("r2", "r3")]
        await asyncio.sleep(0)  # the later rooms are waiting now, the first publish still out
        assert len(transport.sends) == 1
        transport.release.set()
        await asyncio.wait_for(asyncio.gather(first, *later), 5)

    asyncio.run(rooms())
    assert [rooms_of(send) for send in transport.sends] == [["r1"], ["r2", "r3"]]


def test_a_failed_publish_is_raised_in_every_room_of_the_send() -> None:
    class Refusing:
        def send(self, requests: list[tuple[str, CallRequest]]) -> None:
            raise ConnectionError("broker gone")

    async def rooms() -> list[BaseException | None]:
        outbox = Outbox(Refusing())
        return await asyncio.gather(*(outbox.send([("q", request(f"r{i}"))]) for i in range(3)),
                                    return_exceptions=True)

    assert [type(result) for result in asyncio.run(rooms())] == [ConnectionError] * 3


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list[CallRequest]:
    """The requests whose calls the task starts (their calls are not run)."""
    calls: list[CallRequest] = []

    def submit(req: CallRequest) -> tasks.Chunk:
        calls.append(req)
        return tasks.Chunk(req, None, {}, set())  # type: ignore[arg-type]

    monkeypatch.setattr(tasks, "submit_calls", submit)
    return calls


def test_the_task_still_reads_one_room_s_request_of_older_coordinators(started) -> None:
    tasks.answer_calls(request=request("r1").model_dump())
    assert [req.room for req in started] == ["r1"]


def test_a_shared_message_starts_each_room_s_calls_and_drops_those_past_their_deadline(
        started) -> None:
    message = [request("r1"), request("late", deadline_in_s=-1), request("r2"),
               {"room": "no fields"}]
    with capture_logs() as logs:
        tasks.answer_calls(requests=[r if isinstance(r, dict) else r.model_dump()
                                     for r in message])
    assert [req.room for req in started] == ["r1", "r2"]
    events = [(entry["event"], entry.get("room")) for entry in logs]
    assert ("bid_request_expired", "late") in events
    assert ("call_request_unreadable", None) in events
