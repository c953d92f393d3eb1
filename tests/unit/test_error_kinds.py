"""Every failed call carries its kind, told where it failed: the worker classifies parley's
own refusals and litellm's exceptions, the parser output it cannot read, the coordinator an
answer that never came; and answers recorded before kinds existed still load."""

from __future__ import annotations

import time

import httpx
import litellm
import pytest

from parley.coordinator.turn_loop import cancelled, timed_out
from parley.shared.models import AgentSpec, Answer, AnswerStatus, CallKind, ErrorKind, Message, TurnRecord
from parley.shared.records import (
    answer_fields,
    answer_from_fields,
    turn_record_fields,
    turn_record_from_fields,
)
from parley.shared.settings import get_settings
from parley.workers.calls import Call, answer_call, failure_kind, failure_variable
from parley.workers.credentials import ApiBaseNotAllowed, KeyEnvNotAllowed, MissingApiKey
from parley.workers.llm import BudgetSpent, DeadlinePassed, classify_error
from parley.workers.parsing import parse_respond, parse_text
from parley.workers.scripted import ScriptedError
from parley.workers.tools.toolbox import ToolUnavailable

pytestmark = pytest.mark.filterwarnings("ignore:.*`ReadOnly` qualifier:UserWarning")

TASK = [Message(seq=1, sender="User", content="Launch?")]
FORBIDDEN = httpx.Response(403, request=httpx.Request("POST", "http://127.0.0.1:9/v1"))
LLM_AGENT = AgentSpec(name="A", model="openai/gpt-4o-mini")

# (error, kind): each of the worker's kinds, as litellm or parley raises it.
RAISED = [
    (MissingApiKey("environment variable OPENAI_API_KEY is not set"), ErrorKind.MISSING_KEY),
    (litellm.InternalServerError(
        "OpenAIException - Missing credentials. Please pass an `api_key`, or set the "
        "`OPENAI_API_KEY` environment variable.", "openai", "gpt-4o-mini"),
     ErrorKind.MISSING_KEY),
    (litellm.APIConnectionError("Missing Gemini API key. Set the GEMINI_API_KEY or "
                                "GOOGLE_API_KEY environment variable.", "gemini", "m"),
     ErrorKind.MISSING_KEY),
    (litellm.AuthenticationError("Missing Anthropic API Key - A call is being made to "
                                 "anthropic but no key is set", "anthropic", "m"),
     ErrorKind.MISSING_KEY),
    (KeyEnvNotAllowed("api_key_env INTERNAL_TOKEN is not one of the key variables this "
                      "worker lends to specs (PARLEY_WORKER_KEY_ENVS)"),
     ErrorKind.KEY_NOT_ALLOWED),
    (ApiBaseNotAllowed("http://10.0.0.5:8000/v1 refused the call without a key (401); this "
                       "worker sends keys only to the API bases in "
                       "PARLEY_WORKER_ALLOWED_API_BASES"), ErrorKind.API_BASE_NOT_ALLOWED),
    (litellm.AuthenticationError("OpenAIException - Incorrect API key provided: sk-wrong.",
                                 "openai", "m"), ErrorKind.AUTH),
    (litellm.PermissionDeniedError("this key may not use the model", "openai", "m",
                                   FORBIDDEN), ErrorKind.AUTH),
    (litellm.BadRequestError("LLM Provider NOT provided. Pass in the LLM provider you are "
                             "trying to call. You passed model=gpt-nope", "gpt-nope", None),
     ErrorKind.UNKNOWN_PROVIDER),
    (litellm.UnsupportedParamsError("petals does not support parameters: "
                                    "['presence_penalty'], for model=x"),
     ErrorKind.UNSUPPORTED_PARAMS),
    (litellm.UnsupportedParamsError("petals does not support parameters: ['tools', "
                                    "'tool_choice'], for model=x"),
     ErrorKind.TOOLS_UNSUPPORTED),
    (litellm.BadRequestError("OllamaException - tools is not supported by this model", "m",
                             "ollama"), ErrorKind.TOOLS_UNSUPPORTED),
    (litellm.NotFoundError("OpenAIException - no such deployment", "m", "openai"),
     ErrorKind.NOT_FOUND),
    (litellm.BadRequestError("The model `gpt-9` does not exist or you do not have access "
                             "to it.", "gpt-9", "openai"), ErrorKind.NOT_FOUND),
    (litellm.ContextWindowExceededError("the prompt is too big", "m", "openai"),
     ErrorKind.CONTEXT_WINDOW),
    (litellm.BadRequestError("This model's maximum context length is 8192 tokens", "m",
                             "openai"), ErrorKind.CONTEXT_WINDOW),
    (litellm.RateLimitError("slow down", "openai", "m"), ErrorKind.RATE_LIMIT),
    (litellm.Timeout("no reply in 5s", "m", "openai"), ErrorKind.TIMEOUT),
    (DeadlinePassed("only 0.010s left before the bid deadline"), ErrorKind.TIMEOUT),
    (BudgetSpent("not made: the $0.0001 left of the cost limits buys no output token at "
                 "$0.001 a token"), ErrorKind.BUDGET),
    (litellm.APIConnectionError("peer reset", "openai", "m"), ErrorKind.CONNECTION),
    (litellm.InternalServerError("OpenAIException - Connection error.", "openai", "m"),
     ErrorKind.CONNECTION),
    (litellm.InternalServerError("MistralException - [Errno -2] Name or service not known",
                                 "mistral", "m"), ErrorKind.CONNECTION),
    (litellm.InternalServerError("upstream failed", "openai", "m"), ErrorKind.PROVIDER_ERROR),
    (litellm.ServiceUnavailableError("down for maintenance", "openai", "m"),
     ErrorKind.PROVIDER_ERROR),
    (litellm.BadGatewayError("bad gateway", "openai", "m"), ErrorKind.PROVIDER_ERROR),
    (litellm.APIError(529, "AnthropicException - Overloaded", "anthropic", "m"),
     ErrorKind.PROVIDER_ERROR),
    (litellm.BadRequestError("ContentPolicyViolation: flagged", "m", "openai"),
     ErrorKind.OTHER),
    (ValueError("something unusual"), ErrorKind.OTHER),
]


@pytest.mark.parametrize(("error", "kind"), RAISED,
                         ids=[f"{kind}-{type(error).__name__}" for error, kind in RAISED])
def test_a_model_calls_error_is_classified_by_its_class_and_what_its_message_names(error, kind):
    assert classify_error(error) is kind


def test_a_scripted_entrys_error_is_of_kind_scripted():
    agent = AgentSpec(name="A", model="scripted", script=[{"error": "provider down"}])

    bid = answer_call(agent, [agent], Call(1, 0, number=1), lambda: TASK, time.time() + 10,
                   settings=get_settings())

    assert (bid.status, bid.error, bid.error_kind) == (
        AnswerStatus.ERROR, "ScriptedError: provider down", ErrorKind.SCRIPTED)


def test_a_scripted_agents_error_that_its_script_did_not_ask_for_is_other():
    scripted = AgentSpec(name="A", model="scripted", script=[])
    assert failure_kind(scripted, ScriptedError("x")) is ErrorKind.SCRIPTED
    assert failure_kind(scripted, litellm.RateLimitError("x", "openai", "m")) is ErrorKind.OTHER


def test_a_real_agents_failure_is_classified_by_the_model_client():
    assert failure_kind(LLM_AGENT, litellm.RateLimitError("x", "openai", "m")) is (
        ErrorKind.RATE_LIMIT)


def test_a_reply_without_the_respond_call_is_no_tool_call():
    prose = {"choices": [{"message": {"role": "assistant", "content": "I would rather chat."}}]}
    assert parse_respond(prose).error_kind is ErrorKind.NO_TOOL_CALL


def test_a_respond_call_that_cannot_be_read_is_unparsed():
    parsed = parse_respond('{"score": "very high", "message": "x"}')
    assert parsed.error.startswith("unparsed: ") and parsed.error_kind is ErrorKind.UNPARSED


def test_a_plain_reply_without_text_is_unparsed():
    assert parse_text({"choices": []}).error_kind is ErrorKind.UNPARSED


def test_an_answer_read_cleanly_has_no_kind():
    assert parse_respond('{"score": 0.5, "message": "x"}').error_kind is ErrorKind.NONE
    assert parse_text("planner").error_kind is ErrorKind.NONE


def test_an_answer_that_never_came_is_of_kind_no_answer():
    answer = timed_out("A", 3)
    assert (answer.status, answer.error_kind) == (AnswerStatus.TIMEOUT, ErrorKind.NO_ANSWER)


def test_every_kind_but_none_is_set_somewhere():
    parsed = {parse_respond("").error_kind,
              parse_respond({"role": "assistant", "content": "prose"}).error_kind}
    scripted_agent = AgentSpec(name="A", model="scripted", script=[])
    scripted = failure_kind(scripted_agent, ScriptedError("x"))
    unavailable = failure_kind(scripted_agent, ToolUnavailable("search_logs"))
    set_somewhere = ({kind for _, kind in RAISED} | parsed | {scripted, unavailable}
                     | {timed_out("A", 1).error_kind}
                     | {cancelled("A", 1, CallKind.DISCUSS, 0, 1).error_kind})
    assert set_somewhere == set(ErrorKind) - {ErrorKind.NONE}


def test_the_kind_goes_through_the_answers_stream():
    answer = Answer(agent="A", turn=1, status=AnswerStatus.ERROR, error="RateLimitError: slow",
                 error_kind=ErrorKind.RATE_LIMIT)
    fields = answer_fields(answer)
    assert fields["error_kind"] == "rate_limit"
    assert answer_from_fields(fields) == answer


def test_an_answer_written_before_kinds_existed_loads_without_one():
    old = {"agent": "A", "turn": "1", "status": "error", "error": "RuntimeError: down"}
    assert answer_from_fields(old).error_kind is ErrorKind.NONE


def test_a_turn_record_keeps_each_answers_kind_and_older_records_load():
    record = TurnRecord(turn=1, run=1, run_turns=1, epoch=1, snapshot_seq=1,
                        messages_in_run=1, recent=[], bids=[
                            Answer(agent="A", turn=1, score=0.5, message="ok"),
                            timed_out("B", 1)])
    fields = turn_record_fields(record)
    assert turn_record_from_fields(fields).bids == record.bids

    fields["bids"] = '[{"agent": "B", "turn": 1, "status": "timeout"}]'
    assert turn_record_from_fields(fields).bids[0].error_kind is ErrorKind.NONE


# (error, the key variable a failed answer carries for it): parley's own refusals say it as
# a field; only a provider's refusal is read for it, at the model client's edge.
NAMED = [
    (MissingApiKey("environment variable PARLEY_KEY is not set", "PARLEY_KEY"), "PARLEY_KEY"),
    (KeyEnvNotAllowed("api_key_env INTERNAL_TOKEN is not lent", "INTERNAL_TOKEN"),
     "INTERNAL_TOKEN"),
    (litellm.InternalServerError(
        "OpenAIException - Missing credentials. Please pass an `api_key`, or set the "
        "`OPENAI_API_KEY` environment variable.", "openai", "gpt-4o-mini"), "OPENAI_API_KEY"),
    (litellm.APIConnectionError("Missing Gemini API key. Set the GEMINI_API_KEY or "
                                "GOOGLE_API_KEY environment variable.", "gemini", "m"),
     "GEMINI_API_KEY"),
    # A variable an error other than a missing key happens to name is not its cause.
    (litellm.RateLimitError("OPENAI_API_KEY is over its quota", "openai", "m"), ""),
]


@pytest.mark.parametrize(("error", "variable"), NAMED)
def test_a_failed_answer_carries_the_key_variable_its_failure_names(error, variable):
    kind = classify_error(error)
    assert failure_variable(LLM_AGENT, error, kind) == variable


def test_a_refusals_variable_is_the_one_it_was_given_whatever_its_text_says():
    error = MissingApiKey("environment variable OTHER_API_KEY is not set", "ANTHROPIC_API_KEY")
    assert failure_variable(LLM_AGENT, error, ErrorKind.MISSING_KEY) == "ANTHROPIC_API_KEY"
