"""Seed 002's own test through litellm's real HTTP client: a selector room whose selector and
participants are ``openai/<name>`` models on the local OpenAI-compatible stub, served by a
real `parley worker` and `parley coordinator` on the real Redis."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from parley.client import Client
from parley.coordinator import policies
from parley.shared.models import RoomSpec, StopReason
from tests.support.observe import log_events
from tests.support.openai_stub import OpenAIStub, Received, text
from tests.support.polling import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.redis]

KEY_ENV, KEY = "PARLEY_E2E_STUB_KEY", "sk-e2e-selector-stub"
TASK = "Plan a 3-day Tokyo trip for under $1,500"
# The worker imports litellm on its first real call (preloading is off in tests): seconds.
CALL_TIMEOUT_S = 60
SELECTOR_MODEL = "chooser"
PARTICIPANTS = {"planner": "drafts the day-by-day itinerary",
                "local": "knows the city",
                "budget": "keeps the total honest"}
# Each stub reply reports its own usage, so the expected totals are exact.
PICKS = [("planner", 1001), ("budget", 1002), ("planner", 1003), ("TERMINATE", 1004)]
REPLIES = {"planner": [("Day 1 Asakusa, day 2 Shibuya, day 3 Nikko.", 2001),
                       ("Swapped to a business hotel: $1,380 in all.", 2003)],
           "budget": [("Over by $200: the hotel is the problem.", 2002)]}
SELECT_PROMPT_START = "You are coordinating a group chat. Choose who speaks next."


@pytest.fixture
def stub() -> Iterator[OpenAIStub]:
    """The stub provider, accepting only KEY; every model answers in plain text."""
    with OpenAIStub(api_key=KEY) as server:
        server.script(SELECTOR_MODEL, *(text(pick, prompt_tokens=tokens, completion_tokens=1)
                                        for pick, tokens in PICKS))
        for name, replies in REPLIES.items():
            server.script(name, *(text(reply, prompt_tokens=tokens, completion_tokens=tokens // 100)
                                  for reply, tokens in replies))
        yield server


def stub_room(stub: OpenAIStub, queue: str) -> RoomSpec:
    """A selector room whose selector and participants are models on the stub."""
    on_stub = {"api_base": stub.url, "api_key_env": KEY_ENV, "queue": queue}
    return RoomSpec.model_validate({
        "name": "tokyo",
        "policy": {"kind": "selector", "call_timeout_s": CALL_TIMEOUT_S,
                   "selector": {"model": f"openai/{SELECTOR_MODEL}", **on_stub}},
        "agents": [{"name": name, "role": role, "model": f"openai/{name}",
                    "system_prompt": f"You are the {name}.", **on_stub}
                   for name, role in PARTICIPANTS.items()],
    })


def prompt_text(request: Received) -> str:
    """The user message of a selector or participant request (the seed's prompt)."""
    return request.body["messages"][-1]["content"]


def test_seed_002_through_litellm_speakers_in_the_selectors_order_every_call_counted(
        stub, processes, settings, queue):
    processes.worker("-Q", queue, "-c", "8", env={
        KEY_ENV: KEY, "PARLEY_WORKER_KEY_ENVS": KEY_ENV,
        "PARLEY_WORKER_ALLOWED_API_BASES": stub.url})
    processes.coordinator()
    client = Client(settings)
    spec = stub_room(stub, queue)

    result = client.run(spec, TASK, timeout_s=120)

    # Who the stub was asked, in order: the selector before each participant, and once more
    # for the TERMINATE that ends the run.
    asked = [item.model for item in stub.received]
    assert asked == [SELECTOR_MODEL, "planner", SELECTOR_MODEL, "budget", SELECTOR_MODEL,
                     "planner", SELECTOR_MODEL]
    assert all(item.reply.status == 200 for item in stub.received)
    for request in stub.requests_for(SELECTOR_MODEL):
        prompt = prompt_text(request)
        assert prompt.startswith(SELECT_PROMPT_START)
        assert "- budget: keeps the total honest" in prompt
        assert "pick the one participant from planner, local, budget" in prompt
        assert f"User: {TASK}" in prompt
        assert "tools" not in request.body
    for request in stub.received:
        if request.model == SELECTOR_MODEL:
            continue
        prompt = prompt_text(request)
        assert prompt.startswith(f"You are {request.model}, the {PARTICIPANTS[request.model]} "
                                 "in a group chat")
        assert f"<task>{TASK}</task>" in prompt
        assert "If the task is complete and nothing is left for anyone to do" in prompt
        assert request.body["messages"][0] == {"role": "system",
                                               "content": f"You are the {request.model}."}
    # The last selector call sees the whole thread, each message tagged with its speaker.
    last_thread = prompt_text(stub.requests_for(SELECTOR_MODEL)[-1])
    assert "planner: Day 1 Asakusa" in last_thread
    assert "budget: Over by $200" in last_thread
    assert "planner: Swapped to a business hotel" in last_thread

    assert [(m.sender, m.content) for m in result.messages] == [
        ("User", TASK),
        ("planner", REPLIES["planner"][0][0]),
        ("budget", REPLIES["budget"][0][0]),
        ("planner", REPLIES["planner"][1][0]),
    ]
    assert (result.status, result.stop_reason) == ("idle", StopReason.TERMINATE)
    assert result.answer == REPLIES["planner"][1][0]

    turns = client.turns(result.room)
    assert [record.winner for record in turns] == ["planner", "budget", "planner", None]
    assert [[bid.agent for bid in record.bids] for record in turns] == [
        ["selector", "planner"], ["selector", "budget"], ["selector", "planner"], ["selector"]]
    for record in turns:
        decision = policies.replay(spec, record)
        assert (decision.winner, decision.stop) == (record.winner, record.stop_reason)
    # The selector's calls are counted: in each turn record, and in the room's totals.
    selector_tokens = [tokens for _, tokens in PICKS]
    speaker_tokens = [2001, 2002, 2003]
    assert [record.prompt_tokens for record in turns] == [
        pick + reply for pick, reply in zip(selector_tokens, speaker_tokens, strict=False)
    ] + [selector_tokens[-1]]
    assert [record.completion_tokens for record in turns] == [1 + 20, 1 + 20, 1 + 20, 1]
    totals = client.state(result.room).totals()
    assert totals["prompt_tokens"] == sum(record.prompt_tokens for record in turns) == sum(
        selector_tokens) + sum(speaker_tokens)
    assert totals["completion_tokens"] == sum(record.completion_tokens for record in turns)
    assert totals["agent:selector:prompt_tokens"] == sum(selector_tokens)
    assert totals["agent:selector:completion_tokens"] == len(PICKS)
    assert totals["agent:planner:prompt_tokens"] == 2001 + 2003
    assert totals["agent:budget:prompt_tokens"] == 2002

    # A run's end is seen as it commits; the coordinator logs the turn a moment later.
    logged = wait_until(lambda: len(found := log_events(processes, "turn_committed")) >= 4 and found, 15,
                        "the last turn's log line")
    assert [line["speaker"] for line in logged] == ["planner", "budget", "planner", None]
    assert [[(call["agent"], call["kind"], call["prompt_tokens"]) for call in line["calls"]]
            for line in logged] == [
        [("selector", "select", 1001), ("planner", "speak", 2001)],
        [("selector", "select", 1002), ("budget", "speak", 2002)],
        [("selector", "select", 1003), ("planner", "speak", 2003)],
        [("selector", "select", 1004)]]
    assert [line["prompt_tokens"] for line in logged] == [record.prompt_tokens for record in turns]
