"""Spending limits through the turn loop, on fakeredis with an in-process worker twin
whose answers report tokens and cost: runs stop with ``budget`` before the turn that
would start past a limit, every call of every kind counting."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import fakeredis
import pytest
import structlog
from typer.testing import CliRunner

from parley import cli
from parley.client import Client
from parley.coordinator.lease import LeaseLost, Leases
from parley.coordinator.outbox import Outbox
from parley.coordinator.room_io import RoomIO
from parley.coordinator.turn_loop import RoomRunner, TurnOptions
from parley.shared.models import (
    Answer,
    AnswerStatus,
    CallKind,
    CallRequest,
    ErrorKind,
    RoomSpec,
    StopReason,
    Usage,
)
from parley.shared.scripts import Scripts
from parley.shared.settings import Settings
from parley.shared.store import RoomStore
from tests.support.local_worker import LocalWorkerTransport
from tests.support.rooms import rotating_scripts, scripted_spec

ROOM = "room-1"
# Every answer of these tests reports 110 tokens: 3 bids make a turn of 330.
PER_CALL = {"prompt_tokens": 100, "completion_tokens": 10}


def serve(server, store: RoomStore, transport: LocalWorkerTransport) -> None:
    """One coordinator serving the room until it goes idle."""
    async_redis = fakeredis.FakeAsyncRedis(server=server)

    async def run() -> None:
        scripts = Scripts(async_redis)
        leases = Leases(async_redis, store.keys, scripts, "c1", 5.0)
        lease = await leases.acquire(ROOM)
        assert lease is not None
        try:
            await RoomRunner(lease, RoomIO(async_redis, store.keys, scripts), Outbox(transport),
                             TurnOptions("t", 8, 1000)).run()
        finally:
            await leases.release(lease)

    asyncio.run(run())


def bid_room(**limits: Any) -> RoomSpec:
    spec = scripted_spec(rotating_scripts(3, 20))
    return spec.model_copy(update={"limits": spec.limits.model_copy(update=limits)})


def turns_sent(transport: LocalWorkerTransport) -> list[int]:
    return sorted({request.turn for _, request in transport.sent})


@pytest.mark.parametrize(("limit", "turns"), [(661, 3), (660, 2), (330, 1), (1, 1)])
def test_a_run_stops_with_budget_before_the_turn_that_would_start_past_its_token_limit(
        server, store, limit, turns):
    store.create_room(ROOM, bid_room(max_tokens_per_run=limit))
    store.post(ROOM, "User", "go")
    transport = LocalWorkerTransport(store.redis, store.keys, usage=PER_CALL)

    serve(server, store, transport)

    # A turn starts while the run's total is under the limit: reaching it stops the next.
    assert turns_sent(transport) == list(range(1, turns + 1))
    assert len(store.read_messages(ROOM)) == 1 + turns
    state = store.read_state(ROOM)
    spent = 330 * turns
    assert (state.status, state.stop_reason) == ("idle", StopReason.BUDGET)
    assert state.stop_detail == (
        f"limits.max_tokens_per_run reached: this run's calls used {spent:,} tokens "
        f"({300 * turns:,} prompt + {30 * turns} completion), the limit is {limit:,}")
    assert state.run_usage == state.usage == Usage(prompt_tokens=300 * turns,
                                                   completion_tokens=30 * turns)
    assert sum(record.prompt_tokens for record in store.read_turns(ROOM)) == 300 * turns


def test_each_run_has_its_own_budget_and_the_room_one_for_all_runs(server, store):
    store.create_room(ROOM, bid_room(max_tokens_per_run=700, max_tokens_per_room=1000))
    transport = LocalWorkerTransport(store.redis, store.keys, usage=PER_CALL)

    store.post(ROOM, "User", "first")
    serve(server, store, transport)
    first = store.read_state(ROOM)
    store.post(ROOM, "User", "second")
    serve(server, store, transport)
    second = store.read_state(ROOM)
    store.post(ROOM, "User", "third")
    serve(server, store, transport)
    third = store.read_state(ROOM)

    # Run 1: three turns (990 tokens), stopped by the run's limit. Run 2 starts from 0 but
    # the room is at 990: one turn takes it to 1,320, past the room's 1,000. Run 3 starts
    # no turn at all.
    assert turns_sent(transport) == [1, 2, 3, 4]
    assert (first.run, first.stop_reason, first.run_usage.tokens) == (1, StopReason.BUDGET, 990)
    assert "max_tokens_per_run" in first.stop_detail
    assert (second.run, second.run_usage.tokens, second.usage.tokens) == (2, 330, 1320)
    assert second.stop_detail.startswith("limits.max_tokens_per_room reached: this room's "
                                         "calls used 1,320 tokens")
    assert (third.run, third.stop_reason, third.run_usage, third.usage.tokens) == (
        3, StopReason.BUDGET, Usage(), 1320)
    assert [m.content for m in store.read_messages(ROOM)][-1] == "third"


def selector_room(**limits: Any) -> RoomSpec:
    """A selector room whose selector picks planner, then local, and so on."""
    return RoomSpec.model_validate({
        "policy": {"kind": "selector", "call_timeout_s": 5,
                   "selector": {"model": "scripted",
                                "script": [{"content": p} for p in ("planner", "local") * 5]}},
        "agents": [{"name": name, "model": "scripted",
                    "script": [{"content": f"{name} says {i}"} for i in range(5)]}
                   for name in ("planner", "local")],
        "limits": limits,
    })


def test_a_cost_limit_counts_the_selectors_calls_too(server, store):
    store.create_room(ROOM, selector_room(max_cost_usd_per_run=0.035))
    store.post(ROOM, "User", "plan")
    transport = LocalWorkerTransport(store.redis, store.keys, usage={"cost_usd": 0.01})

    serve(server, store, transport)

    # Each turn is a pick and a reply, $0.02: two turns reach $0.04, past $0.035. Counting
    # the replies alone ($0.02 after two turns) would have let a third turn start.
    kinds = [request.kind for _, request in transport.sent]
    assert kinds == [CallKind.SELECT, CallKind.SPEAK] * 2
    state = store.read_state(ROOM)
    assert state.stop_reason is StopReason.BUDGET
    assert state.stop_detail == ("limits.max_cost_usd_per_run reached: this run's calls cost "
                                 "$0.04, the limit is $0.035")
    assert state.agent_totals("cost_usd") == pytest.approx({"selector": 0.02, "planner": 0.01,
                                                            "local": 0.01})


def test_a_rooms_totals_read_zero_before_any_call(server, store, monkeypatch):
    store.create_room(ROOM, bid_room())
    client = Client(Settings(key_prefix="t"))
    client.redis, client.store = store.redis, store
    monkeypatch.setattr(cli.common, "Client", lambda: client)

    shown = json.loads(CliRunner().invoke(cli.app, ["status", ROOM, "--raw"]).stdout)

    assert {name: shown[name] for name in ("prompt_tokens", "completion_tokens", "cost_usd")} == {
        "prompt_tokens": "0", "completion_tokens": "0", "cost_usd": "0"}
    state = client.state(ROOM)
    assert (state.usage, state.run_usage) == (Usage(), Usage())
    assert state.totals() == {"prompt_tokens": 0.0, "completion_tokens": 0.0, "cost_usd": 0.0}


def test_a_room_stored_without_totals_still_shows_them_as_zero(server, store, monkeypatch):
    store.create_room(ROOM, bid_room())
    store.redis.hdel(store.keys.state(ROOM), "prompt_tokens", "completion_tokens", "cost_usd")
    client = Client(Settings(key_prefix="t"))
    client.redis, client.store = store.redis, store
    monkeypatch.setattr(cli.common, "Client", lambda: client)

    shown = json.loads(CliRunner().invoke(cli.app, ["status", ROOM, "--raw"]).stdout)

    assert (shown["prompt_tokens"], shown["completion_tokens"], shown["cost_usd"]) == ("0", "0", "0")
    assert client.state(ROOM).usage == Usage()


def late_room(**limits: Any) -> RoomSpec:
    """agent0 and agent1 take turns at 0.9; agent2 always bids 0.2, and late."""
    scripts = {**rotating_scripts(2, 20), "agent2": [{"score": 0.2, "message": "-"}] * 20}
    spec = scripted_spec(scripts, bid_timeout_s=0.5)
    return spec.model_copy(update={"limits": spec.limits.model_copy(update=limits)})


class LateTransport(LocalWorkerTransport):
    """agent2's answer to each turn is written only as the next turn's calls go out, after
    its turn was decided: a late answer, paid for all the same."""

    def send(self, requests: list[tuple[str, CallRequest]]) -> None:
        for _, request in requests:
            if request.turn > 1 and "agent2" in request.agents:
                late = Answer(agent="agent2", turn=request.turn - 1, score=0.2, message="-",
                           call=request.turn - 1, answer_id=f"late-{request.turn}", **PER_CALL)
                self.store.write_answer(request.room, late, 1000)
        super().send(requests)


def test_late_answers_count_in_the_totals_and_the_next_turn_records_them_as_late(server, store):
    store.create_room(ROOM, late_room(max_tokens_per_run=500))
    store.post(ROOM, "User", "go")
    transport = LateTransport(store.redis, store.keys, answering={"agent0", "agent1"},
                              usage=PER_CALL)

    serve(server, store, transport)

    # Turn 1: 220 tokens in time; agent2's 110 land during turn 2, with its 220: 550 is past
    # 500 before turn 3. Counting only the answers in time (440) would have let turn 3 start.
    assert turns_sent(transport) == [1, 2]
    state = store.read_state(ROOM)
    assert (state.stop_reason, state.run_usage.tokens, state.usage.tokens) == (
        StopReason.BUDGET, 550, 550)
    assert state.agent_totals("prompt_tokens") == {"agent0": 200, "agent1": 200, "agent2": 100}
    first, second = store.read_turns(ROOM)
    assert [(b.agent, b.status) for b in first.bids][-1] == ("agent2", "timeout")
    assert first.late == []
    assert [(b.agent, b.turn, b.prompt_tokens) for b in second.late] == [("agent2", 1, 100)]
    assert (second.prompt_tokens, second.completion_tokens) == (300, 30)


def test_the_answers_of_a_cancelled_turn_count_and_stop_the_next_run(server, store):
    store.create_room(ROOM, bid_room(max_tokens_per_room=300))
    store.post(ROOM, "User", "go")

    class CancelledMidTurn(LocalWorkerTransport):
        """The run is cancelled once the calls went out; the answers land after it."""

        def send(self, requests: list[tuple[str, CallRequest]]) -> None:
            self.store.cancel(ROOM, "changed my mind")
            super().send(requests)

    with pytest.raises(LeaseLost):
        serve(server, store, CancelledMidTurn(store.redis, store.keys, usage=PER_CALL))
    cancelled = store.read_state(ROOM)
    store.post(ROOM, "User", "again")
    transport = LocalWorkerTransport(store.redis, store.keys, usage=PER_CALL)
    serve(server, store, transport)

    # The abandoned turn's three answers (330 tokens) were paid: the room is past its 300.
    assert (cancelled.stop_reason, cancelled.usage.tokens) == (StopReason.CANCELLED, 330)
    assert store.read_turns(ROOM) == []
    assert transport.sent == []
    state = store.read_state(ROOM)
    assert (state.run, state.stop_reason) == (2, StopReason.BUDGET)
    assert state.stop_detail.startswith("limits.max_tokens_per_room reached: this room's calls "
                                        "used 330 tokens")


def test_each_calls_request_carries_what_is_left_of_the_limits(server, store):
    store.create_room(ROOM, bid_room(max_tokens_per_run=1000, max_tokens_per_room=800,
                                     max_cost_usd_per_run=0.5))
    store.post(ROOM, "User", "go")
    transport = LocalWorkerTransport(store.redis, store.keys,
                                     usage={**PER_CALL, "cost_usd": 0.01})

    serve(server, store, transport)

    # 330 tokens and $0.03 a turn: the room's 800 tokens bind before the run's 1,000.
    left = [(request.turn, request.max_tokens, request.max_cost_usd)
            for _, request in transport.sent]
    assert left == [(1, 800, 0.5), (2, 470, pytest.approx(0.47)), (3, 140, pytest.approx(0.44))]
    assert store.read_state(ROOM).stop_reason is StopReason.BUDGET


def test_a_room_without_limits_sends_no_caps(server, store):
    store.create_room(ROOM, bid_room())
    store.post(ROOM, "User", "go")
    transport = LocalWorkerTransport(store.redis, store.keys, usage=PER_CALL)

    serve(server, store, transport)

    assert {(request.max_tokens, request.max_cost_usd) for _, request in transport.sent} == {
        (None, None)}


def test_a_phase_with_nothing_left_for_it_is_not_made_and_the_run_stops_budget(server, store):
    store.create_room(ROOM, selector_room(max_cost_usd_per_run=0.015))
    store.post(ROOM, "User", "plan")
    transport = LocalWorkerTransport(store.redis, store.keys, usage={"cost_usd": 0.02})

    serve(server, store, transport)

    # The pick cost $0.02, past the $0.015: the reply it asked for is never sent.
    assert [request.kind for _, request in transport.sent] == [CallKind.SELECT]
    detail = "limits.max_cost_usd_per_run reached: this run's calls cost $0.02, the limit is $0.015"
    [record] = store.read_turns(ROOM)
    assert [(b.agent, b.kind, b.error_kind, b.error) for b in record.bids][1] == (
        "planner", CallKind.SPEAK, ErrorKind.BUDGET, detail)
    state = store.read_state(ROOM)
    assert (state.stop_reason, state.stop_detail) == (StopReason.BUDGET, detail)
    assert [m.sender for m in store.read_messages(ROOM)] == ["User"]


def test_a_call_asked_again_counts_both_its_answers_once_each(server, store):
    store.create_room(ROOM, scripted_spec(rotating_scripts(3, 1), bid_timeout_s=0.5))
    store.post(ROOM, "User", "go")

    class SlowFirstAsk(LocalWorkerTransport):
        """Nobody answers the first ask in time; its answers land as the turn is asked
        again, just before the second ask's."""

        def send(self, requests: list[tuple[str, CallRequest]]) -> None:
            if self.sent:
                for _, request in self.sent:
                    for name in request.agents:
                        first = Answer(agent=name, turn=request.turn, score=0.2, message="-",
                                    call=1, answer_id=f"first-{name}", **PER_CALL)
                        self.store.write_answer(request.room, first, 1000)
                super().send(requests)
            else:
                self.sent.extend(requests)

    transport = SlowFirstAsk(store.redis, store.keys, usage=PER_CALL)
    with structlog.testing.capture_logs() as logs:
        serve(server, store, transport)

    # Six answers paid (the first ask's three, late, and the second's), each counted once.
    assert [e["event"] for e in logs].count("turn_asked_again") == 1
    [record] = store.read_turns(ROOM)
    assert len(record.bids) == len(record.late) == 3
    assert store.read_state(ROOM).run_usage.tokens == 6 * 110
    assert record.prompt_tokens == 6 * 100


def test_a_timeout_of_the_first_ask_landing_after_the_turn_is_asked_again_does_not_end_it(
        server, store):
    store.create_room(ROOM, scripted_spec(rotating_scripts(3, 1), bid_timeout_s=0.5))
    store.post(ROOM, "User", "go")

    class FirstAskTimesOut(LocalWorkerTransport):
        """The first ask's calls run into their deadline on a slow worker: their timeouts
        land just after the turn is asked again, before the second ask's answers."""

        def send(self, requests: list[tuple[str, CallRequest]]) -> None:
            if self.sent:
                for _, request in self.sent:
                    for name in request.agents:
                        late = Answer(agent=name, turn=request.turn, call=1,
                                      status=AnswerStatus.TIMEOUT, error_kind=ErrorKind.TIMEOUT,
                                      answer_id=f"first-{name}")
                        self.store.write_answer(request.room, late, 1000)
                super().send(requests)
            else:
                self.sent.extend(requests)

    with structlog.testing.capture_logs() as logs:
        serve(server, store, FirstAskTimesOut(store.redis, store.keys, usage=PER_CALL))

    assert [e["event"] for e in logs].count("turn_asked_again") == 1
    record = store.read_turns(ROOM)[0]
    # The second ask's answers decided the turn; the first ask's timeouts are late.
    assert {bid.status for bid in record.bids} == {AnswerStatus.OK}
    assert [bid.status for bid in record.late] == [AnswerStatus.TIMEOUT] * 3
    assert record.stop_reason is not StopReason.NO_BIDS
