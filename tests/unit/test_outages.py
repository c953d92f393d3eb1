"""A turn that overlapped an outage of Redis or the broker gets its time again: once per
outage, a bounded number of times; on fakeredis with an in-process worker twin."""

from __future__ import annotations

import asyncio
import time

import fakeredis
import pytest
import structlog
from kombu.exceptions import OperationalError as BrokerError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from parley.coordinator.lease import Leases
from parley.coordinator.outages import MAX_GRACES, Grace, OutageClock, grace_due
from parley.coordinator.outbox import Outbox
from parley.coordinator.room_io import RoomIO
from parley.coordinator.service import Coordinator
from parley.coordinator.transport import InMemoryTransport
from parley.coordinator.turn_loop import RoomRunner, TurnOptions
from parley.shared.models import AnswerStatus
from parley.shared.scripts import Scripts
from parley.shared.settings import Settings
from parley.shared.store import RoomStore
from tests.support.clock import FakeClock
from tests.support.local_worker import LocalWorkerTransport
from tests.support.polling import wait_until_async
from tests.support.rooms import rotating_scripts, scripted_spec

ROOM = "room-1"
OPENED = 1000.0


def test_a_failure_before_the_turn_opened_gives_no_grace():
    assert not grace_due(failed_at=OPENED - 1, opened_at=OPENED, last=None)


def test_a_failure_after_the_turn_opened_gives_a_grace():
    assert grace_due(failed_at=OPENED + 1, opened_at=OPENED, last=None)


def test_an_outage_already_given_for_gives_no_second_grace():
    last = Grace(turn=1, opened_at=OPENED, given_at=OPENED + 5, count=1)
    assert not grace_due(failed_at=OPENED + 4, opened_at=OPENED, last=last)
    assert grace_due(failed_at=OPENED + 6, opened_at=OPENED, last=last)


def test_a_turn_is_given_its_time_again_at_most_max_graces_times():
    last = Grace(turn=1, opened_at=OPENED, given_at=OPENED + 5, count=MAX_GRACES)
    assert not grace_due(failed_at=OPENED + 6, opened_at=OPENED, last=last)


def test_the_clock_counts_graces_per_turn_and_forgets_a_decided_one():
    now = FakeClock(OPENED)
    clock = OutageClock(max_graces=2, clock=now)
    assert not clock.give_time_again(ROOM, 1, now())
    opened = now() - 1
    clock.failed()
    assert clock.give_time_again(ROOM, 1, opened)
    assert not clock.give_time_again(ROOM, 1, opened), "the same outage counted twice"
    now.advance(0.001)
    clock.failed()
    assert clock.give_time_again(ROOM, 1, opened)
    clock.failed()
    assert not clock.give_time_again(ROOM, 1, opened), "more than max_graces"
    assert clock.give_time_again(ROOM, 2, opened), "the next turn starts counting afresh"
    clock.forget(ROOM)
    assert clock.graces == {}


class CutOff(LocalWorkerTransport):
    """Agent0's worker answers; agent1's request is lost in an outage the coordinator
    notices (on ``flaps`` sends of turn 1) until agent1 answers from its ``answer_on``-th
    request of turn 1 on."""

    def __init__(self, store: RoomStore, clock: OutageClock, flaps: int, answer_on: int):
        super().__init__(store.redis, store.keys)
        self.clock = clock
        self.flaps = flaps
        self.answer_on = answer_on
        self.asked_agent1 = 0

    def send(self, requests) -> None:
        answered = []
        for queue, request in requests:
            if request.turn == 1 and "agent1" in request.agents:
                self.asked_agent1 += 1
                if self.asked_agent1 <= self.flaps:
                    self.clock.failed()
                if self.asked_agent1 < self.answer_on:
                    request = request.model_copy(update={
                        "agents": [a for a in request.agents if a != "agent1"]})
            answered.append((queue, request))
        super().send(answered)


def serve_room(server, store, keys, transport, clock) -> list[dict]:
    """Serve the room to its lull on one coordinator's outage clock; its log events."""

    async def serve() -> None:
        client = fakeredis.FakeAsyncRedis(server=server)
        scripts = Scripts(client)
        lease = await Leases(client, keys, scripts, "c1", 5.0).acquire(ROOM)
        await RoomRunner(lease, RoomIO(client, keys, scripts), Outbox(transport),
                         TurnOptions("t", 8, 1000), clock).run()

    with structlog.testing.capture_logs() as logs:
        asyncio.run(serve())
    return logs


def first_turn_statuses(store: RoomStore) -> dict[str, AnswerStatus]:
    return {bid.agent: bid.status for bid in store.read_turns(ROOM)[0].bids}


def test_an_agent_cut_off_by_an_outage_is_asked_again_with_the_full_bid_time(server, store,
                                                                             keys):
    store.create_room(ROOM, scripted_spec(rotating_scripts(2, 1), bid_timeout_s=0.2))
    store.post(ROOM, "User", "go")
    clock = OutageClock()
    transport = CutOff(store, clock, flaps=1, answer_on=2)

    logs = serve_room(server, store, keys, transport, clock)

    assert first_turn_statuses(store) == {"agent0": AnswerStatus.OK, "agent1": AnswerStatus.OK}
    assert transport.asked_agent1 == 2
    assert [r.agents for _, r in transport.sent if r.turn == 1][1:] == [["agent1"]], (
        "only the missing agent is asked again")
    graced = [e for e in logs if e["event"] == "turn_given_time_again"]
    assert [(e["room"], e["turn"]) for e in graced] == [(ROOM, 1)]
    assert clock.graces == {}, "a decided turn's grace is forgotten"


def test_a_turn_without_an_outage_times_its_missing_agent_out(server, store, keys):
    store.create_room(ROOM, scripted_spec(rotating_scripts(2, 1), bid_timeout_s=0.1))
    store.post(ROOM, "User", "go")
    clock = OutageClock()
    transport = CutOff(store, clock, flaps=0, answer_on=2)

    serve_room(server, store, keys, transport, clock)

    assert first_turn_statuses(store) == {"agent0": AnswerStatus.OK, "agent1": AnswerStatus.TIMEOUT}
    assert transport.asked_agent1 == 1


def test_one_outage_gives_a_turn_its_time_again_once(server, store, keys):
    store.create_room(ROOM, scripted_spec(rotating_scripts(2, 1), bid_timeout_s=0.1))
    store.post(ROOM, "User", "go")
    clock = OutageClock()
    transport = CutOff(store, clock, flaps=1, answer_on=99)

    serve_room(server, store, keys, transport, clock)

    assert first_turn_statuses(store) == {"agent0": AnswerStatus.OK, "agent1": AnswerStatus.TIMEOUT}
    assert transport.asked_agent1 == 2


def test_a_flapping_redis_cannot_keep_a_turn_open_forever(server, store, keys):
    store.create_room(ROOM, scripted_spec(rotating_scripts(2, 1), bid_timeout_s=0.1))
    store.post(ROOM, "User", "go")
    clock = OutageClock()
    transport = CutOff(store, clock, flaps=99, answer_on=99)

    serve_room(server, store, keys, transport, clock)

    assert first_turn_statuses(store) == {"agent0": AnswerStatus.OK, "agent1": AnswerStatus.TIMEOUT}
    assert transport.asked_agent1 == 1 + MAX_GRACES


def resumed_deadline(server, store, keys, outage: bool) -> tuple[float, float]:
    """A turn opened with 2 s left by a holder that then vanished, resumed by another
    coordinator; (the opened turn's deadline, the resumed turn's deadline)."""

    async def resume() -> tuple[float, float]:
        client = fakeredis.FakeAsyncRedis(server=server)
        scripts = Scripts(client)
        io = RoomIO(client, keys, scripts)
        dead = await Leases(client, keys, scripts, "dead", 5.0).acquire(ROOM)
        await io.drain_inbox(dead)
        opened = await io.open_turn(dead, 2.0)
        store.redis.delete(keys.lease(ROOM))
        clock = OutageClock()
        if outage:
            clock.failed()
        lease = await Leases(client, keys, scripts, "c2", 5.0).acquire(ROOM)
        runner = RoomRunner(lease, io, Outbox(InMemoryTransport()), TurnOptions("t", 8, 1000), clock)
        runner.spec_version, runner.spec = await io.read_spec(ROOM)
        state = (await io.drain_inbox(lease)).state
        return opened.deadline, runner.resume_turn(state).deadline

    return asyncio.run(resume())


def test_a_resumed_turn_that_overlapped_an_outage_gets_its_full_bid_time_from_now(
        server, store, keys):
    store.create_room(ROOM, scripted_spec(rotating_scripts(2, 1), bid_timeout_s=30))
    store.post(ROOM, "User", "go")

    started = time.time()
    opened, resumed = resumed_deadline(server, store, keys, outage=True)

    assert opened < started + 3
    assert resumed >= started + 30


def test_a_resumed_turn_without_an_outage_keeps_its_deadline(server, store, keys):
    store.create_room(ROOM, scripted_spec(rotating_scripts(2, 1), bid_timeout_s=30))
    store.post(ROOM, "User", "go")

    opened, resumed = resumed_deadline(server, store, keys, outage=False)

    assert resumed == pytest.approx(opened, abs=1e-5)


@pytest.mark.parametrize("error", [RedisConnectionError("gone"), TimeoutError(),
                                   BrokerError("gone")], ids=["redis", "timeout", "broker"])
def test_an_unreachable_redis_or_broker_starts_the_outage_clock(error):
    clock = OutageClock()
    clock.note_unreachable(error)
    assert clock.failed_at > 0


def test_a_refused_command_is_no_outage():
    clock = OutageClock()
    clock.note_unreachable(ResponseError("NOSCRIPT"))
    assert clock.failed_at == 0


def test_a_scan_that_cannot_reach_redis_starts_the_outage_clock(server):
    coordinator = Coordinator(Settings(key_prefix="t"), InMemoryTransport(), "c1",
                              client=fakeredis.FakeAsyncRedis(server=server))
    server.connected = False
    before = time.time()

    with structlog.testing.capture_logs() as logs:
        asyncio.run(coordinator.scan_once())

    assert [e["event"] for e in logs] == ["scan_failed"]
    assert coordinator.outages.failed_at >= before


def test_a_renewal_that_cannot_reach_redis_starts_the_outage_clock(server, store):
    store.create_room(ROOM, scripted_spec(rotating_scripts(2, 1), bid_timeout_s=60))
    store.post(ROOM, "User", "go")
    transport = InMemoryTransport()
    coordinator = Coordinator(Settings(key_prefix="t"), transport, "c1",
                              client=fakeredis.FakeAsyncRedis(server=server))

    async def renew_without_redis() -> None:
        await coordinator.scan()
        _, task = coordinator.rooms[ROOM]
        await wait_until_async(lambda: transport.sent, 5, "the room to wait for bids")
        server.connected = False
        await coordinator.keeper.renew_held(coordinator.leases)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    before = time.time()
    with structlog.testing.capture_logs() as logs:
        asyncio.run(renew_without_redis())

    assert "renew_failed" in [e["event"] for e in logs]
    assert coordinator.outages.failed_at >= before
