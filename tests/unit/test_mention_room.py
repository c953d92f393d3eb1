"""Mention rooms through the turn loop, on fakeredis with the in-process worker twin:
people posting across runs, waiting and its end, silence, a person posting during an
agent's turn, replay and a takeover that keeps the queue exactly."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from parley.client import speak_queue
from parley.coordinator import policies
from parley.coordinator.policies import mention
from parley.shared.events import MessageCommitted, QueueChanged, RunEnded, RunStarted, TurnDecided
from parley.shared.models import CallKind, CallRequest, RoomSpec, StopReason
from parley.shared.store import RoomStore
from tests.support.events import check_event_order
from tests.support.fake_turns import serve_once
from tests.support.local_worker import LocalWorkerTransport

ROOM = "room-1"
AGENTS = ("investigator", "dev", "sre")


def mention_spec(replies: dict[str, list[str]], **policy: Any) -> RoomSpec:
    return RoomSpec.model_validate({
        "policy": {"kind": "mention", "everyone": list(AGENTS), "people": ["oncall"],
                   "call_timeout_s": 5, **policy},
        "agents": [{"name": name, "model": "scripted",
                    "script": [{"content": text} for text in replies.get(name, [])]
                    or [{"content": "(silent)"}] * 10}
                   for name in AGENTS],
    })


class Room:
    """A mention room on fakeredis, served until idle after each post."""

    def __init__(self, sync_redis, async_redis, keys, spec: RoomSpec) -> None:
        self.store = RoomStore(sync_redis, keys)
        self.store.create_room(ROOM, spec)
        self.async_redis, self.keys = async_redis, keys
        self.transport = LocalWorkerTransport(sync_redis, keys)

    def post(self, content: str, sender: str = "oncall") -> None:
        self.store.post(ROOM, sender, content)
        asyncio.run(serve_once(self.async_redis, self.keys, self.transport))

    def said(self) -> list[tuple[str, str]]:
        return [(m.sender, m.content) for m in self.store.read_messages(ROOM)]

    def floor(self) -> mention.Floor:
        return mention.Floor.read(self.store.read_state(ROOM).floor_state)


def test_a_discussion_waits_for_a_person_across_runs(sync_redis, async_redis, keys):
    spec = mention_spec({"investigator": ["5xx since 14:02 @dev"],
                         "dev": ["flag checkout_v2 flipped at 14:01. @oncall may I roll back?",
                                 "rolling back now"],
                         "sre": ["(silent)"]})
    room = Room(sync_redis, async_redis, keys, spec)
    room.post("checkout is failing")
    state = room.store.read_state(ROOM)
    assert state.stop_reason is StopReason.WAITING_FOR_PERSON
    floor = room.floor()
    assert floor.waiting and floor.asked == [("dev", "oncall")]
    assert floor.queue == []  # everyone took one turn: investigator, dev, sre
    assert room.said() == [
        ("oncall", "checkout is failing"), ("investigator", "5xx since 14:02 @dev"),
        ("dev", "flag checkout_v2 flipped at 14:01. @oncall may I roll back?")]
    silent = [t for t in room.store.read_turns(ROOM) if t.winner is None and t.bids]
    assert [b.message for t in silent for b in t.bids] == ["(silent)"]  # recorded, not posted

    room.post("yes")  # names nobody: answers the agent that asked
    assert room.said()[-1] == ("dev", "rolling back now")
    floor = room.floor()
    assert not floor.waiting and floor.asked == []
    assert room.store.read_state(ROOM).stop_reason is StopReason.QUEUE_EMPTY


def test_every_turn_replays_to_its_decision(sync_redis, async_redis, keys):
    spec = mention_spec({"investigator": ["@sre look"], "sre": ["@oncall ok?", "done"],
                         "dev": ["(silent)"]})
    room = Room(sync_redis, async_redis, keys, spec)
    room.post("@investigator start")
    room.post("ok")
    turns = room.store.read_turns(ROOM)
    assert len(turns) == 3
    for record in turns:
        decision = policies.replay(spec, record)
        assert (decision.winner, decision.stop) == (record.winner, record.stop_reason)


class PostsDuringTheTurn(LocalWorkerTransport):
    """A person posts while the first agent's call is out."""

    def __init__(self, store: RoomStore, *args: Any) -> None:
        super().__init__(*args)
        self.store = store

    def send(self, requests: list[tuple[str, CallRequest]]) -> None:
        if len(self.sent) == 0:
            self.store.post(ROOM, "oncall", "@sre you too")
        super().send(requests)


def test_a_person_posting_during_a_turn_is_read_after_it(sync_redis, async_redis, keys):
    spec = mention_spec({"dev": ["on it"], "sre": ["here"]})
    room = Room(sync_redis, async_redis, keys, spec)
    room.transport = PostsDuringTheTurn(room.store, sync_redis, keys)
    room.post("@dev look")
    assert room.said() == [("oncall", "@dev look"), ("dev", "on it"),
                           ("oncall", "@sre you too"), ("sre", "here")]


def test_a_roster_refuses_other_senders(sync_redis, async_redis, keys):
    room = Room(sync_redis, async_redis, keys, mention_spec({}))
    with pytest.raises(ValueError, match="not one of room room-1's people"):
        room.store.post(ROOM, "mallory", "hi")
    with pytest.raises(ValueError, match="is an agent"):
        room.store.post(ROOM, "dev", "hi")


class DiesOnTheSecondSpeak(LocalWorkerTransport):
    """Fails as a coordinator dying right as it asks the second agent."""

    def send(self, requests: list[tuple[str, CallRequest]]) -> None:
        if any(r.kind is CallKind.DISCUSS and r.turn == 2 for _, r in requests):
            raise ConnectionError("coordinator died")
        super().send(requests)


def test_a_takeover_keeps_the_queue_and_the_wait_exactly(sync_redis, async_redis, keys):
    spec = mention_spec({"dev": ["@sre @investigator check"], "sre": ["@oncall restart?"],
                         "investigator": ["logs are clean"]})
    store = RoomStore(sync_redis, keys)
    store.create_room(ROOM, spec)
    store.post(ROOM, "oncall", "@dev look")
    with pytest.raises(ConnectionError):
        asyncio.run(serve_once(async_redis, keys, DiesOnTheSecondSpeak(sync_redis, keys)))
    before = mention.Floor.read(store.read_state(ROOM).floor_state)
    assert before.queue == ["sre", "investigator"]

    successor = LocalWorkerTransport(sync_redis, keys)
    asyncio.run(serve_once(async_redis, keys, successor, owner="c2"))
    assert [(m.sender, m.content) for m in store.read_messages(ROOM)] == [
        ("oncall", "@dev look"), ("dev", "@sre @investigator check"),
        ("sre", "@oncall restart?"), ("investigator", "logs are clean")]
    floor = mention.Floor.read(store.read_state(ROOM).floor_state)
    assert floor.asked == [("sre", "oncall")] and floor.waiting and floor.queue == []
    assert store.read_state(ROOM).stop_reason is StopReason.WAITING_FOR_PERSON
    assert [r.turn for _, r in successor.sent] == [2, 3]


def dispatch_room_spec(verdicts: list[dict[str, Any]]) -> RoomSpec:
    spec = mention_spec({"investigator": ["logs say 500s"], "sre": ["metrics are flat"],
                         "dev": ["no deploy today"]})
    data = spec.model_dump()
    data["policy"]["dispatch"] = {"model": "scripted", "script": verdicts, "threshold": 0.5}
    return RoomSpec.model_validate(data)


def test_a_scripted_classifier_routes_an_unaddressed_message(sync_redis, async_redis, keys):
    spec = dispatch_room_spec([{"content": '{"sre": 0.9, "dev": 0.2}'}])
    room = Room(sync_redis, async_redis, keys, spec)
    room.transport = LocalWorkerTransport(sync_redis, keys, usage={"prompt_tokens": 10})
    room.post("is the load normal?")
    assert room.said()[1:] == [("sre", "metrics are flat")]
    first = room.store.read_turns(ROOM)[0]
    assert [(b.kind, b.agent) for b in first.bids] == [
        (CallKind.DISPATCH, "dispatch"), (CallKind.DISCUSS, "sre")]
    state = room.store.read_state(ROOM)
    assert state.usage.prompt_tokens == 20  # the classifier's call counts
    assert room.floor().dispatched == {"seq": 1, "agents": ["sre"], "reason": "classifier"}
    decision = policies.replay(spec, first)
    assert decision.winner == "sre"


def test_a_failing_classifier_falls_back_to_everyone(sync_redis, async_redis, keys):
    spec = dispatch_room_spec([{"error": "classifier down"}])
    room = Room(sync_redis, async_redis, keys, spec)
    room.post("is the load normal?")
    assert [sender for sender, _ in room.said()[1:]] == ["investigator", "dev", "sre"]
    assert room.floor().dispatched["reason"] == "fallback"


def test_listen_talk_instruct_regenerate_and_the_queue_view(sync_redis, async_redis, keys):
    spec = mention_spec({"dev": ["@sre restart it?", "summary: flag flipped", "again"],
                         "sre": ["restarted"], "investigator": ["(silent)"]})
    room = Room(sync_redis, async_redis, keys, spec)
    speak_queue.change(room.store, ROOM, "listen", "SRE")
    room.post("@dev look")
    assert room.said()[-1] == ("dev", "@sre restart it?")
    view = speak_queue.speak_queue(room.store, ROOM)
    assert view == {"speaking": None, "queue": ["sre"], "listening": ["sre"], "asked": [],
                    "waiting": True, "over": False}
    assert room.store.read_state(ROOM).stop_reason is StopReason.WAITING_FOR_PERSON

    speak_queue.change(room.store, ROOM, "talk", "sre")  # ends the wait: sre speaks
    asyncio.run(serve_once(async_redis, keys, room.transport))
    assert room.said()[-1] == ("sre", "restarted")

    speak_queue.change(room.store, ROOM, "instruct", "dev", "summarise")
    asyncio.run(serve_once(async_redis, keys, room.transport))
    assert room.said()[-1] == ("dev", "summary: flag flipped")
    instructed = room.transport.sent[-1][1]
    assert (instructed.agents, instructed.instructions) == (["dev"], {"dev": "summarise"})
    assert room.floor().instructions == {}

    speak_queue.change(room.store, ROOM, "regenerate")  # dev answered the last person
    asyncio.run(serve_once(async_redis, keys, room.transport))
    assert room.said()[-1] == ("dev", "again")
    replayed = [policies.replay(spec, t) for t in room.store.read_turns(ROOM)]
    assert [d.winner for d in replayed] == [t.winner for t in room.store.read_turns(ROOM)]


def test_floor_changes_are_refused_in_one_line(sync_redis, async_redis, keys):
    room = Room(sync_redis, async_redis, keys, mention_spec({}, max_turns=1))
    with pytest.raises(ValueError, match="has no agent 'ops'"):
        speak_queue.change(room.store, ROOM, "listen", "ops")
    with pytest.raises(ValueError, match="needs text"):
        speak_queue.change(room.store, ROOM, "instruct", "dev", " ")
    room.post("@dev hi")
    assert room.floor().over
    with pytest.raises(speak_queue.DiscussionOver, match="discussion is over"):
        speak_queue.change(room.store, ROOM, "regenerate")


def test_the_incident_example_waits_for_oncall_then_closes(sync_redis, async_redis, keys):
    from pathlib import Path

    from parley.client import load_spec
    spec = load_spec(Path(__file__).parents[2] / "examples" / "rooms" / "incident.yaml")
    room = Room(sync_redis, async_redis, keys, spec)
    room.post("checkout-api is failing")
    assert [s for s, _ in room.said()] == ["oncall", "investigator", "dev"]
    assert room.store.read_state(ROOM).stop_reason is StopReason.WAITING_FOR_PERSON
    assert speak_queue.speak_queue(room.store, ROOM)["asked"] == [["dev", "oncall"]]
    room.post("yes, roll back")
    assert [s for s, _ in room.said()][3:] == ["oncall", "dev", "sre"]
    assert room.store.read_state(ROOM).stop_reason is StopReason.QUEUE_EMPTY


def test_each_message_records_whom_it_addressed(sync_redis, async_redis, keys):
    spec = mention_spec({"dev": ["@sre and @oncall: look"], "sre": ["fine"]})
    room = Room(sync_redis, async_redis, keys, spec)
    room.post("@dev `x` > @sre")
    messages = room.store.read_messages(ROOM)
    assert [m.addressed for m in messages] == [None, ["sre", "oncall"], []]
    first = room.store.read_turns(ROOM)[0]
    assert first.addressed == {"1": ["dev", "sre"], "posted": ["sre", "oncall"]}


class ListensMidTurn(LocalWorkerTransport):
    """Sets the agent of the first turn to only listen instead of answering its call."""

    def __init__(self, store: RoomStore, *args: Any) -> None:
        super().__init__(*args)
        self.store = store

    def send(self, requests: list[tuple[str, CallRequest]]) -> None:
        if any(r.turn == 1 for _, r in requests):
            self.sent.extend(requests)
            speak_queue.change(self.store, ROOM, "listen", requests[0][1].agents[0])
            return
        super().send(requests)


def test_listening_set_on_the_speaking_agent_cuts_its_turn(sync_redis, async_redis, keys):
    spec = mention_spec({"dev": ["never said"], "sre": ["sre here"]})
    room = Room(sync_redis, async_redis, keys, spec)
    room.transport = ListensMidTurn(room.store, sync_redis, keys)
    room.post("@dev @sre look")
    assert room.said() == [("oncall", "@dev @sre look"), ("sre", "sre here")]
    first = room.store.read_turns(ROOM)[0]
    assert first.winner is None and first.bids[0].error_kind == "cancelled"
    floor = room.floor()
    assert floor.listening == ["dev"] and floor.queue == ["dev"] and floor.turns == 1
    assert room.store.read_state(ROOM).stop_reason is StopReason.WAITING_FOR_PERSON
    for record in room.store.read_turns(ROOM):
        assert policies.replay(spec, record).winner == record.winner


def story(room: Room) -> list[tuple[Any, ...]]:
    """The room's events but answers and turn openings, as comparable tuples."""
    told: list[tuple[Any, ...]] = []
    for event in room.store.read_events(ROOM):
        if isinstance(event, QueueChanged):
            told.append((event.type, event.queue, event.listening, event.asked,
                         event.waiting, event.over))
        elif isinstance(event, MessageCommitted):
            told.append((event.type, event.sender))
        elif isinstance(event, RunStarted | RunEnded | TurnDecided):
            told.append((event.type, event.run))
    return told


def test_a_turn_that_changes_the_queue_writes_it_after_its_message(sync_redis, async_redis,
                                                                   keys):
    spec = mention_spec({"investigator": ["@sre look"], "sre": ["@oncall ok?", "done"],
                         "dev": ["(silent)"]})
    room = Room(sync_redis, async_redis, keys, spec)
    room.post("@investigator start")
    assert story(room) == [
        ("run_started", 1), ("message_committed", "oncall"),
        ("message_committed", "investigator"),
        ("queue_changed", ["sre"], [], [], False, False), ("turn_decided", 1),
        ("message_committed", "sre"),
        ("queue_changed", [], [], [("sre", "oncall")], False, False), ("turn_decided", 1),
        # the next turn finds nobody to ask: end_run sets waiting as the run ends
        ("queue_changed", [], [], [("sre", "oncall")], True, False), ("run_ended", 1)]
    check_event_order(room.store.read_events(ROOM), room.store.read_messages(ROOM))


def test_a_floor_change_that_starts_a_run_tells_followers(sync_redis, async_redis, keys):
    spec = mention_spec({"dev": ["@sre restart it?", "done"], "sre": ["restarted"]})
    room = Room(sync_redis, async_redis, keys, spec)
    room.post("@dev look")
    before = len(room.store.read_events(ROOM))
    speak_queue.change(room.store, ROOM, "talk", "sre")
    assert story(room)[-1] == ("run_started", 2)
    asyncio.run(serve_once(async_redis, keys, room.transport))
    assert room.said()[-1] == ("sre", "restarted")
    later = [e for e in room.store.read_events(ROOM)[before:] if isinstance(e, RunStarted)]
    assert [e.run for e in later] == [2]  # the drain does not start it again
    check_event_order(room.store.read_events(ROOM), room.store.read_messages(ROOM))
