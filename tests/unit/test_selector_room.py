"""Selector rooms through the turn loop, on fakeredis with an in-process worker twin:
phases, retries, the cap, replay and a takeover between phases."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import structlog

from parley.coordinator import policies
from parley.coordinator.turn_loop import MESSAGE_LOG_CHARS
from parley.shared.models import CallKind, CallRequest, RoomSpec, StopReason
from parley.shared.store import RoomStore
from parley.views.transcript import transcript_text
from tests.support.fake_turns import serve_once
from tests.support.local_worker import LocalWorkerTransport

ROOM = "room-1"


def selector_spec(picks: list[str], replies: dict[str, list[str]] | None = None,
                  **policy: Any) -> RoomSpec:
    replies = replies or {}
    return RoomSpec.model_validate({
        "policy": {"kind": "selector", "call_timeout_s": 5,
                   "selector": {"model": "scripted", "script": [{"content": p} for p in picks]},
                   **policy},
        "agents": [{"name": name, "role": f"the {name}", "model": "scripted",
                    "script": [{"content": text} for text in replies.get(name, [])]
                    or [{"content": f"{name} says {i}"} for i in range(1, 20)]}
                   for name in ("planner", "local", "budget")],
    })


def run_room(sync_redis, async_redis, keys, spec: RoomSpec, transport=None):
    store = RoomStore(sync_redis, keys)
    store.create_room(ROOM, spec)
    store.post(ROOM, "User", "Plan a 3-day Tokyo trip under $1,500")
    transport = transport or LocalWorkerTransport(sync_redis, keys)
    asyncio.run(serve_once(async_redis, keys, transport))
    return store, transport


def speakers(transport: LocalWorkerTransport) -> list[str]:
    return [name for _, request in transport.sent if request.kind is CallKind.SPEAK
            for name in request.agents]


def test_seed_002_participants_speak_in_the_selectors_order(sync_redis, async_redis, keys):
    spec = selector_spec(["planner", "budget", "planner", "TERMINATE"],
                         {"planner": ["day plan", "cheaper hotel"], "budget": ["over by $200"]})
    store, transport = run_room(sync_redis, async_redis, keys, spec)

    assert speakers(transport) == ["planner", "budget", "planner"]
    messages = store.read_messages(ROOM)
    assert [(m.sender, m.content) for m in messages] == [
        ("User", "Plan a 3-day Tokyo trip under $1,500"), ("planner", "day plan"),
        ("budget", "over by $200"), ("planner", "cheaper hotel")]
    state = store.read_state(ROOM)
    assert (state.status, state.stop_reason) == ("idle", StopReason.TERMINATE)
    assert state.answer == "cheaper hotel"


def test_a_selector_rooms_messages_have_no_score(sync_redis, async_redis, keys):
    spec = selector_spec(["planner", "TERMINATE"], {"planner": ["day plan"]})
    store, _ = run_room(sync_redis, async_redis, keys, spec)

    messages = store.read_messages(ROOM)
    assert [m.score for m in messages] == [None, None]
    assert transcript_text(messages) == (
        "  1 User: Plan a 3-day Tokyo trip under $1,500\n  2 planner: day plan")


def test_every_selector_turn_replays_to_its_decision(sync_redis, async_redis, keys):
    # Turn 1: a retry; turn 2: back to back, then the rotation; turn 3: back to back, then
    # TERMINATE on the retry.
    spec = selector_spec(["nobody", "planner", "planner", "??", "local", "TERMINATE"])
    store, _ = run_room(sync_redis, async_redis, keys, spec)
    turns = store.read_turns(ROOM)
    assert [(t.winner, t.stop_reason) for t in turns] == [
        ("planner", None), ("local", None), (None, StopReason.TERMINATE)]
    for record in turns:
        decision = policies.replay(spec, record)
        assert (decision.winner, decision.stop) == (record.winner, record.stop_reason)


def test_an_invalid_pick_is_retried_as_a_new_call_then_the_rotation_takes_over(
        sync_redis, async_redis, keys):
    # Turn 1: "nobody" then a valid retry. Turn 2: planner again (back to back), then an
    # unknown name: the rotation gives the participant after planner.
    spec = selector_spec(["nobody", "planner", "planner", "accountant", "TERMINATE"])
    store, transport = run_room(sync_redis, async_redis, keys, spec)

    assert speakers(transport) == ["planner", "local"]
    first, second, _ = store.read_turns(ROOM)
    assert [(a.kind, a.phase, a.call, a.message) for a in first.bids] == [
        (CallKind.SELECT, 0, 1, "nobody"), (CallKind.SELECT, 1, 2, "planner"),
        (CallKind.SPEAK, 2, 1, "planner says 1")]
    assert [a.message for a in second.bids if a.kind is CallKind.SELECT] == ["planner", "accountant"]


def test_the_cap_ends_the_run_with_max_turns(sync_redis, async_redis, keys):
    spec = selector_spec(["planner", "local", "budget", "planner"], max_turns=3)
    store, _ = run_room(sync_redis, async_redis, keys, spec)
    state = store.read_state(ROOM)
    assert state.stop_reason is StopReason.MAX_TURNS
    assert len(store.read_messages(ROOM)) == 1 + 3


def test_selector_calls_count_in_the_turn_log_line_and_the_totals(sync_redis, async_redis, keys):
    spec = selector_spec(["nobody", "planner", "TERMINATE"])
    with structlog.testing.capture_logs() as logs:
        store, _ = run_room(sync_redis, async_redis, keys, spec)
    committed = [e for e in logs if e["event"] == "turn_committed"]
    assert [[(c["agent"], c["kind"]) for c in e["calls"]] for e in committed] == [
        [("selector", "select"), ("selector", "select"), ("planner", "speak")],
        [("selector", "select")]]
    calls = store.read_state(ROOM).agent_totals("calls")
    assert calls == {"selector": 3.0, "planner": 1.0}


def test_the_turn_log_line_shows_the_speaker_and_the_start_of_the_posted_message(
        sync_redis, async_redis, keys):
    long_reply = "Day one:\n" + "temples and ramen " * 40
    spec = selector_spec(["planner", "budget", "TERMINATE"],
                         {"planner": [long_reply], "budget": ["over by $200"]})
    with structlog.testing.capture_logs() as logs:
        run_room(sync_redis, async_redis, keys, spec)

    first, second, last = [e for e in logs if e["event"] == "turn_committed"]
    assert (second["speaker"], second["message"]) == ("budget", "over by $200")
    assert (last["speaker"], last["message"]) == (None, None)
    assert first["speaker"] == "planner"
    assert first["message"].startswith("Day one: temples and ramen temples")
    assert first["message"].endswith("...") and len(first["message"]) == MESSAGE_LOG_CHARS
    assert [set(call) for call in first["calls"]] == [
        {"agent", "kind", "status", "prompt_tokens", "completion_tokens", "cost_usd",
         "latency_ms"}] * 2


class DiesBeforeSpeaking(LocalWorkerTransport):
    """Answers the selector, then fails as a coordinator would die right before asking
    the chosen participant."""

    def send(self, requests: list[tuple[str, CallRequest]]) -> None:
        if any(request.kind is CallKind.SPEAK for _, request in requests):
            raise ConnectionError("coordinator died")
        super().send(requests)


def test_a_takeover_between_phases_does_not_ask_the_selector_again(sync_redis, async_redis, keys):
    spec = selector_spec(["budget", "TERMINATE"])
    store = RoomStore(sync_redis, keys)
    store.create_room(ROOM, spec)
    store.post(ROOM, "User", "go")
    with pytest.raises(ConnectionError):
        asyncio.run(serve_once(async_redis, keys, DiesBeforeSpeaking(sync_redis, keys)))

    successor = LocalWorkerTransport(sync_redis, keys)
    asyncio.run(serve_once(async_redis, keys, successor, owner="c2"))

    first_turn = [request for _, request in successor.sent if request.turn == 1]
    assert [request.kind for request in first_turn] == [CallKind.SPEAK]
    assert [m.sender for m in store.read_messages(ROOM)] == ["User", "budget"]
    assert store.read_state(ROOM).stop_reason is StopReason.TERMINATE


class LosesTheFirstSpeakCall(LocalWorkerTransport):
    """Loses the first request to a participant, as when the worker holding it is killed."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.lost: list[CallRequest] = []

    def send(self, requests: list[tuple[str, CallRequest]]) -> None:
        if not self.lost and any(request.kind is CallKind.SPEAK for _, request in requests):
            self.lost.extend(request for _, request in requests)
            return
        super().send(requests)


def test_a_participant_call_nobody_answered_is_asked_once_more(sync_redis, async_redis, keys):
    spec = selector_spec(["budget", "TERMINATE"], call_timeout_s=0.3)
    transport = LosesTheFirstSpeakCall(sync_redis, keys)
    with structlog.testing.capture_logs() as logs:
        store, _ = run_room(sync_redis, async_redis, keys, spec, transport)

    assert [(m.sender, m.content) for m in store.read_messages(ROOM)][1:] == [
        ("budget", "budget says 1")]
    asked_again = [(e["turn"], e["phase"]) for e in logs if e["event"] == "turn_asked_again"]
    assert asked_again == [(1, 1)]
    speak = [a for a in store.read_turns(ROOM)[0].bids if a.kind is CallKind.SPEAK]
    assert [(a.status, a.call) for a in speak] == [("ok", 1)]
