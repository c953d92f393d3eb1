"""The likely fix named for each agent when every agent fails on a run's first turn: chosen
by the failure's kind, checked against the errors real litellm calls raise here (offline:
each fails before any request leaves the machine, or at a closed local port)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from parley.client import load_spec
from parley.coordinator import policies
from parley.coordinator.policies import TurnView
from parley.coordinator.policies.common import FUNCTION_CALLING_FIX, failure_line, likely_fix
from parley.coordinator.turn_loop import timed_out
from parley.shared.models import AgentSpec, Answer, AnswerStatus, ErrorKind, Message, RoomSpec, StopReason
from parley.shared.records import answer_fields, answer_from_fields
from parley.shared.settings import get_settings
from parley.workers.calls import Call, answer_call

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


def failure_of(model: str, litellm_kwargs: dict | None = None, **fields) -> Answer:
    # litellm_kwargs go in unchecked, as a spec written straight into Redis past the spec's
    # allow-list would: the worker checks them again.
    agent = AgentSpec(name="A", model=model, timeout_s=5, **fields).model_copy(
        update={"litellm_kwargs": litellm_kwargs or {}})
    bid = answer_call(agent, [agent], Call(1, 0), lambda: TASK, time.time() + 10,
                   settings=get_settings())
    assert bid.status is AnswerStatus.ERROR
    return bid


def fix_for(bid: Answer, key_env: str | None = None) -> str:
    return likely_fix(bid.error_kind, bid.error_variable, key_env)


def test_an_unset_key_variable_names_the_variable():
    bid = failure_of("openai/gpt-4o-mini", api_key_env="PARLEY_TEST_UNSET_KEY")
    assert bid.error_kind is ErrorKind.MISSING_KEY
    assert fix_for(bid, "PARLEY_TEST_UNSET_KEY").startswith(
        "set PARLEY_TEST_UNSET_KEY in the environment of the workers")


def test_a_missing_openai_key_names_openai_api_key():
    bid = failure_of("openai/gpt-4o-mini")
    assert bid.error_kind is ErrorKind.MISSING_KEY, bid.error
    assert fix_for(bid).startswith("set OPENAI_API_KEY on the workers"), bid.error


def test_a_missing_anthropic_key_names_anthropic_api_key():
    bid = failure_of("anthropic/claude-3-5-sonnet-20240620")
    assert bid.error.startswith("AuthenticationError: ")
    assert bid.error_kind is ErrorKind.MISSING_KEY
    assert fix_for(bid).startswith("set ANTHROPIC_API_KEY on the workers"), bid.error


def test_a_model_without_a_provider_asks_for_the_provider_prefix():
    bid = failure_of("no-such-model-anywhere")
    assert bid.error.startswith("BadRequestError: ")
    assert bid.error_kind is ErrorKind.UNKNOWN_PROVIDER
    assert "prefix the model with its provider" in fix_for(bid)


def test_a_provider_that_cannot_take_tools_asks_for_function_calling(worker_env):
    worker_env(PARLEY_WORKER_ALLOWED_API_BASES="http://127.0.0.1:9")
    bid = failure_of("petals/some-model", api_base="http://127.0.0.1:9")
    assert bid.error.startswith("UnsupportedParamsError: ")
    assert bid.error_kind is ErrorKind.TOOLS_UNSUPPORTED
    assert fix_for(bid) == FUNCTION_CALLING_FIX


def test_an_unreachable_api_base_asks_to_check_it(worker_env):
    worker_env(PARLEY_WORKER_ALLOWED_API_BASES="http://127.0.0.1:9", OPENAI_API_KEY="sk-test-1234")
    bid = failure_of("openai/gpt-4o-mini", api_base="http://127.0.0.1:9")
    assert bid.error_kind is ErrorKind.CONNECTION, bid.error
    assert "api_base" in fix_for(bid)


def test_a_key_variable_the_workers_do_not_lend_names_it_and_the_setting():
    bid = failure_of("openai/gpt-4o-mini", api_key_env="INTERNAL_TOKEN")
    assert bid.error_kind is ErrorKind.KEY_NOT_ALLOWED
    fix = fix_for(bid, "INTERNAL_TOKEN")
    assert "PARLEY_WORKER_KEY_ENVS" in fix and "add INTERNAL_TOKEN there" in fix


def test_an_endpoint_that_may_not_receive_a_key_names_the_setting():
    bid = failure_of("openai/gpt-4o-mini",
                     litellm_kwargs={"aws_bedrock_runtime_endpoint": "http://10.0.0.5:8000"})
    assert bid.error_kind is ErrorKind.API_BASE_NOT_ALLOWED
    assert fix_for(bid).startswith("have the workers' operator add the agent's api_base (or the "
                                   "endpoint named) to PARLEY_WORKER_ALLOWED_API_BASES")


def test_a_call_past_its_deadline_asks_for_more_time():
    agent = AgentSpec(name="A", model="openai/gpt-4o-mini")
    bid = answer_call(agent, [agent], Call(1, 0), lambda: TASK, time.time() - 1,
                   settings=get_settings())
    assert bid.error_kind is ErrorKind.TIMEOUT
    assert fix_for(bid).startswith("raise the agent's timeout_s or the policy's bid_timeout_s")


def test_every_kind_but_the_self_explaining_ones_has_a_fix():
    without_fix = {kind for kind in ErrorKind if not likely_fix(kind)}
    assert without_fix == {ErrorKind.NONE, ErrorKind.UNPARSED, ErrorKind.SCRIPTED,
                           ErrorKind.OTHER, ErrorKind.CANCELLED}


def test_no_fix_breaks_the_all_failed_detail_into_more_entries():
    fixes = [likely_fix(kind, "X_API_KEY", key_env) for kind in ErrorKind
             for key_env in ("X_API_KEY", None)]
    assert not [fix for fix in fixes if "; " in fix]


def test_the_fix_follows_the_kind_not_the_error_text():
    refused = "AuthenticationError: OpenAIException - Incorrect API key provided."
    assert likely_fix(ErrorKind.OTHER, refused) == ""
    assert likely_fix(ErrorKind.AUTH, "").startswith("the provider refused the API key")


def test_a_missing_key_whose_error_names_no_variable_gets_the_general_fix():
    fix = likely_fix(ErrorKind.MISSING_KEY)
    assert fix.startswith("set the provider's API key variable on the workers")


def test_a_key_not_lent_whose_error_names_no_variable_gets_the_general_fix():
    fix = likely_fix(ErrorKind.KEY_NOT_ALLOWED)
    assert fix.endswith("have the operator add the agent's variable there")


def test_other_unsupported_parameters_are_named_as_such():
    assert "drop_params" in likely_fix(ErrorKind.UNSUPPORTED_PARAMS)


def test_a_reply_without_a_tool_call_asks_for_function_calling():
    assert likely_fix(ErrorKind.NO_TOOL_CALL) == FUNCTION_CALLING_FIX


def test_a_room_whose_agents_all_fail_lists_each_error_and_fix():
    spec = RoomSpec.model_validate({"agents": [
        {"name": "A", "model": "openai/gpt-4o-mini", "api_key_env": "PARLEY_TEST_UNSET_KEY"},
        {"name": "B", "model": "no-such-model-anywhere"},
        {"name": "C", "model": "openai/gpt-4o-mini"},
    ]})
    bids = [answer_call(agent, spec.agents, Call(1, 0), lambda: TASK, time.time() + 10,
                     settings=get_settings())
            for agent in spec.agents]
    decision = policies.decide(spec, FIRST_TURN, bids + [timed_out("D", 1)])

    assert decision.stop is StopReason.ALL_FAILED and decision.status == "failed"
    entries = decision.detail.split("; ")
    assert [entry.split(":")[0] for entry in entries] == ["A", "B", "C", "D"]
    assert "PARLEY_TEST_UNSET_KEY is not set (likely fix: set PARLEY_TEST_UNSET_KEY" in entries[0]
    assert "(likely fix: prefix the model with its provider" in entries[1]
    assert "(likely fix: set OPENAI_API_KEY" in entries[2]
    assert entries[3] == ("D: no answer before the deadline (likely fix: check that a worker "
                          "consumes the agent's queue, or raise the policy's bid_timeout_s "
                          "(call_timeout_s in a selector or round-table room))")


def test_the_openai_example_without_a_key_fails_saying_which_variable_to_set():
    spec = load_spec(EXAMPLE)
    bids = [answer_call(agent, spec.agents, Call(1, 0), lambda: TASK, time.time() + 10,
                     settings=get_settings())
            for agent in spec.agents]

    decision = policies.decide(spec, FIRST_TURN, bids)

    assert decision.stop is StopReason.ALL_FAILED
    assert decision.detail.count("(likely fix: set OPENAI_API_KEY in the environment") == 1
    assert decision.detail.startswith(f"{', '.join(spec.agent_names)}: MissingApiKey: ")


def failed_with(agent: str, error: str, kind: ErrorKind, variable: str = "") -> Answer:
    return Answer(agent=agent, turn=1, status=AnswerStatus.ERROR, error=error, error_kind=kind,
                  error_variable=variable)


def test_the_all_failed_detail_says_each_error_and_fix_once_with_its_agents():
    unset = "MissingApiKey: environment variable OPENAI_API_KEY is not set"
    answers = [failed_with("A", unset, ErrorKind.MISSING_KEY, "OPENAI_API_KEY"),
               failed_with("B", "RateLimitError: slow down", ErrorKind.RATE_LIMIT),
               failed_with("C", unset, ErrorKind.MISSING_KEY, "OPENAI_API_KEY"),
               failed_with("D", "RateLimitError: quota", ErrorKind.RATE_LIMIT),
               failed_with("E", "scripted failure", ErrorKind.SCRIPTED),
               timed_out("F", 1)]
    spec = RoomSpec.model_validate({"agents": [
        {"name": answer.agent, "model": "scripted", "script": []} for answer in answers]})

    decision = policies.decide(spec, FIRST_TURN, answers)

    assert decision.detail == (
        "A, C: MissingApiKey: environment variable OPENAI_API_KEY is not set (likely fix: set "
        "OPENAI_API_KEY on the workers, or name the key's variable in the agent's "
        "api_key_env); "
        "B: RateLimitError: slow down; D: RateLimitError: quota (likely fix for B, D: lower "
        "the request rate or raise the provider's quota); "
        "E: scripted failure; "
        "F: no answer before the deadline (likely fix: check that a worker consumes the "
        "agent's queue, or raise the policy's bid_timeout_s (call_timeout_s in a selector or "
        "round-table room))")


def test_the_fix_names_the_variable_the_answer_carries_not_one_read_from_its_text():
    spec = RoomSpec.model_validate({"agents": [
        {"name": "A", "model": "openai/gpt-4o-mini", "api_key_env": "PARLEY_TEST_UNSET_KEY"},
        {"name": "B", "model": "openai/gpt-4o-mini"}]})
    unset = failure_of("openai/gpt-4o-mini", api_key_env="PARLEY_TEST_UNSET_KEY")
    assert unset.error_variable == "PARLEY_TEST_UNSET_KEY"
    # The error's text is for people: another wording names the same variable.
    reworded = unset.model_copy(update={"error": "MissingApiKey: no key"})
    assert "(likely fix: set PARLEY_TEST_UNSET_KEY in the environment of the workers" in (
        failure_line(spec, reworded))
    provider = failure_of("openai/gpt-4o-mini").model_copy(update={"agent": "B"})
    assert provider.error_variable == "OPENAI_API_KEY"
    assert "(likely fix: set OPENAI_API_KEY on the workers" in failure_line(spec, provider)


def test_the_variable_is_kept_with_the_answer_and_costs_nothing_when_there_is_none():
    failed = Answer(agent="A", turn=1, status=AnswerStatus.ERROR,
                    error_kind=ErrorKind.MISSING_KEY, error_variable="X_API_KEY")
    assert answer_from_fields(answer_fields(failed)) == failed
    assert "error_variable" not in answer_fields(Answer(agent="A", turn=1))
