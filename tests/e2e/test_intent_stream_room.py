"""Intent-mode rooms and streamed replies across real processes: a `parley worker` calling
litellm (stream=True) against the local OpenAI-compatible stub, a `parley coordinator`, the
real Redis, and clients that see each reply as it is written."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from parley import GroupChat
from parley.client import Client
from parley.coordinator import policies
from parley.shared.events import AnswerArrived, MessageChunk
from parley.shared.models import AnswerStatus, CallKind, RoomSpec, StopReason
from tests.support.events import check_event_order
from tests.support.openai_stub import OpenAIStub, Reply, raw_arguments, text

pytestmark = [pytest.mark.e2e, pytest.mark.redis]

KEY_ENV, KEY = "PARLEY_E2E_STUB_KEY", "sk-e2e-stub"
# The worker imports litellm on its first real call (preloading is off in tests): seconds.
BID_TIMEOUT_S = 60
PLAN = ("Ship to five percent of users on Monday, watch error rates and latency for a day, "
        "then widen to everyone on Wednesday if both hold.")
RISK = "The schema migration cannot be rolled back by a flag: rehearse it on a copy first."


@pytest.fixture
def stub() -> Iterator[OpenAIStub]:
    with OpenAIStub(api_key=KEY) as server:
        yield server


def intent(score: float, line: str, **options: object) -> Reply:
    return raw_arguments(json.dumps({"score": score, "intent": line}), **options)


def intent_room(stub: OpenAIStub, queue: str) -> RoomSpec:
    return RoomSpec.model_validate({
        "name": "intent-room",
        "policy": {"kind": "bid", "bid_mode": "intent", "intent_max_tokens": 40,
                   "bid_timeout_s": BID_TIMEOUT_S},
        "agents": [{"name": name, "model": f"openai/{name.lower()}", "api_base": stub.url,
                    "api_key_env": KEY_ENV, "queue": queue}
                   for name in ("Planner", "Skeptic", "Economist")],
    })


def start(processes, queue: str, stub: OpenAIStub) -> None:
    processes.worker("-Q", queue, "-c", "8", env={
        KEY_ENV: KEY, "PARLEY_WORKER_KEY_ENVS": KEY_ENV,
        "PARLEY_WORKER_ALLOWED_API_BASES": stub.url})
    processes.coordinator()


def script_two_turns(stub: OpenAIStub, planner_reply: Reply) -> None:
    """Turn 1: the Planner wins with its intent and writes PLAN; turn 2: the Skeptic wins
    and writes RISK; turn 3: silence (the stub's default), a lull."""
    stub.script("planner", intent(0.9, "propose a staged rollout"), planner_reply,
                intent(0.2, "agree"))
    stub.script("skeptic", intent(0.6, "ask about the migration"),
                intent(0.8, "the migration cannot roll back"), text(RISK, token_s=0.01))
    stub.script("economist", intent(0.1, ""), intent(0.3, "costs are fine"))


def test_an_intent_room_posts_only_the_winners_reply_streamed_to_the_client(
        stub, processes, settings, queue):
    script_two_turns(stub, text(PLAN, token_s=0.01, completion_tokens=30))
    spec = intent_room(stub, queue)
    start(processes, queue, stub)
    client = Client(settings)
    seen: list[object] = []

    result = client.run(spec, "Launch next week?", timeout_s=120,
                        on_message=seen.append, on_chunk=seen.append)

    assert [(m.sender, m.content, m.score) for m in result.messages] == [
        ("User", "Launch next week?", None), ("Planner", PLAN, 0.9), ("Skeptic", RISK, 0.8)]
    assert (result.status, result.stop_reason) == ("idle", StopReason.LULL)

    # Both phases are in each turn's record, and each record replays to its decision.
    turns = client.turns(result.room)
    assert [[(bid.kind, bid.phase, bid.agent) for bid in record.bids] for record in turns] == [
        [(CallKind.INTENT, 0, "Planner"), (CallKind.INTENT, 0, "Skeptic"),
         (CallKind.INTENT, 0, "Economist"), (CallKind.REPLY, 1, "Planner")],
        [(CallKind.INTENT, 0, "Planner"), (CallKind.INTENT, 0, "Skeptic"),
         (CallKind.INTENT, 0, "Economist"), (CallKind.REPLY, 1, "Skeptic")],
        [(CallKind.INTENT, 0, "Planner"), (CallKind.INTENT, 0, "Skeptic"),
         (CallKind.INTENT, 0, "Economist")]]
    assert turns[0].bids[0].message == "propose a staged rollout"
    assert turns[0].bids[3].completion_tokens == 30
    for record in turns:
        decision = policies.replay(spec, record)
        assert (decision.winner, decision.score, decision.stop) == (
            record.winner, record.score, record.stop_reason)

    # The intents are short forced respond(score, intent) calls; only replies stream.
    planner = stub.requests_for("planner")
    assert planner[0].body["max_tokens"] == 40
    assert planner[0].body["tools"][0]["function"]["parameters"]["required"] == [
        "score", "intent"]
    assert not planner[0].body.get("stream")
    assert planner[1].body["stream"] is True
    assert "tools" not in planner[1].body
    # The reply's prompt is the intent's but for its last message, which carries the intent.
    assert planner[1].body["messages"][:-1] == planner[0].body["messages"][:-1]
    assert "> propose a staged rollout" in planner[1].body["messages"][-1]["content"]

    # The client saw each reply's chunks in order, before its message, and they make it up.
    for message in result.messages[1:]:
        chunks = [item for item in seen if isinstance(item, MessageChunk)
                  and item.agent == message.sender and item.turn == message.turn]
        assert [chunk.index for chunk in chunks] == list(range(len(chunks)))
        assert len(chunks) >= 2
        assert "".join(chunk.text for chunk in chunks) == message.content
        assert seen.index(chunks[-1]) < seen.index(message)
    check_event_order(list(client.events(result.room, follow=False)),
                      client.messages(result.room))


def test_a_reply_that_fails_midway_posts_nothing_and_the_next_bidder_speaks(
        stub, processes, settings, queue):
    # The Planner wins turn 1 but its reply stream is cut after 4 chunks: the Skeptic, next
    # over the bar, is asked instead. Turn 2: silence (the stub's default), a lull.
    stub.script("planner", intent(0.9, "propose a staged rollout"),
                text(PLAN, token_s=0.01, completion_tokens=30, fail_after=4))
    stub.script("skeptic", intent(0.6, "ask what fails first"), text("What fails first?"))
    stub.script("economist", intent(0.1, ""))
    spec = intent_room(stub, queue)
    start(processes, queue, stub)
    client = Client(settings)
    chunks: list[MessageChunk] = []

    result = client.run(spec, "Launch next week?", timeout_s=120, on_chunk=chunks.append)

    assert [(m.sender, m.content) for m in result.messages] == [
        ("User", "Launch next week?"), ("Skeptic", "What fails first?")]
    first = client.turns(result.room)[0]
    replies = [(bid.agent, bid.phase, bid.status) for bid in first.bids
               if bid.kind is CallKind.REPLY]
    assert replies == [("Planner", 1, AnswerStatus.ERROR), ("Skeptic", 2, AnswerStatus.OK)]
    assert (first.winner, first.score) == ("Skeptic", 0.6)

    # The Planner's partial chunks reached the client; its failed answer tells they were
    # abandoned.
    abandoned = [chunk for chunk in chunks if chunk.agent == "Planner" and chunk.turn == 1]
    assert abandoned and PLAN.startswith("".join(chunk.text for chunk in abandoned))
    assert "".join(chunk.text for chunk in abandoned) != PLAN
    events = list(client.events(result.room, follow=False))
    failed = [event for event in events if isinstance(event, AnswerArrived)
              and (event.turn, event.agent, event.phase) == (1, "Planner", 1)]
    assert [event.status for event in failed] == [AnswerStatus.ERROR]
    check_event_order(events, client.messages(result.room))


def test_groupchat_streaming_callback_gets_the_real_chunks(stub, processes, settings, queue):
    script_two_turns(stub, text(PLAN, token_s=0.01, completion_tokens=30))
    start(processes, queue, stub)
    agents = [{"name": name, "model": f"openai/{name.lower()}", "api_base": stub.url,
               "api_key_env": KEY_ENV, "queue": queue}
              for name in ("Planner", "Skeptic", "Economist")]
    chat = GroupChat(agents=agents, bid_mode="intent", bid_timeout_s=BID_TIMEOUT_S,
                     client=Client(settings))
    calls: list[tuple[str, str, bool]] = []

    output = chat.run("Launch next week?", streaming_callback=lambda *call: calls.append(call))

    assert output == f"{PLAN}\n{RISK}"
    finals = [sender for sender, _, final in calls if final]
    assert finals == ["User", "Planner", "Skeptic"]
    planner = [chunk for sender, chunk, final in calls if sender == "Planner" and not final]
    assert "".join(planner) == PLAN
    # Real chunks, as the model wrote them, not the word-by-word replay of the task.
    assert len(planner) < len(PLAN.split(" "))
    assert calls.index(("Planner", "", True)) > max(
        i for i, call in enumerate(calls) if call[0] == "Planner" and not call[2])
