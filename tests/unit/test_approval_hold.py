"""The coordinator holds a phase's deadline while a tool call of it waits for a person
(fakeredis, the in-process worker twin): for as long as the approval was pending, so that
the call still has the rest of its time once answered; never past the approval's own
time; and a takeover holds it from the same records."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
import structlog

from parley.shared.approvals import Approval, held_seconds
from parley.shared.models import AnswerStatus, CallRequest, RoomSpec
from parley.shared.store import RoomStore
from parley.workers.calls import answer_call, call_in
from tests.support.fake_turns import serve_once
from tests.support.local_worker import LocalWorkerTransport
from tests.support.polling import wait_until
from tests.support.rooms import rotating_scripts, scripted_spec

ROOM = "room-1"
BID_TIMEOUT_S = 0.3


def held_spec(approval_timeout_s: float = 60.0) -> RoomSpec:
    spec = scripted_spec(rotating_scripts(2, 1), bid_timeout_s=BID_TIMEOUT_S).model_dump()
    spec.update(approvers=["alice"], approval_timeout_s=approval_timeout_s)
    return RoomSpec.model_validate(spec)


class WaitingForAPerson(LocalWorkerTransport):
    """agent0 answers at once; agent1's call asks for approval of a tool call and answers
    only once a person approved it, ``answer_after_s`` past its deadline (never, when None:
    its worker died)."""

    def __init__(self, client, keys, answer_after_s: float | None) -> None:
        super().__init__(client, keys, answering={"agent0"})
        self.answer_after_s = answer_after_s
        self.threads: list[threading.Thread] = []

    def send(self, requests: list[tuple[str, CallRequest]]) -> None:
        super().send(requests)
        for _, request in requests:
            if "agent1" in request.agents and not self.threads:
                _, spec = self.store.read_spec(request.room)
                self.store.approvals.request(request.room, "1.0.1.1.0", "agent1", "rollback",
                                             {"to": "v41"}, request.turn, request.phase,
                                             spec.approval_timeout_s)
                if self.answer_after_s is not None:
                    thread = threading.Thread(target=self.approve_then_answer,
                                              args=(request, spec))
                    thread.start()
                    self.threads.append(thread)

    def approve_then_answer(self, request: CallRequest, spec: RoomSpec) -> None:
        assert self.answer_after_s is not None
        wait_until(lambda: time.time() > request.deadline + self.answer_after_s, 30,
                   "the person's answer")
        self.store.approvals.answer(request.room, "1.0.1.1.0", approve=True, by="alice")
        answer = answer_call(spec.agent("agent1"), spec.agents, call_in(request, "agent1"),
                             lambda: [], time.time() + 30, settings=self.settings)
        self.store.write_answer(request.room, answer, 1000)


def test_a_pending_approval_keeps_the_phase_open_past_its_deadline(sync_redis, async_redis,
                                                                   keys):
    store = RoomStore(sync_redis, keys)
    store.create_room(ROOM, held_spec())
    store.post(ROOM, "User", "go")
    transport = WaitingForAPerson(sync_redis, keys, answer_after_s=1.0)

    with structlog.testing.capture_logs() as logs:
        asyncio.run(serve_once(async_redis, keys, transport))
    transport.threads[0].join(10)

    turn = store.read_turns(ROOM)[0]
    assert [(b.agent, b.status) for b in turn.bids] == [("agent0", AnswerStatus.OK),
                                                        ("agent1", AnswerStatus.OK)]
    sent_deadline = transport.sent[0][1].deadline
    assert turn.decided_at > sent_deadline + 1.0
    assert any(e["event"] == "turn_held" for e in logs)
    assert not any(e["event"] == "turn_asked_again" for e in logs)


def test_an_approval_past_its_time_holds_the_phase_no_longer(sync_redis, async_redis, keys):
    store = RoomStore(sync_redis, keys)
    store.create_room(ROOM, held_spec(approval_timeout_s=0.2))
    store.post(ROOM, "User", "go")
    transport = WaitingForAPerson(sync_redis, keys, answer_after_s=None)

    asyncio.run(serve_once(async_redis, keys, transport))

    turn = store.read_turns(ROOM)[0]
    assert [(b.agent, b.status) for b in turn.bids] == [("agent0", AnswerStatus.OK),
                                                        ("agent1", AnswerStatus.TIMEOUT)]
    sent_deadline = transport.sent[0][1].deadline
    # Held for the approval's 0.2 s at most (and its call was not asked again: it had an
    # answer of agent0's beside it).
    assert sent_deadline + 0.15 < turn.decided_at < sent_deadline + 0.9


def test_a_takeover_holds_the_phase_for_the_approval_its_predecessor_saw(
        sync_redis, async_redis, keys):
    store = RoomStore(sync_redis, keys)
    store.create_room(ROOM, held_spec())
    store.post(ROOM, "User", "go")

    class DiesAfterSending(WaitingForAPerson):
        def send(self, requests):
            super().send(requests)
            raise RuntimeError("the coordinator died")

    crashed = DiesAfterSending(sync_redis, keys, answer_after_s=None)
    with pytest.raises(RuntimeError):
        asyncio.run(serve_once(async_redis, keys, crashed, owner="dead"))
    assert store.read_state(ROOM).turn_open and store.approvals.pending(ROOM)
    # The successor resumes the open turn; its worker twin answers the approval's call
    # once a person approved it, a second past the deadline it was sent with.
    second = WaitingForAPerson(sync_redis, keys, answer_after_s=1.0)
    asyncio.run(serve_once(async_redis, keys, second, owner="c2"))
    second.threads[0].join(10)

    turn = store.read_turns(ROOM)[0]
    assert [(b.agent, b.status) for b in turn.bids] == [("agent0", AnswerStatus.OK),
                                                        ("agent1", AnswerStatus.OK)]
    assert turn.epoch == 2


def approval(requested_at: float, answered_at: float | None, expires_at: float = 1e12
             ) -> Approval:
    return Approval(id="1.0.1.1.0", agent="A", tool="t", turn=1, requested_at=requested_at,
                    expires_at=expires_at, answered_at=answered_at)


def test_overlapping_waits_count_once_and_none_past_its_expiry() -> None:
    assert held_seconds([], 100.0) == 0.0
    assert held_seconds([approval(10, 20)], 100.0) == 10.0
    assert held_seconds([approval(10, 20), approval(15, 30)], 100.0) == 20.0
    assert held_seconds([approval(10, 20), approval(40, 45)], 100.0) == 15.0
    assert held_seconds([approval(10, None)], 25.0) == 15.0  # still pending: up to now
    assert held_seconds([approval(10, None, expires_at=12)], 25.0) == 2.0
