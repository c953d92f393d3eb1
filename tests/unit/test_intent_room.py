"""Intent-mode rooms through the turn loop, on fakeredis with an in-process worker twin:
both phases recorded, replay, streamed chunks in the events, and a takeover between the
phases."""

from __future__ import annotations

import asyncio

import pytest

from parley.coordinator import policies
from parley.shared.events import MessageChunk
from parley.shared.models import CallKind, CallRequest, RoomSpec, StopReason
from parley.shared.store import RoomStore
from tests.support.events import check_event_order
from tests.support.fake_turns import serve_once
from tests.support.local_worker import LocalWorkerTransport

ROOM = "room-1"
A_REPLY = "A opens the discussion with a plan: ship the small cohort first, then widen it."
B_REPLY = "B objects: the plan is too costly."


def intent_spec() -> RoomSpec:
    # Each agent's k-th call replays entry k: an intent per turn, and the winner's reply
    # as its next call.
    return RoomSpec.model_validate({
        "policy": {"kind": "bid", "bid_mode": "intent", "bid_timeout_s": 5},
        "agents": [
            {"name": "A", "model": "scripted", "script": [
                {"score": 0.9, "message": "open with a plan"}, {"content": A_REPLY},
                {"score": 0.2, "message": "more"}]},
            {"name": "B", "model": "scripted", "script": [
                {"score": 0.3, "message": "b"}, {"score": 0.8, "message": "object to cost"},
                {"content": B_REPLY}]},
            {"name": "C", "model": "scripted", "script": []},
        ],
    })


def start(sync_redis, keys) -> RoomStore:
    store = RoomStore(sync_redis, keys)
    store.create_room(ROOM, intent_spec())
    store.post(ROOM, "User", "go")
    return store


def test_only_the_winner_writes_its_reply_and_both_phases_are_recorded(
        sync_redis, async_redis, keys):
    store = start(sync_redis, keys)
    transport = LocalWorkerTransport(sync_redis, keys, streams=True)
    asyncio.run(serve_once(async_redis, keys, transport))

    assert [(m.sender, m.content, m.score) for m in store.read_messages(ROOM)] == [
        ("User", "go", None), ("A", A_REPLY, 0.9), ("B", B_REPLY, 0.8)]
    assert store.read_state(ROOM).stop_reason is StopReason.LULL
    asked = [(request.turn, request.kind, tuple(request.agents)) for _, request in transport.sent]
    assert asked == [(1, CallKind.INTENT, ("A", "B", "C")), (1, CallKind.REPLY, ("A",)),
                     (2, CallKind.INTENT, ("A", "B", "C")), (2, CallKind.REPLY, ("B",)),
                     (3, CallKind.INTENT, ("A", "B", "C"))]
    reply_request = transport.sent[1][1]
    assert reply_request.instructions == {"A": "open with a plan"}

    turns = store.read_turns(ROOM)
    assert [[(bid.kind, bid.phase, bid.agent) for bid in record.bids] for record in turns[:2]] == [
        [(CallKind.INTENT, 0, "A"), (CallKind.INTENT, 0, "B"), (CallKind.INTENT, 0, "C"),
         (CallKind.REPLY, 1, "A")],
        [(CallKind.INTENT, 0, "A"), (CallKind.INTENT, 0, "B"), (CallKind.INTENT, 0, "C"),
         (CallKind.REPLY, 1, "B")]]
    for record in turns:
        decision = policies.replay(intent_spec(), record)
        assert (decision.winner, decision.score, decision.stop) == (
            record.winner, record.score, record.stop_reason)
    assert policies.replay(intent_spec(), turns[0]).message == A_REPLY


def test_replies_stream_their_chunks_before_the_message_and_intents_do_not(
        sync_redis, async_redis, keys):
    store = start(sync_redis, keys)
    asyncio.run(serve_once(async_redis, keys, LocalWorkerTransport(sync_redis, keys, streams=True)))

    events = store.read_events(ROOM)
    check_event_order(events, store.read_messages(ROOM))
    chunks = [event for event in events if isinstance(event, MessageChunk)]
    assert {(chunk.turn, chunk.phase, chunk.agent) for chunk in chunks} == {(1, 1, "A"),
                                                                            (2, 1, "B")}
    first = [chunk for chunk in chunks if chunk.turn == 1]
    assert [chunk.index for chunk in first] == list(range(len(first)))
    assert len(first) >= 2  # the first words go out at once, the rest coalesced
    assert "".join(chunk.text for chunk in first) == A_REPLY
    assert all(chunk.run == 1 for chunk in chunks)


class DiesBeforeReplying(LocalWorkerTransport):
    """Answers the intents, then fails as a coordinator would die right before asking the
    winner for its reply."""

    def send(self, requests: list[tuple[str, CallRequest]]) -> None:
        if any(request.kind is CallKind.REPLY for _, request in requests):
            raise ConnectionError("coordinator died")
        super().send(requests)


def test_a_takeover_between_the_phases_reuses_the_intents(sync_redis, async_redis, keys):
    store = start(sync_redis, keys)
    with pytest.raises(ConnectionError):
        asyncio.run(serve_once(async_redis, keys, DiesBeforeReplying(sync_redis, keys)))

    successor = LocalWorkerTransport(sync_redis, keys)
    asyncio.run(serve_once(async_redis, keys, successor, owner="c2"))

    first_turn = [request for _, request in successor.sent if request.turn == 1]
    assert [(request.kind, request.agents) for request in first_turn] == [
        (CallKind.REPLY, ["A"])]
    assert [(m.sender, m.content) for m in store.read_messages(ROOM)][:2] == [
        ("User", "go"), ("A", A_REPLY)]
    record = store.read_turns(ROOM)[0]
    assert [(bid.kind, bid.agent, bid.call) for bid in record.bids] == [
        (CallKind.INTENT, "A", 1), (CallKind.INTENT, "B", 1), (CallKind.INTENT, "C", 1),
        (CallKind.REPLY, "A", 2)]
    assert policies.replay(intent_spec(), record).message == A_REPLY


def test_follow_live_prints_each_reply_as_it_is_written_then_the_message(
        sync_redis, async_redis, keys, monkeypatch):
    from typer.testing import CliRunner

    from parley import cli
    from parley.client import Client, following
    from parley.shared.settings import Settings

    store = start(sync_redis, keys)
    asyncio.run(serve_once(async_redis, keys, LocalWorkerTransport(sync_redis, keys, streams=True)))
    client = Client(Settings(key_prefix="t"))
    client.redis, client.store = sync_redis, store
    monkeypatch.setattr(cli.common, "Client", lambda: client)

    def as_it_happened(room, after_seq, chunks=False):
        # The room's story as a follower reads it live: chunks in their places.
        yield from following.in_commit_order(store.read_messages(room), store.read_events(room),
                                             chunks)
        raise KeyboardInterrupt

    client.timeline = as_it_happened  # type: ignore[method-assign]
    live_lines = CliRunner().invoke(cli.app, ["follow", ROOM, "--live"]).output.splitlines()
    plain_lines = CliRunner().invoke(cli.app, ["follow", ROOM]).output.splitlines()

    assert live_lines == [
        "  1 User: go", f"... A: {A_REPLY}", f"  2 A (score 0.90): {A_REPLY}",
        f"... B: {B_REPLY}", f"  3 B (score 0.80): {B_REPLY}",
        "run 1 ended · idle · stopped by lull"]
    assert plain_lines == [line for line in live_lines if not line.startswith("...")]


def test_the_example_intent_room_runs_offline_to_a_lull(sync_redis, async_redis, keys):
    from pathlib import Path

    from parley.client import load_spec

    spec = load_spec(Path(__file__).parents[2] / "examples" / "rooms" / "intent.yaml")
    spec = spec.model_copy(update={"agents": [  # the same scripts, without their pauses
        agent.model_copy(update={"script": [entry.model_copy(update={"sleep": 0.0})
                                            for entry in agent.script or []]})
        for agent in spec.agents]})
    store = RoomStore(sync_redis, keys)
    store.create_room(ROOM, spec)
    store.post(ROOM, "User", "Ship the beta next week?")
    asyncio.run(serve_once(async_redis, keys, LocalWorkerTransport(sync_redis, keys, streams=True)))

    assert [m.sender for m in store.read_messages(ROOM)] == [
        "User", "Planner", "Skeptic", "Economist"]
    assert store.read_state(ROOM).stop_reason is StopReason.LULL
    check_event_order(store.read_events(ROOM), store.read_messages(ROOM))


def test_an_intent_turns_line_shows_the_intents_scores_and_a_failed_reply():
    from parley.shared.models import Answer, AnswerStatus, ErrorKind, TurnRecord
    from parley.views.explain import turn_line

    def answer(agent: str, kind: CallKind, phase: int, score: float = 0.0, text: str = "",
               **fields) -> Answer:
        return Answer(agent=agent, turn=1, kind=kind, phase=phase, score=score, message=text,
                   **fields)

    record = TurnRecord(
        turn=1, run=1, run_turns=1, epoch=1, snapshot_seq=1, messages_in_run=1, recent=[],
        bids=[answer("A", CallKind.INTENT, 0, 0.9, "plan"),
              answer("B", CallKind.INTENT, 0, 0.6, "object"),
              answer("C", CallKind.INTENT, 0),
              answer("A", CallKind.REPLY, 1, status=AnswerStatus.ERROR, error="cut off",
                     error_kind=ErrorKind.CONNECTION),
              answer("B", CallKind.REPLY, 2, text=B_REPLY)],
        adjusted={"A": 0.9, "B": 0.6, "C": 0.0}, winner="B", score=0.6)

    assert turn_line(intent_spec(), record).text() == (
        "bids: A 0.90, B 0.60, C silent · A could not respond (connection)")
