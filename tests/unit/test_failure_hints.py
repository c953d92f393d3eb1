"""The likely fix named for each agent when every agent fails on a run's first turn,
checked against the errors real litellm calls raise here (offline: each fails before any
request leaves the machine)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from coordinator import policies
from coordinator.policies import TurnView
from coordinator.policies.common import FUNCTION_CALLING_FIX, likely_fix
from parley.client import load_spec
from shared.models import AgentSpec, Bid, BidStatus, Message, RoomSpec, StopReason
from workers.bidding import Call, make_bid

pytestmark = pytest.mark.filterwarnings("ignore:.*`ReadOnly` qualifier:UserWarning")

TASK = [Message(seq=1, sender="User", content="Launch?")]
FIRST_TURN = TurnView(turn=1, run=1, run_turns=1, messages_in_run=1, recent=(), snapshot_seq=1)
EXAMPLE = Path(__file__).parents[2] / "examples" / "rooms" / "openai.yaml"


@pytest.fixture(autouse=True)
def no_provider_keys(worker_env):
    """No provider key on this machine, whatever the caller's environment holds; the test's
    unset key variable is one the workers lend."""
    worker_env(OPENAI_API_KEY=None, ANTHROPIC_API_KEY=None, ANTHROPIC_AUTH_TOKEN=None,
               PARLEY_TEST_UNSET_KEY=None,
               PARLEY_WORKER_KEY_ENVS="OPENAI_API_KEY,ANTHROPIC_API_KEY,PARLEY_TEST_UNSET_KEY")


def error_of(model: str, **fields) -> str:
    agent = AgentSpec(name="A", model=model, timeout_s=5, **fields)
    bid = make_bid(agent, [agent], Call(1, 0), lambda: TASK, time.time() + 10)
    assert bid.status is BidStatus.ERROR
    return bid.error


def test_an_unset_key_variable_names_the_variable():
    error = error_of("openai/gpt-4o-mini", api_key_env="PARLEY_TEST_UNSET_KEY")
    assert "PARLEY_TEST_UNSET_KEY" in likely_fix(error)


def test_a_missing_openai_key_names_openai_api_key():
    error = error_of("openai/gpt-4o-mini")
    fix = likely_fix(error)
    assert fix.startswith("set OPENAI_API_KEY on the workers"), error


def test_a_missing_anthropic_key_names_anthropic_api_key():
    error = error_of("anthropic/claude-3-5-sonnet-20240620")
    assert error.startswith("AuthenticationError: ")
    assert likely_fix(error).startswith("set ANTHROPIC_API_KEY on the workers"), error


def test_a_model_without_a_provider_asks_for_the_provider_prefix():
    error = error_of("no-such-model-anywhere")
    assert error.startswith("BadRequestError: ")
    assert "prefix the model with its provider" in likely_fix(error)


def test_a_provider_that_cannot_take_tools_asks_for_function_calling(worker_env):
    worker_env(PARLEY_WORKER_ALLOWED_API_BASES="http://127.0.0.1:9")
    error = error_of("petals/some-model", api_base="http://127.0.0.1:9")
    assert error.startswith("UnsupportedParamsError: ")
    assert likely_fix(error) == FUNCTION_CALLING_FIX


def test_other_unsupported_parameters_are_named_as_such():
    error = ("UnsupportedParamsError: petals does not support parameters: ['presence_penalty'], "
             "for model=x")
    assert "drop_params" in likely_fix(error)


def test_a_reply_without_a_tool_call_asks_for_function_calling():
    assert likely_fix("unparsed: no respond tool call in the reply") == FUNCTION_CALLING_FIX


def test_a_refused_key_asks_to_check_its_value():
    fix = likely_fix("AuthenticationError: OpenAIException - Incorrect API key provided.")
    assert fix.startswith("the provider refused the API key")


def test_an_unknown_model_name_asks_to_check_it():
    fix = likely_fix("NotFoundError: OpenAIException - The model `gpt-9` does not exist or "
                     "you do not have access to it.")
    assert fix.startswith("check the model name")


def test_an_unreachable_api_base_asks_to_check_it():
    assert "api_base" in likely_fix("InternalServerError: OpenAIException - Connection error.")


def test_a_key_variable_the_workers_do_not_lend_names_the_setting():
    fix = likely_fix("KeyEnvNotAllowed: api_key_env INTERNAL_TOKEN is not one of the key "
                     "variables this worker lends to specs (PARLEY_WORKER_KEY_ENVS)")
    assert "PARLEY_WORKER_KEY_ENVS" in fix and "INTERNAL_TOKEN" in fix


def test_a_base_that_may_not_receive_a_key_names_the_setting():
    fix = likely_fix("ApiBaseNotAllowed: http://10.0.0.5:8000/v1 refused the call without a key "
                     "(401); this worker sends keys only to the API bases in "
                     "PARLEY_WORKER_ALLOWED_API_BASES")
    assert fix.startswith("have the workers' operator add the agent's api_base (or the "
                          "endpoint named) to PARLEY_WORKER_ALLOWED_API_BASES")


def test_an_unknown_error_has_no_hint():
    assert likely_fix("ValueError: something unusual") == ""


def test_a_room_whose_agents_all_fail_lists_each_error_and_fix():
    spec = RoomSpec.model_validate({"agents": [
        {"name": "A", "model": "openai/gpt-4o-mini", "api_key_env": "PARLEY_TEST_UNSET_KEY"},
        {"name": "B", "model": "no-such-model-anywhere"},
        {"name": "C", "model": "openai/gpt-4o-mini"},
    ]})
    bids = [make_bid(agent, spec.agents, Call(1, 0), lambda: TASK, time.time() + 10)
            for agent in spec.agents]
    decision = policies.decide(spec, FIRST_TURN, bids + [Bid(agent="D", turn=1,
                                                       status=BidStatus.TIMEOUT,
                                                       error="no bid before the deadline")])

    assert decision.stop is StopReason.ALL_FAILED and decision.status == "failed"
    entries = decision.detail.split("; ")
    assert [entry.split(":")[0] for entry in entries] == ["A", "B", "C", "D"]
    assert "PARLEY_TEST_UNSET_KEY is not set (likely fix: set PARLEY_TEST_UNSET_KEY" in entries[0]
    assert "(likely fix: prefix the model with its provider" in entries[1]
    assert "(likely fix: set OPENAI_API_KEY" in entries[2]
    assert "(likely fix: check that a worker consumes the agent's queue" in entries[3]


def test_the_openai_example_without_a_key_fails_saying_which_variable_to_set():
    spec = load_spec(EXAMPLE)
    bids = [make_bid(agent, spec.agents, Call(1, 0), lambda: TASK, time.time() + 10)
            for agent in spec.agents]

    decision = policies.decide(spec, FIRST_TURN, bids)

    assert decision.stop is StopReason.ALL_FAILED
    assert decision.detail.count("(likely fix: set OPENAI_API_KEY in the environment") == len(
        spec.agents)
