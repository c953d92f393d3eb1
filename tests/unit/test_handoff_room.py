"""Handoff rooms through the turn loop, on fakeredis with an in-process worker twin: the
example room's handoffs, the active agent across runs, a refusal, a takeover between a
refusal and its second call, and replay of every turn."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from parley.client import load_spec
from parley.coordinator import policies
from parley.shared.models import CallKind, CallRequest, RoomSpec, StopReason
from parley.shared.store import RoomStore
from tests.support.fake_turns import serve_once
from tests.support.local_worker import LocalWorkerTransport

ROOM = "room-1"
EXAMPLE = Path(__file__).parents[2] / "examples" / "rooms" / "handoff.yaml"


def handoff_spec(scripts: dict[str, list[dict[str, Any]]], **policy: Any) -> RoomSpec:
    return RoomSpec.model_validate({
        "policy": {"kind": "handoff", "start": next(iter(scripts)), "call_timeout_s": 5,
                   **policy},
        "agents": [{"name": name, "model": "scripted", "script": script}
                   for name, script in scripts.items()],
    })


def transfer(to: str, reason: str = "") -> dict[str, Any]:
    return {"tool_calls": [{"name": f"transfer_to_{to}", "arguments": {"reason": reason}}]}


def run(store: RoomStore, async_redis, keys, transport, text: str, owner: str = "c1") -> None:
    store.post(ROOM, "User", text)
    asyncio.run(serve_once(async_redis, keys, transport, owner=owner))


def test_triage_hands_a_billing_question_to_billing_which_hands_back(
        sync_redis, async_redis, keys):
    spec = load_spec(EXAMPLE)
    store = RoomStore(sync_redis, keys)
    store.create_room(ROOM, spec)
    run(store, async_redis, keys, LocalWorkerTransport(sync_redis, keys),
        "Why was I charged $40 on March 3?")

    assert [m.sender for m in store.read_messages(ROOM)] == ["User", "triage", "billing",
                                                             "triage"]
    state = store.read_state(ROOM)
    assert (state.status, state.stop_reason) == ("idle", StopReason.WAITING_FOR_PERSON)
    assert state.floor_state["to"] == "triage"
    handoffs = [(e.model_dump()["from"], e.model_dump()["to"], e.model_dump()["reason"])
                for e in store.read_events(ROOM) if e.type == "handoff"]
    assert handoffs == [("triage", "billing", "a question about a charge"),
                        ("billing", "triage", "the charge is explained and refunded")]
    records = store.read_turns(ROOM)
    assert [r.bids[0].policy_call.name for r in records[:2]] == ["transfer_to_billing",
                                                                  "transfer_to_triage"]
    for record in records:
        assert policies.replay(spec, record).winner == record.winner


def test_a_persons_post_goes_to_the_active_agent_in_the_next_run(sync_redis, async_redis, keys):
    spec = handoff_spec({"triage": [transfer("billing"), {"content": "Passing you on."}],
                         "billing": [{"content": "Which invoice?"}, {"content": "Refunded."},
                                     {"content": "Anything else?"}]})
    store = RoomStore(sync_redis, keys)
    store.create_room(ROOM, spec)
    transport = LocalWorkerTransport(sync_redis, keys)
    run(store, async_redis, keys, transport, "I was charged twice")
    assert store.read_state(ROOM).stop_reason is StopReason.WAITING_FOR_PERSON
    run(store, async_redis, keys, transport, "The March one")

    second_run = [r.agents for _, r in transport.sent if r.turn > 2]
    assert second_run == [["billing"], ["billing"]]
    assert [m.sender for m in store.read_messages(ROOM)][-2:] == ["billing", "billing"]


def test_a_refused_transfer_asks_the_agent_again_with_the_refusal(sync_redis, async_redis, keys):
    spec = handoff_spec({"billing": [transfer("tech"), {"content": ""},
                                     {"content": "I will answer myself: it is refunded."}],
                         "triage": [], "tech": []},
                        handoffs={"billing": ["triage"]}, max_turns=1)
    store = RoomStore(sync_redis, keys)
    store.create_room(ROOM, spec)
    transport = LocalWorkerTransport(sync_redis, keys)
    run(store, async_redis, keys, transport, "Refund me")

    calls = [r for _, r in transport.sent]
    assert [(r.kind, r.phase) for r in calls] == [(CallKind.HANDOFF, 0), (CallKind.HANDOFF, 1)]
    assert "transfer to tech was refused" in calls[1].instructions["billing"]
    assert [m.content for m in store.read_messages(ROOM)][1:] == [
        "I will answer myself: it is refunded."]
    assert store.read_state(ROOM).floor_state.get("to") is None


class DiesAfterTheRefusal(LocalWorkerTransport):
    """Drops the connection when the refused transfer's second call is sent, as a
    coordinator killed between the phases."""

    def send(self, requests: list[tuple[str, CallRequest]]) -> None:
        if any(request.phase == 1 for _, request in requests):
            raise ConnectionError("coordinator gone")
        super().send(requests)


def test_a_takeover_between_a_refusal_and_its_second_call_asks_only_the_second(
        sync_redis, async_redis, keys):
    spec = handoff_spec({"billing": [transfer("tech"), {"content": ""},
                                     {"content": "Answered."}], "triage": [], "tech": []},
                        handoffs={"billing": ["triage"]}, max_turns=1)
    store = RoomStore(sync_redis, keys)
    store.create_room(ROOM, spec)
    store.post(ROOM, "User", "Refund me")
    with pytest.raises(ConnectionError):
        asyncio.run(serve_once(async_redis, keys, DiesAfterTheRefusal(sync_redis, keys)))

    successor = LocalWorkerTransport(sync_redis, keys)
    asyncio.run(serve_once(async_redis, keys, successor, owner="c2"))
    assert [(r.turn, r.phase) for _, r in successor.sent] == [(1, 1)]
    assert [m.content for m in store.read_messages(ROOM)][1:] == ["Answered."]


def test_a_transfer_step_runs_none_of_the_tool_calls_beside_it(sync_redis, async_redis, keys):
    spec = handoff_spec({"triage": [{"tool_calls": [
        {"name": "search_logs", "arguments": {}},
        {"name": "transfer_to_billing", "arguments": {"reason": "money"}}]},
        {"content": "Over to billing."}], "billing": [{"content": "Done."}]}, max_turns=2)
    store = RoomStore(sync_redis, keys)
    store.create_room(ROOM, spec)
    run(store, async_redis, keys, LocalWorkerTransport(sync_redis, keys), "help")

    first = store.read_turns(ROOM)[0].bids[0]
    assert first.tool_calls == [] and first.policy_call.name == "transfer_to_billing"
    assert [m.sender for m in store.read_messages(ROOM)] == ["User", "triage", "billing"]
