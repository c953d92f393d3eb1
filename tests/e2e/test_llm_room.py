"""Rooms of real LLM agents across real processes: a `parley worker` calling litellm over
HTTP against a local OpenAI-compatible stub, and a `parley coordinator`, on the real Redis."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from parley.client import Client
from parley.shared.models import ErrorKind, RoomSpec, StopReason
from tests.support.observe import log_events
from tests.support.openai_stub import (
    OpenAIStub,
    error,
    model_not_found,
    rate_limited,
    raw_arguments,
    text,
    tool_call,
)
from tests.support.polling import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.redis]

KEY_ENV, KEY = "PARLEY_E2E_STUB_KEY", "sk-e2e-stub"
WRONG_KEY_ENV = "PARLEY_E2E_WRONG_KEY"
UNSET_KEY_ENV = "PARLEY_E2E_UNSET_KEY"
# The worker imports litellm on its first real bid (preloading is off in tests): seconds.
BID_TIMEOUT_S = 60


@pytest.fixture
def stub() -> Iterator[OpenAIStub]:
    """The stub provider, accepting only KEY."""
    with OpenAIStub(api_key=KEY) as server:
        yield server


def llm_room(stub: OpenAIStub, queue: str, agents: list[dict]) -> RoomSpec:
    """A bid room whose agents are ``openai/<model>`` on the stub."""
    return RoomSpec.model_validate({
        "name": "llm-room",
        "policy": {"kind": "bid", "bid_timeout_s": BID_TIMEOUT_S},
        "agents": [{"api_base": stub.url, "api_key_env": KEY_ENV, "queue": queue,
                    **agent, "model": f"openai/{agent['model']}"} for agent in agents],
    })


def start(processes, queue: str, stub: OpenAIStub) -> None:
    """A worker that lends the test's key variables to the stub, and a coordinator."""
    processes.worker("-Q", queue, "-c", "8", env={
        KEY_ENV: KEY, WRONG_KEY_ENV: "sk-wrong",
        "PARLEY_WORKER_KEY_ENVS": f"{KEY_ENV},{WRONG_KEY_ENV},{UNSET_KEY_ENV}",
        "PARLEY_WORKER_ALLOWED_API_BASES": stub.url})
    processes.coordinator()


def test_a_room_of_llm_agents_runs_through_litellm_with_every_call_accounted(
        stub, processes, settings, queue):
    stub.script("optimist",
                tool_call(0.6, "Ship it.", prompt_tokens=101, completion_tokens=11),
                rate_limited(retry_after_s=0.2),
                tool_call(0.7, "  Rollback is one flag.\nSkeptic: Agreed, ship it.",
                          prompt_tokens=102, completion_tokens=12),
                tool_call(0.9, "Small cohort first.", prompt_tokens=103, completion_tokens=13))
    stub.script("skeptic",
                tool_call(0.8, "What fails first?", prompt_tokens=201, completion_tokens=21),
                raw_arguments('{"score": "0.75", "message": "Flags do not roll back schemas."}',
                              prompt_tokens=202, completion_tokens=22),
                tool_call(0.85, "Rehearse the migration.", prompt_tokens=203, completion_tokens=23))
    stub.script("economist",
                text("In prose, no tool call.", prompt_tokens=301, completion_tokens=31),
                error(500),
                tool_call(0.2, "", prompt_tokens=303, completion_tokens=33))
    spec = llm_room(stub, queue, [
        {"name": "Optimist", "role": "argues for the upside", "model": "optimist"},
        {"name": "Skeptic", "role": "finds what fails first", "model": "skeptic",
         "system_prompt": "You find what fails first."},
        {"name": "Economist", "model": "economist"},
    ])
    start(processes, queue, stub)
    client = Client(settings)

    result = client.run(spec, "Launch next week?", timeout_s=120)

    # Turn 1: Skeptic 0.8 beats Optimist 0.6. Turn 2: Skeptic is recent (0.75 - 0.3), so
    # Optimist's 0.7 wins after a 429, cut where it speaks as the Skeptic. Turn 3: Skeptic
    # 0.85 beats Optimist's 0.9 - 0.3. Turn 4: every script has run out and the stub
    # answers silence: a lull.
    assert [(m.sender, m.content, m.score) for m in result.messages] == [
        ("User", "Launch next week?", None),
        ("Skeptic", "What fails first?", 0.8),
        ("Optimist", "Rollback is one flag.", 0.7),
        ("Skeptic", "Rehearse the migration.", 0.85),
    ]
    assert (result.status, result.stop_reason) == ("idle", StopReason.LULL)

    turns = client.turns(result.room)
    by_turn = [{bid.agent: bid for bid in record.bids} for record in turns]
    assert [record.winner for record in turns] == ["Skeptic", "Optimist", "Skeptic", None]
    assert [record.cuts for record in turns] == [{}, {"Optimist": "Skeptic"}, {}, {}]
    assert by_turn[0]["Economist"].status == "unparsed"
    assert by_turn[1]["Economist"].status == "error"
    assert by_turn[1]["Economist"].error.startswith("InternalServerError: ")
    assert [item.reply.status for item in stub.requests_for("optimist")][:3] == [200, 429, 200]
    assert (by_turn[1]["Optimist"].prompt_tokens, by_turn[1]["Optimist"].completion_tokens) == (
        102, 12)
    assert by_turn[0]["Economist"].prompt_tokens == 301

    for record in turns:
        assert record.prompt_tokens == sum(bid.prompt_tokens for bid in record.bids)
        assert record.completion_tokens == sum(bid.completion_tokens for bid in record.bids)
    totals = client.state(result.room).totals()
    assert totals["prompt_tokens"] == sum(record.prompt_tokens for record in turns) > 0
    assert totals["completion_tokens"] == sum(record.completion_tokens for record in turns)
    for name in spec.agent_names:
        assert totals.get(f"agent:{name}:prompt_tokens", 0.0) == sum(
            turn[name].prompt_tokens for turn in by_turn)

    # The Skeptic's third request sees its own post as an assistant turn, others by name
    # (in the name field and before the content).
    third = stub.requests_for("skeptic")[2].body["messages"]
    assert third[0] == {"role": "system", "content": "You find what fails first."}
    assert third[1:4] == [
        {"role": "user", "name": "User", "content": "User: Launch next week?"},
        {"role": "assistant", "content": "What fails first?"},
        {"role": "user", "name": "Optimist", "content": "Optimist: Rollback is one flag."},
    ]
    assert third[4]["content"].startswith("You are Skeptic,")

    # A run's end is seen as it commits; the coordinator logs the turn a moment later.
    logged = wait_until(lambda: len(found := log_events(processes, "turn_committed")) >= 4
                        and found, 15, "the last turn's log line")
    assert [line["speaker"] for line in logged] == ["Skeptic", "Optimist", "Skeptic", None]
    assert [line["cuts"] for line in logged] == [None, {"Optimist": "Skeptic"}, None, None]
    assert logged[1]["message_chars"] == len("Rollback is one flag.")
    assert {call["agent"]: call["prompt_tokens"] for call in logged[0]["calls"]} == {
        "Optimist": 101, "Skeptic": 201, "Economist": 301}
    assert [line["prompt_tokens"] for line in logged] == [record.prompt_tokens for record in turns]


def test_a_room_whose_agents_all_fail_on_turn_one_fails_naming_each_error_and_fix(
        stub, processes, settings, queue):
    stub.script("chatty", text("I only write prose."))
    stub.script("gpt-nope", model_not_found("gpt-nope"))
    spec = llm_room(stub, queue, [
        {"name": "NoKey", "model": "alice", "api_key_env": UNSET_KEY_ENV},
        {"name": "BadKey", "model": "bob", "api_key_env": WRONG_KEY_ENV},
        {"name": "NoModel", "model": "gpt-nope"},
        {"name": "NoTools", "model": "chatty"},
    ])
    start(processes, queue, stub)

    client = Client(settings)
    result = client.run(spec, "Anyone there?", timeout_s=120)

    assert (result.status, result.stop_reason) == ("failed", StopReason.ALL_FAILED)
    (turn,) = client.turns(result.room)
    assert {answer.agent: answer.error_kind for answer in turn.bids} == {
        "NoKey": ErrorKind.MISSING_KEY, "BadKey": ErrorKind.AUTH,
        "NoModel": ErrorKind.NOT_FOUND, "NoTools": ErrorKind.NO_TOOL_CALL}
    assert [m.sender for m in result.messages] == ["User"]
    entries = dict(entry.split(": ", 1) for entry in result.stop_detail.split("; "))
    assert list(entries) == ["NoKey", "BadKey", "NoModel", "NoTools"]
    assert entries["NoKey"] == (
        f"MissingApiKey: environment variable {UNSET_KEY_ENV} is not set (likely fix: set "
        f"{UNSET_KEY_ENV} in the environment of the workers serving this agent (the variable "
        "its api_key_env names))")
    assert entries["BadKey"].startswith("AuthenticationError: ")
    assert "(likely fix: the provider refused the API key" in entries["BadKey"]
    assert entries["NoModel"].startswith("NotFoundError: ")
    assert "(likely fix: check the model name" in entries["NoModel"]
    assert entries["NoTools"].startswith("unparsed: no respond tool call")
    assert "(likely fix: use a model that supports function calling" in entries["NoTools"]


def test_a_spec_cannot_send_a_workers_secrets_to_an_api_base_it_does_not_allow(
        processes, settings, queue):
    secret = "sk-e2e-worker-secret-41c7"
    with OpenAIStub() as stub:  # a local model server: it answers with or without a key
        stub.script("local", tool_call(0.9, "No key needed here."))
        agents = [{"name": "Named", "model": "openai/local", "api_key_env": "OPENAI_API_KEY"},
                  {"name": "Default", "model": "openai/default"},
                  {"name": "Redis", "model": "openai/redis", "api_key_env": "PARLEY_REDIS_URL"}]
        spec = RoomSpec.model_validate({"name": "exfiltration", "policy": {
            "kind": "bid", "bid_timeout_s": BID_TIMEOUT_S}, "agents": [
                {**agent, "api_base": stub.url, "queue": queue} for agent in agents]})
        # The workers' defaults: provider key variables only, no API base allowed.
        processes.worker("-Q", queue, "-c", "4", env={"OPENAI_API_KEY": secret})
        processes.coordinator()
        client = Client(settings)

        result = client.run(spec, "Anyone there?", timeout_s=120)
        turns = client.turns(result.room)

    assert [(m.sender, m.content) for m in result.messages] == [
        ("User", "Anyone there?"), ("Named", "No key needed here.")]
    assert {item.model for item in stub.received} >= {"local", "default"}
    assert stub.requests_carrying(secret) == []
    assert stub.requests_carrying(settings.redis_url) == []
    refused = {bid.agent: bid.error for bid in turns[0].bids}["Redis"]
    assert refused.startswith("KeyEnvNotAllowed: api_key_env PARLEY_REDIS_URL ")
    assert "PARLEY_WORKER_KEY_ENVS" in refused
