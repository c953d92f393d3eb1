"""Spending limits through the turn loop, on fakeredis with an in-process worker twin
whose answers report tokens and cost: runs stop with ``budget`` before the turn that
would start past a limit, every call of every kind counting."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import fakeredis
import pytest
from typer.testing import CliRunner

from parley import cli
from parley.client import Client
from parley.coordinator.lease import Leases
from parley.coordinator.room_io import RoomIO
from parley.coordinator.turn_loop import RoomRunner, TurnOptions
from parley.shared.models import CallKind, RoomSpec, StopReason, Usage
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
            await RoomRunner(lease, RoomIO(async_redis, store.keys, scripts), transport,
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


def test_a_cost_limit_counts_the_selectors_calls_too(server, store):
    spec = RoomSpec.model_validate({
        "policy": {"kind": "selector", "call_timeout_s": 5,
                   "selector": {"model": "scripted",
                                "script": [{"content": p} for p in ("planner", "local") * 5]}},
        "agents": [{"name": name, "model": "scripted",
                    "script": [{"content": f"{name} says {i}"} for i in range(5)]}
                   for name in ("planner", "local")],
        "limits": {"max_cost_usd_per_run": 0.035},
    })
    store.create_room(ROOM, spec)
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
