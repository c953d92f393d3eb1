"""A background task's relay in rooms without a speak queue (seed 003's tasks): the pure
rules of the relay turn (coordinator/relay.py), and the turn loop on fakeredis giving the
agent its turn at the next boundary, in a run, as a new run, and across a takeover."""

from __future__ import annotations

import asyncio

import pytest

from parley.client.turn_report import read_turn_report
from parley.coordinator import policies
from parley.coordinator.lease import Leases
from parley.coordinator.policies import TurnView
from parley.coordinator.policies.what_if import replay_run
from parley.coordinator.relay import relay_calls, relay_decision, waiting_relay
from parley.coordinator.room_io import RoomIO
from parley.shared.models import Answer, AnswerStatus, CallKind, RoomSpec, StopReason
from parley.shared.scripts import Scripts
from parley.shared.store import RoomStore
from parley.shared.tasks import Task, TaskBook, relay_as
from parley.views.explain import turn_line
from parley.workers.prompts import CALL_PROMPTS
from tests.support.fake_turns import serve_once
from tests.support.local_worker import LocalWorkerTransport

ROOM = "room-1"
RELAYED = "Of 42 tickets, 3 are about refunds."


def task(**fields) -> Task:
    return Task.model_validate({
        "id": "abc123def4567890", "room": ROOM, "agent": "lead", "worker": "lead",
        "hand_back": "relay", "instruction": "count the tickets", "status": "done",
        "result": "42 tickets; 3 about refunds", "relay_as": "turn", **fields})


def view(**fields) -> TurnView:
    return TurnView(**{"turn": 3, "run": 1, "run_turns": 2, "messages_in_run": 3,
                       "recent": ("ann",), "snapshot_seq": 3,
                       "policy_state": {"spoken": "1"}, **fields})


def roundtable() -> RoomSpec:
    """Ann, Bob and Lead debate one round, Mod gives the verdict; Lead relays its tasks
    (its first call is its relay turn, its second its turn on the panel)."""
    return RoomSpec.model_validate({
        "policy": {"kind": "roundtable", "rounds": 1, "moderator": "mod"},
        "agents": [
            {"name": "ann", "model": "scripted", "script": [{"content": "Ann's point."}]},
            {"name": "bob", "model": "scripted", "script": [{"content": "Bob's point."}]},
            {"name": "lead", "model": "scripted", "background": {"hand_back": "relay"},
             "script": [{"content": RELAYED}, {"content": "Lead's point."}]},
            {"name": "mod", "model": "scripted", "script": [{"content": "Verdict: refunds."}]}]})


def bid_room() -> RoomSpec:
    """Lead relays its tasks, then stays silent, as Ann does: a run ends in a lull."""
    return RoomSpec.model_validate({"policy": {"kind": "bid"}, "agents": [
        {"name": "lead", "model": "scripted", "background": {"hand_back": "relay"},
         "script": [{"content": RELAYED}]},
        {"name": "ann", "model": "scripted", "script": []}]})


def test_a_relay_outside_a_discussion_room_is_a_turn_and_a_post_stays_a_post():
    spec = roundtable()
    assert (relay_as(spec, "relay"), relay_as(spec, "post")) == ("turn", "post")


def test_the_relay_turn_calls_the_agent_with_the_result_as_its_input():
    calls = relay_calls(task())
    assert (calls.kind, calls.agents) == (CallKind.SPEAK, ("lead",))
    assert "42 tickets; 3 about refunds" in dict(calls.instructions)["lead"]


def test_a_speak_call_puts_its_input_in_the_agents_system_prompt():
    spec = roundtable()
    told = CALL_PROMPTS[CallKind.SPEAK].caller(spec, spec.agent("lead"), "Say it.")
    assert told.system_prompt.endswith("For this turn: Say it.")
    assert CALL_PROMPTS[CallKind.SPEAK].caller(spec, spec.agent("lead"), "") == spec.agent("lead")


def test_the_relay_turn_posts_the_reply_and_leaves_the_policy_as_it_was():
    reply = Answer(agent="lead", turn=3, kind=CallKind.SPEAK, message=RELAYED)
    decision = relay_decision(roundtable(), view(), task(), [reply])
    assert (decision.winner, decision.message, decision.relay) == (
        "lead", RELAYED, "abc123def4567890")
    assert (decision.policy_state, decision.recent, decision.stop) == ({}, ("ann",), None)


def test_a_relay_turn_whose_call_failed_posts_the_result_as_it_is():
    failed = Answer(agent="lead", turn=3, kind=CallKind.SPEAK, status=AnswerStatus.TIMEOUT)
    decision = relay_decision(roundtable(), view(), task(), [failed])
    assert (decision.winner, decision.message) == ("lead", "42 tickets; 3 about refunds")


def test_the_first_waiting_task_to_relay_in_a_turn_is_taken_oldest_first():
    first, second = task(id="1" * 16), task(id="2" * 16)
    posted = task(id="3" * 16, relay_as="post")
    tasks = {t.id: t for t in (first, second, posted)}
    assert waiting_relay([posted.id, second.id, first.id], tasks) == second
    assert waiting_relay([posted.id], tasks) is None


class FinishingTransport(LocalWorkerTransport):
    """The worker twin, which finishes the room's task as ``turn``'s calls are sent."""

    def __init__(self, client, keys, book: TaskBook, turn: int) -> None:
        super().__init__(client, keys)
        self.book, self.turn = book, turn

    def send_background(self, queue: str, request: dict[str, str], until: float,
                        task_id: str) -> None:
        """The task is finished by ``send``, not by a worker."""

    def send(self, requests) -> None:
        if any(request.turn == self.turn for _, request in requests):
            for waiting in self.book.list(ROOM):
                if waiting.is_open:
                    self.book.finish(ROOM, waiting, "done", "42 tickets; 3 about refunds")
        super().send(requests)


def finished_before_a_turn(sync_redis, keys, spec: RoomSpec) -> tuple[RoomStore, TaskBook, Task]:
    """A room of ``spec`` whose lead's task finished while no worker had it: its relay
    waits for the room's next turn."""
    store = RoomStore(sync_redis, keys)
    store.create_room(ROOM, spec)
    book = TaskBook(sync_redis, keys, 10_000, finished_max=200)
    started = book.start(ROOM, spec, "lead", "count the tickets")
    sync_redis.hset(keys.tasks(ROOM), f"{started.id}:sent", 1)  # no worker here
    book.finish(ROOM, started, "done", "42 tickets; 3 about refunds")
    return store, book, started


def said(store: RoomStore) -> list[tuple[str, str]]:
    return [(m.sender, m.content) for m in store.read_messages(ROOM)]


def test_a_relay_during_a_debate_comes_at_the_next_boundary_and_the_next_panelist_follows(
        sync_redis, async_redis, keys):
    store = RoomStore(sync_redis, keys)
    store.create_room(ROOM, roundtable())
    book = TaskBook(sync_redis, keys, 10_000, finished_max=200)
    started = book.start(ROOM, roundtable(), "lead", "count the tickets")
    store.post(ROOM, "User", "Should we change the refund policy?")
    asyncio.run(serve_once(async_redis, keys, FinishingTransport(sync_redis, keys, book, 1)))

    assert said(store) == [("User", "Should we change the refund policy?"),
                           ("ann", "Ann's point."), ("lead", RELAYED), ("bob", "Bob's point."),
                           ("lead", "Lead's point."), ("mod", "Verdict: refunds.")]
    records = store.read_turns(ROOM)
    assert [(r.winner, r.relay) for r in records] == [
        ("ann", ""), ("lead", started.id), ("bob", ""), ("lead", ""), ("mod", "")]
    assert records[1].policy_state == {"spoken": "1"}  # the rotation's place, kept
    assert [policies.replay(roundtable(), r).winner for r in records] == [
        r.winner for r in records]
    assert turn_line(roundtable(), records[1]).as_json()["role"] == "relay"
    assert replay_run(ROOM, roundtable(), records, {"rounds": 1}).divergence is None
    assert "relayed the result of background task" in turn_line(roundtable(), records[1]).text()
    assert sync_redis.zcard(keys.handbacks(ROOM)) == 0 and book.get(ROOM, started.id).handed_back


def test_a_relay_with_no_run_under_way_starts_a_run_with_it(sync_redis, async_redis, keys):
    store, book, started = finished_before_a_turn(sync_redis, keys, bid_room())
    asyncio.run(serve_once(async_redis, keys, LocalWorkerTransport(sync_redis, keys)))

    assert said(store) == [("lead", RELAYED)]
    records = store.read_turns(ROOM)
    assert [(r.run, r.winner, r.relay, r.stop_reason) for r in records] == [
        (1, "lead", started.id, None), (1, None, "", StopReason.LULL)]
    assert records[1].run_turns == 1  # the relay is not one of the policy's turns
    assert store.read_state(ROOM).run == 1


def test_a_relay_turn_taken_over_is_played_once_and_hands_back_once(
        sync_redis, async_redis, keys):
    store, book, started = finished_before_a_turn(sync_redis, keys, bid_room())

    async def open_and_die() -> None:
        scripts = Scripts(async_redis)
        lease = await Leases(async_redis, keys, scripts, "dead", 5.0).acquire(ROOM)
        await RoomIO(async_redis, keys, scripts).open_turn(lease, 30, relay=started.id)
        await async_redis.delete(keys.lease(ROOM))

    asyncio.run(open_and_die())
    assert sync_redis.zcard(keys.handbacks(ROOM)) == 1  # kept until the relay commits
    in_flight = read_turn_report(store, ROOM).open_turn
    assert (in_flight.kind, in_flight.pending) == (CallKind.SPEAK, ["lead"])
    asyncio.run(serve_once(async_redis, keys, LocalWorkerTransport(sync_redis, keys)))

    assert said(store) == [("lead", RELAYED)]
    assert [r.relay for r in store.read_turns(ROOM)] == [started.id, ""]
    assert sync_redis.zcard(keys.handbacks(ROOM)) == 0 and book.get(ROOM, started.id).handed_back


def selector_room() -> RoomSpec:
    """The selector picks ann, then ends the run; lead relays its tasks."""
    return RoomSpec.model_validate({
        "policy": {"kind": "selector", "selector": {"model": "scripted", "script": [
            {"content": "ann"}, {"content": "TERMINATE"}]}},
        "agents": [
            {"name": "lead", "model": "scripted", "background": {"hand_back": "relay"},
             "script": [{"content": RELAYED}]},
            {"name": "ann", "model": "scripted", "script": [{"content": "Ann's answer."}]}]})


def handoff_room() -> RoomSpec:
    """Ann holds the floor and answers once; lead relays its tasks."""
    return RoomSpec.model_validate({
        "policy": {"kind": "handoff", "start": "ann", "max_turns": 1},
        "agents": [
            {"name": "lead", "model": "scripted", "background": {"hand_back": "relay"},
             "script": [{"content": RELAYED}]},
            {"name": "ann", "model": "scripted", "script": [{"content": "Ann's answer."}]}]})


@pytest.mark.parametrize("make_spec", [selector_room, handoff_room])
def test_a_relay_into_an_idle_selector_or_handoff_room_is_its_first_turn_then_the_policy(
        sync_redis, async_redis, keys, make_spec):
    store, book, started = finished_before_a_turn(sync_redis, keys, make_spec())
    assert started.relay_as == "turn"
    asyncio.run(serve_once(async_redis, keys, LocalWorkerTransport(sync_redis, keys)))

    assert said(store) == [("lead", RELAYED), ("ann", "Ann's answer.")]
    records = store.read_turns(ROOM)
    assert [(r.winner, r.relay) for r in records][:2] == [("lead", started.id), ("ann", "")]
    assert book.get(ROOM, started.id).handed_back
