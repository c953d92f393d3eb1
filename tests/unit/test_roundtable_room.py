"""Round-table rooms through the turn loop, on fakeredis with an in-process worker twin:
the panel order over rounds, contained panelist failures, the verdict, a failing
moderator, people posting mid-debate, replay, and takeovers mid-debate."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import structlog

from parley.coordinator import policies
from parley.shared.models import AnswerStatus, CallRequest, RoomSpec, RoomStatus, StopReason
from parley.shared.store import RoomStore
from tests.support.fake_turns import serve_once
from tests.support.local_worker import LocalWorkerTransport

ROOM = "room-1"
QUESTION = "Is the Sony WH-1000XM5 worth it?"
VERDICT = "Verdict: worth it on sale; the price argument outweighs the fit complaints."


def roundtable_spec(scripts: dict[str, list[dict[str, Any]]] | None = None,
                    **policy: Any) -> RoomSpec:
    """Panelists value and quality, then Moderator; each answers its script in call order
    (by default: numbered turns, and the verdict)."""
    scripts = scripts or {}
    defaults = {"value": [{"content": f"value says {i}"} for i in range(1, 9)],
                "quality": [{"content": f"quality says {i}"} for i in range(1, 9)],
                "Moderator": [{"content": VERDICT}]}
    return RoomSpec.model_validate({
        "policy": {"kind": "roundtable", "moderator": "Moderator", "call_timeout_s": 5,
                   **policy},
        "agents": [{"name": name, "role": f"the {name}", "model": "scripted",
                    "script": scripts.get(name, script)} for name, script in defaults.items()],
    })


def run_room(sync_redis, async_redis, keys, spec: RoomSpec, transport=None):
    store = RoomStore(sync_redis, keys)
    store.create_room(ROOM, spec)
    store.post(ROOM, "User", QUESTION)
    transport = transport or LocalWorkerTransport(sync_redis, keys)
    asyncio.run(serve_once(async_redis, keys, transport))
    return store, transport


def posts(store: RoomStore) -> list[tuple[str, str]]:
    return [(m.sender, m.content) for m in store.read_messages(ROOM)]


def asked(transport: LocalWorkerTransport) -> list[tuple[int, str, str]]:
    """Every call sent: (turn, kind, agent)."""
    return [(request.turn, request.kind.value, name) for _, request in transport.sent
            for name in request.agents]


def test_seed_004_two_panelists_speak_in_order_then_the_verdict_ends_the_run(
        sync_redis, async_redis, keys):
    spec = roundtable_spec({"value": [{"content": "Strong price for the feature set."}],
                            "quality": [{"content": "Build quality is excellent."}]})
    store, transport = run_room(sync_redis, async_redis, keys, spec)

    assert posts(store) == [("User", QUESTION), ("value", "Strong price for the feature set."),
                            ("quality", "Build quality is excellent."), ("Moderator", VERDICT)]
    assert asked(transport) == [(1, "panel", "value"), (2, "panel", "quality"),
                                (3, "moderate", "Moderator")]
    state = store.read_state(ROOM)
    assert (state.status, state.stop_reason, state.answer) == (
        RoomStatus.IDLE, StopReason.VERDICT, VERDICT)
    assert state.policy_state == {"spoken": "2"}


def test_seed_004_a_panelist_that_raises_is_contained_and_the_moderator_still_runs(
        sync_redis, async_redis, keys):
    spec = roundtable_spec({"value": [{"error": "pricing service down"}]})
    with structlog.testing.capture_logs() as logs:
        store, _ = run_room(sync_redis, async_redis, keys, spec)

    assert posts(store)[1:] == [
        ("value", "(value could not respond: ScriptedError: pricing service down)"),
        ("quality", "quality says 1"), ("Moderator", VERDICT)]
    assert store.read_state(ROOM).stop_reason is StopReason.VERDICT
    failed = [e for e in logs if e["event"] == "panelist_failed"]
    assert [(e["agent"], e["error_kind"], e["error"], e["turn"], e["room"], e["log_level"])
            for e in failed] == [("value", "scripted", "ScriptedError: pricing service down", 1,
                                  ROOM, "warning")]


def test_two_rounds_give_each_panelist_two_turns_in_the_same_order(sync_redis, async_redis, keys):
    store, transport = run_room(sync_redis, async_redis, keys, roundtable_spec(rounds=2))

    assert posts(store)[1:] == [("value", "value says 1"), ("quality", "quality says 1"),
                                ("value", "value says 2"), ("quality", "quality says 2"),
                                ("Moderator", VERDICT)]
    assert [kind for _, kind, _ in asked(transport)] == ["panel"] * 4 + ["moderate"]
    assert store.read_state(ROOM).policy_state == {"spoken": "4"}


def test_a_failing_moderator_ends_the_run_failed_and_a_later_post_starts_a_new_debate(
        sync_redis, async_redis, keys):
    spec = roundtable_spec({"Moderator": [{"error": "model overloaded"}, {"content": VERDICT}]})
    store, _ = run_room(sync_redis, async_redis, keys, spec)

    state = store.read_state(ROOM)
    assert (state.status, state.stop_reason) == (RoomStatus.FAILED, StopReason.MODERATOR_FAILED)
    assert state.stop_detail == "Moderator: ScriptedError: model overloaded"
    assert state.answer is None
    debate = posts(store)
    assert [sender for sender, _ in debate] == ["User", "value", "quality"]

    store.post(ROOM, "User", "Try the verdict again.")
    asyncio.run(serve_once(async_redis, keys, LocalWorkerTransport(sync_redis, keys)))

    state = store.read_state(ROOM)
    assert (state.status, state.stop_reason, state.answer, state.run) == (
        RoomStatus.IDLE, StopReason.VERDICT, VERDICT, 2)
    assert posts(store)[:3] == debate
    assert [sender for sender, _ in posts(store)[3:]] == ["User", "value", "quality",
                                                           "Moderator"]


def test_a_panelist_nobody_answers_is_posted_as_a_note_and_the_debate_goes_on(
        sync_redis, async_redis, keys):
    transport = LocalWorkerTransport(sync_redis, keys, answering={"quality", "Moderator"})
    with structlog.testing.capture_logs() as logs:
        store, _ = run_room(sync_redis, async_redis, keys, roundtable_spec(call_timeout_s=0.2),
                            transport)

    assert posts(store)[1:] == [("value", "(value could not respond: no answer before the "
                                          "deadline)"),
                                ("quality", "quality says 1"), ("Moderator", VERDICT)]
    assert store.read_state(ROOM).stop_reason is StopReason.VERDICT
    assert [(e["turn"], e["phase"]) for e in logs if e["event"] == "turn_asked_again"] == [(1, 0)]
    assert [e["error_kind"] for e in logs if e["event"] == "panelist_failed"] == ["no_answer"]


def test_a_moderator_nobody_answers_fails_the_run_naming_the_queue(sync_redis, async_redis, keys):
    transport = LocalWorkerTransport(sync_redis, keys, answering={"value", "quality"})
    store, _ = run_room(sync_redis, async_redis, keys, roundtable_spec(call_timeout_s=0.2),
                        transport)

    state = store.read_state(ROOM)
    assert (state.status, state.stop_reason) == (RoomStatus.FAILED, StopReason.MODERATOR_FAILED)
    assert state.stop_detail.startswith("Moderator: no answer before the deadline (likely fix: "
                                        "check that a worker consumes the agent's queue")


def test_every_roundtable_turn_replays_to_its_decision(sync_redis, async_redis, keys):
    spec = roundtable_spec({"value": [{"content": "Cheap.\nquality: agreed"}, {"error": "down"}],
                            "quality": [{"content": "  "}, {"content": "Sturdy."}]}, rounds=2)
    store, _ = run_room(sync_redis, async_redis, keys, spec)

    turns = store.read_turns(ROOM)
    assert [(t.winner, t.stop_reason) for t in turns] == [
        ("value", None), ("quality", None), ("value", None), ("quality", None),
        ("Moderator", StopReason.VERDICT)]
    messages = {m.turn: m.content for m in store.read_messages(ROOM) if m.turn}
    for record in turns:
        decision = policies.replay(spec, record)
        assert (decision.winner, decision.stop, decision.cuts, decision.message) == (
            record.winner, record.stop_reason, record.cuts, messages[record.turn])
        assert decision.next is None
    assert turns[0].cuts == {"value": "quality"}
    assert [t.policy_state.get("spoken", "0") for t in turns] == ["0", "1", "2", "3", "4"]


def test_the_turn_log_line_shows_each_panel_and_moderate_call(sync_redis, async_redis, keys):
    with structlog.testing.capture_logs() as logs:
        store, _ = run_room(sync_redis, async_redis, keys, roundtable_spec())
    committed = [e for e in logs if e["event"] == "turn_committed"]
    assert [[(c["agent"], c["kind"]) for c in e["calls"]] for e in committed] == [
        [("value", "panel")], [("quality", "panel")], [("Moderator", "moderate")]]
    assert [e["stop_reason"] for e in committed] == [None, None, StopReason.VERDICT]
    assert store.read_state(ROOM).agent_totals("calls") == {
        "value": 1.0, "quality": 1.0, "Moderator": 1.0}


class PostsDuringTurn(LocalWorkerTransport):
    """Posts a person's message while turn ``turn``'s call is out, as someone would type
    into a running round-table."""

    def __init__(self, *args: Any, turn: int) -> None:
        super().__init__(*args)
        self.turn = turn

    def send(self, requests: list[tuple[str, CallRequest]]) -> None:
        if any(request.turn == self.turn for _, request in requests):
            self.store.post(ROOM, "Ann", "What about battery life?")
        super().send(requests)


def test_a_post_joins_the_transcript_at_the_next_turn_boundary_and_keeps_the_order(
        sync_redis, async_redis, keys):
    transport = PostsDuringTurn(sync_redis, keys, turn=2)
    store, _ = run_room(sync_redis, async_redis, keys, roundtable_spec(rounds=2), transport)

    messages = store.read_messages(ROOM)
    assert [(m.sender, m.turn) for m in messages] == [
        ("User", None), ("value", 1), ("quality", 2), ("Ann", None), ("value", 3),
        ("quality", 4), ("Moderator", 5)]
    assert {m.run for m in messages} == {1}
    # Turn 3's panelist is asked against a transcript that holds the post.
    snapshots = {request.turn: request.snapshot_seq for _, request in transport.sent}
    assert (snapshots[2], snapshots[3]) == (2, 4)
    assert store.read_state(ROOM).stop_reason is StopReason.VERDICT


class DiesOnTurn(LocalWorkerTransport):
    """Fails as a coordinator would die on turn ``turn``: before its call is sent, or
    (``after_sending``) once the call went out and was answered, before the commit."""

    def __init__(self, *args: Any, turn: int, after_sending: bool = False) -> None:
        super().__init__(*args)
        self.turn = turn
        self.after_sending = after_sending

    def send(self, requests: list[tuple[str, CallRequest]]) -> None:
        dying = any(request.turn == self.turn for _, request in requests)
        if dying and not self.after_sending:
            raise ConnectionError("coordinator died")
        super().send(requests)
        if dying:
            raise ConnectionError("coordinator died")


def take_over(sync_redis, async_redis, keys, dying: DiesOnTurn, spec: RoomSpec):
    store = RoomStore(sync_redis, keys)
    store.create_room(ROOM, spec)
    store.post(ROOM, "User", QUESTION)
    with pytest.raises(ConnectionError):
        asyncio.run(serve_once(async_redis, keys, dying))
    successor = LocalWorkerTransport(sync_redis, keys)
    asyncio.run(serve_once(async_redis, keys, successor, owner="c2"))
    return store, successor


def test_a_takeover_before_a_turns_call_resumes_the_debate_where_it_was(
        sync_redis, async_redis, keys):
    dying = DiesOnTurn(sync_redis, keys, turn=3)
    store, successor = take_over(sync_redis, async_redis, keys, dying, roundtable_spec(rounds=2))

    assert asked(dying) == [(1, "panel", "value"), (2, "panel", "quality")]
    assert asked(successor) == [(3, "panel", "value"), (4, "panel", "quality"),
                                (5, "moderate", "Moderator")]
    assert posts(store)[1:] == [("value", "value says 1"), ("quality", "quality says 1"),
                                ("value", "value says 2"), ("quality", "quality says 2"),
                                ("Moderator", VERDICT)]
    assert [t.epoch for t in store.read_turns(ROOM)] == [1, 1, 2, 2, 2]


def test_a_takeover_after_a_panelist_answered_reuses_its_answer_and_nobody_speaks_twice(
        sync_redis, async_redis, keys):
    dying = DiesOnTurn(sync_redis, keys, turn=2, after_sending=True)
    store, successor = take_over(sync_redis, async_redis, keys, dying, roundtable_spec())

    assert asked(successor) == [(3, "moderate", "Moderator")]
    assert posts(store)[1:] == [("value", "value says 1"), ("quality", "quality says 1"),
                                ("Moderator", VERDICT)]
    second = store.read_turns(ROOM)[1]
    assert [(a.agent, a.attempt, a.status) for a in second.bids] == [
        ("quality", 1, AnswerStatus.OK)]
    assert second.epoch == 2
    assert store.read_state(ROOM).agent_totals("calls") == {
        "value": 1.0, "quality": 1.0, "Moderator": 1.0}
