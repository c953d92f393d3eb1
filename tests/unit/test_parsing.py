"""parse_respond: every output shape a provider returns becomes a clean (score, message),
and anything unreadable is a silent bid with its reason."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from pydantic import BaseModel

from parley.shared.models import ScriptEntry
from parley.workers.parsing import parse_respond
from parley.workers.scripted import completion

ARGUMENTS = '{"score": 0.8, "message": "  Ship it.  "}'
CALL = {"id": "call_1", "type": "function",
        "function": {"name": "respond", "arguments": ARGUMENTS}}


class Function(BaseModel):
    """A client library's function object."""

    name: str
    arguments: str


class ToolCall(BaseModel):
    """A client library's tool-call object."""

    id: str
    type: str
    function: Function


class Decision(BaseModel):
    """A structured-output object holding the decision itself."""

    score: float
    message: str


def assert_decision(raw: object, score: float = 0.8, message: str = "Ship it.") -> None:
    parsed = parse_respond(raw)
    assert (parsed.score, parsed.message, parsed.error) == (score, message, "")


def assert_silent(raw: object, reason: str) -> None:
    parsed = parse_respond(raw)
    assert (parsed.score, parsed.message) == (0.0, "")
    assert parsed.error.startswith("unparsed: ") and reason in parsed.error


def test_a_full_chat_completion_is_read_through_its_first_tool_call():
    assert_decision(completion(ScriptEntry(arguments=ARGUMENTS)))


@pytest.mark.filterwarnings("ignore:.*`ReadOnly` qualifier:UserWarning")
def test_a_litellm_response_object_is_read():
    from litellm.types.utils import ModelResponse

    response = ModelResponse(choices=[{"message": {
        "role": "assistant", "content": None, "tool_calls": [CALL]}}])
    assert_decision(response)


def test_a_tool_call_object_is_read():
    assert_decision(ToolCall(id="c", type="function",
                             function=Function(name="respond", arguments=ARGUMENTS)))


def test_a_list_of_tool_calls_is_read_through_the_respond_call():
    other = {"id": "call_0", "type": "function",
             "function": {"name": "search", "arguments": '{"score": 0.1, "message": "no"}'}}
    assert_decision([other, CALL])


def test_a_tool_call_dict_is_read():
    assert_decision(CALL)


def test_a_decision_dict_is_read():
    assert_decision({"score": 0.8, "message": "Ship it."})


def test_a_json_string_of_the_arguments_is_read():
    assert_decision(ARGUMENTS)


def test_arguments_with_a_lone_surrogate_escape_keep_the_pairs_beside_it_whole():
    # orjson refuses the lone half; a Python literal would split the pair into two halves.
    arguments = '{"score": 0.8, "message": "half \\ud83d, whole \\ud83d\\ude00"}'
    assert_decision(arguments, message="half \ud83d, whole \U0001f600")


def test_arguments_with_nan_are_not_read_as_json():
    assert_silent('{"score": NaN, "message": "x"}', "not JSON")


def test_a_json_string_of_tool_calls_is_read():
    assert_decision(json.dumps([CALL]))


def test_a_stringified_python_repr_of_tool_call_dicts_is_read():
    assert_decision(repr([CALL]))


def test_a_stringified_repr_of_client_objects_is_read_without_evaluating_it():
    text = repr([ToolCall(id="c", type="function",
                          function=Function(name="respond", arguments=ARGUMENTS))])
    assert text.startswith("[ToolCall(")
    assert_decision(text)


def test_a_pydantic_decision_object_is_read():
    assert_decision(Decision(score=0.8, message=" Ship it. "))


def test_a_plain_object_with_attributes_is_read():
    assert_decision(SimpleNamespace(score=0.8, message="Ship it."))


def test_a_score_given_as_a_string_is_read():
    assert_decision({"score": " 0.8 ", "message": "Ship it."})


def test_a_missing_score_reads_as_zero():
    assert_decision({"message": "Ship it."}, score=0.0)


def test_a_missing_message_reads_as_silence():
    assert_decision({"score": 0.8}, message="")


def test_scores_are_clamped_into_zero_to_one():
    assert_decision({"score": 3, "message": "Ship it."}, score=1.0)
    assert_decision({"score": "-0.5", "message": "Ship it."}, score=0.0)


def test_a_legacy_function_call_is_read():
    assert_decision({"role": "assistant", "content": None,
                     "function_call": {"name": "respond", "arguments": ARGUMENTS}})


def test_an_anthropic_tool_use_block_is_read():
    assert_decision({"role": "assistant", "content": [
        {"type": "text", "text": "Let me answer."},
        {"type": "tool_use", "id": "t1", "name": "respond",
         "input": {"score": 0.8, "message": "Ship it."}}]})


def test_a_reply_without_a_tool_call_is_silent_and_quotes_the_text():
    assert_silent({"role": "assistant", "content": "I think we should ship."},
                  "no respond tool call in the reply (it answered in text: 'I think we")


def test_a_score_that_is_not_a_number_is_silent():
    assert_silent({"score": "high", "message": "Ship it."}, "score must be a number")


def test_a_boolean_score_is_silent():
    assert_silent({"score": True, "message": "Ship it."}, "score must be a number")


def test_a_nan_score_is_silent():
    assert_silent({"score": float("nan"), "message": "x"}, "NaN")


def test_a_message_that_is_not_text_is_silent():
    assert_silent({"score": 0.9, "message": ["a", "b"]}, "message must be text")


def test_arguments_that_are_not_json_are_silent():
    assert_silent({"function": {"name": "respond", "arguments": '{"score": 0.9, "mess'}},
                  "not JSON or a Python literal")


def test_a_repr_with_code_in_it_is_never_evaluated():
    assert_silent("__import__('os').system('true')", "not JSON or a Python literal")


@pytest.mark.parametrize("raw, reason", [
    (None, "unexpected output type NoneType"),
    ("", "empty output"),
    ([], "empty list of tool calls"),
    ({"choices": []}, "no choices"),
    ({"other": 1}, "no score or message"),
])
def test_empty_or_shapeless_output_is_silent(raw, reason):
    assert_silent(raw, reason)
