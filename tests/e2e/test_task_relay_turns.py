"""A relayed background task in rooms without a speak queue, across real processes (seed
003, "Talking and working: tasks"): at the next turn boundary its agent takes a turn of
its own and says the result, and the run goes on under its policy; with no run under
way the relay starts one."""

from __future__ import annotations

import pytest

from parley.client import Client
from parley.shared.models import RoomSpec, StopReason
from tests.support.polling import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.redis]

RESULT = "42 tickets; 3 about refunds."
RELAYED = "Done: of 42 tickets, 3 are about refunds."


def agent(name: str, queue: str, script: list[dict], **more) -> dict:
    return {"name": name, "model": "scripted", "queue": queue, "script": script, **more}


def lead(queue: str, script: list[dict]) -> dict:
    """The agent whose tasks researcher works, relayed."""
    return agent("lead", queue, script,
                 background={"hand_back": "relay", "worker": "researcher"})


def bid_room(queue: str, ann: list[dict], research_s: float) -> RoomSpec:
    """Ann wins every turn of her script; lead and researcher bid nothing (plain text)."""
    return RoomSpec.model_validate({
        "policy": {"kind": "bid", "recency_penalty": 0, "bid_timeout_s": 20},
        "agents": [lead(queue, [{"content": RELAYED}] * 12), agent("ann", queue, ann),
                   agent("researcher", queue, [{"content": RESULT, "sleep": research_s}])]})


def roundtable(queue: str, ann_s: float, bob_s: float, research_s: float) -> RoomSpec:
    """Ann, Bob and researcher debate one round; lead moderates (its first call is its
    relay, its second the verdict)."""
    panel = [agent("ann", queue, [{"content": "Ann's point.", "sleep": ann_s}])]
    if bob_s:
        panel.append(agent("bob", queue, [{"content": "Bob's point.", "sleep": bob_s}]))
    return RoomSpec.model_validate({
        "policy": {"kind": "roundtable", "rounds": 1, "moderator": "lead",
                   "call_timeout_s": 20},
        "agents": [*panel, agent("researcher", queue, [{"content": RESULT,
                                                        "sleep": research_s}]),
                   lead(queue, [{"content": RELAYED}, {"content": "Verdict: refunds."}])]})


def said(client: Client, room: str) -> list[tuple[str, str]]:
    return [(m.sender, m.content) for m in client.messages(room)]


def ended(client: Client, room: str) -> bool:
    state = client.state(room)
    return state.run > 0 and not state.turn_open and state.status.value != "running"


def test_a_relay_during_a_bid_run_comes_at_a_turn_boundary_and_the_run_goes_on(
        processes, settings, queue):
    processes.worker("-Q", queue, "-c", "4")
    processes.coordinator()
    client = Client(settings)
    ann = [{"score": 0.9, "message": f"Ann, turn {n}.", "sleep": 1.5} for n in range(1, 6)]
    room = client.create_room(bid_room(queue, ann, 3.0))
    task = client.start_task(room, "lead", "Go through every support ticket")
    client.post(room, "Go.")
    wait_until(lambda: ended(client, room), 60, "the run to end")

    senders = [sender for sender, _ in said(client, room)]
    relay = senders.index("lead")
    assert said(client, room)[relay] == ("lead", RELAYED) and senders.count("lead") == 1
    assert "ann" in senders[:relay] and "ann" in senders[relay:]  # in the run, not after
    assert [content for sender, content in said(client, room) if sender == "ann"] == [
        f"Ann, turn {n}." for n in range(1, 6)]
    records = client.turns(room)
    assert [r.relay for r in records if r.relay] == [task.id]
    assert {r.run for r in records} == {1}
    assert client.state(room).stop_reason is StopReason.LULL
    assert client.tasks(room)[0].handed_back


def test_a_relay_into_an_idle_bid_room_starts_a_run_with_it(processes, settings, queue):
    processes.worker("-Q", queue, "-c", "4")
    processes.coordinator()
    client = Client(settings)
    room = client.create_room(bid_room(queue, [], 0.5))
    task = client.start_task(room, "lead", "Go through every support ticket")
    wait_until(lambda: ended(client, room), 40, "the relay's run to end")

    assert said(client, room) == [("lead", RELAYED)]
    records = client.turns(room)
    assert [(r.run, r.winner, r.relay) for r in records] == [
        (1, "lead", task.id), (1, None, "")]
    assert client.state(room).stop_reason is StopReason.LULL  # nobody bid after it


def test_a_relay_during_a_debate_is_followed_by_the_next_panelist(processes, settings, queue):
    processes.worker("-Q", queue, "-c", "4")
    processes.coordinator()
    client = Client(settings)
    room = client.create_room(roundtable(queue, ann_s=1.0, bob_s=5.0, research_s=3.0))
    task = client.start_task(room, "lead", "Go through every support ticket")
    client.post(room, "Should we change the refund policy?")
    wait_until(lambda: ended(client, room), 60, "the verdict")

    messages = said(client, room)
    assert ("lead", RELAYED) in messages and messages[-1] == ("lead", "Verdict: refunds.")
    assert [s for s, _ in messages if s not in ("User", "lead")] == ["ann", "bob", "researcher"]
    records = client.turns(room)
    at = next(i for i, r in enumerate(records) if r.relay == task.id)
    following = records[at + 1]
    assert following.winner in ("ann", "bob", "researcher")  # a panelist, not skipped
    assert following.policy_state == records[at].policy_state
    assert client.state(room).stop_reason is StopReason.VERDICT


def test_a_relay_into_an_idle_roundtable_opens_a_debate(processes, settings, queue):
    processes.worker("-Q", queue, "-c", "4")
    processes.coordinator()
    client = Client(settings)
    room = client.create_room(roundtable(queue, ann_s=0.0, bob_s=0.0, research_s=0.5))
    task = client.start_task(room, "lead", "Go through every support ticket")
    wait_until(lambda: ended(client, room), 40, "the debate's verdict")

    assert said(client, room) == [("lead", RELAYED), ("ann", "Ann's point."),
                                  ("researcher", RESULT), ("lead", "Verdict: refunds.")]
    assert [(r.run, r.relay) for r in client.turns(room)] == [
        (1, task.id), (1, ""), (1, ""), (1, "")]
