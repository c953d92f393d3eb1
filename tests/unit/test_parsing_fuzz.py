"""parse_respond under fuzzing: whatever a provider returns, it never raises, and the score
it reads is always a finite number in [0, 1]."""

from __future__ import annotations

import json
import math
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from parley.workers.parsing import ParsedBid, parse_respond

FUZZ = settings(max_examples=300, deadline=timedelta(seconds=2), derandomize=True,
                database=None, suppress_health_check=[HealthCheck.too_slow])



def power_of_ten(digits: int, sign: int) -> int:
    """A number beyond a float (digits > 308), or beyond printing (digits > 4,300)."""
    return sign * 10**digits


HUGE = [power_of_ten(digits, sign) for digits in (19, 400, 5000) for sign in (1, -1)]
KEYS = ["score", "message", "choices", "tool_calls", "function_call", "function", "arguments",
        "args", "input", "content", "type", "name", "respond", "tool_use", "id"]

# Built, not listed: hypothesis prints its strategies, and a 5,000-digit int has no repr.
huge = st.builds(power_of_ten, st.sampled_from([19, 400, 5000]), st.sampled_from([1, -1]))
numbers = (st.integers() | huge
           | st.floats(allow_nan=True, allow_infinity=True))
scalars = st.none() | st.booleans() | numbers | st.text(max_size=20)
keys = st.sampled_from(KEYS) | st.text(max_size=4)
data = st.recursive(
    scalars,
    lambda children: (st.lists(children, max_size=4)
                      | st.dictionaries(keys, children, max_size=5)
                      | st.tuples(children, children)),
    max_leaves=25,
)


def as_text(value: Any, form: str) -> str:
    """``value`` as a provider might send it: JSON (NaN and Infinity included) or a repr."""
    try:
        return json.dumps(value) if form == "json" else repr(value)
    except ValueError:  # an integer too long to print
        return "{" + "9" * 5000 + ": 1}"


texts = st.builds(as_text, data, st.sampled_from(["json", "repr"])) | st.text(max_size=60)
decisions = st.fixed_dictionaries({}, optional={"score": data | texts, "message": data | texts})


def completion_of(arguments: Any) -> dict[str, Any]:
    """A chat completion whose respond call carries ``arguments``."""
    call = {"id": "c", "type": "function", "function": {"name": "respond", "arguments": arguments}}
    return {"choices": [{"message": {"role": "assistant", "content": None, "tool_calls": [call]}}]}


outputs = (
    data
    | texts
    | decisions
    | st.builds(completion_of, decisions | texts | data)
    | st.builds(completion_of, st.builds(as_text, decisions, st.sampled_from(["json", "repr"])))
)


def assert_clean(parsed: ParsedBid) -> None:
    assert isinstance(parsed.score, float) and math.isfinite(parsed.score)
    assert 0.0 <= parsed.score <= 1.0
    assert isinstance(parsed.message, str) and isinstance(parsed.error, str)


@FUZZ
@given(outputs)
def test_any_output_parses_to_a_finite_score_in_range_without_raising(raw):
    assert_clean(parse_respond(raw))


@pytest.mark.parametrize("score", [math.inf, -math.inf, math.nan, 1e308, -1e308, *HUGE,
                                   "inf", "-inf", "nan", "1e999", "9" * 5000],
                         ids=lambda score: type(score).__name__)
def test_extreme_scores_are_clamped_or_read_as_silent(score):
    parsed = parse_respond({"score": score, "message": "x"})
    assert_clean(parsed)
    assert parsed.score in (0.0, 1.0)


def test_a_score_too_large_for_a_float_reads_as_the_highest_score():
    assert parse_respond({"score": 10**400, "message": "x"}) == ParsedBid(score=1.0, message="x")
    assert parse_respond({"score": -(10**400), "message": "x"}).score == 0.0


def test_a_message_too_long_to_print_is_an_unparsed_bid_not_a_crash():
    parsed = parse_respond({"score": 0.9, "message": 10**5000})
    assert (parsed.score, parsed.message) == (0.0, "") and parsed.error.startswith("unparsed")


def test_malformed_envelopes_are_unparsed_bids_not_crashes():
    for raw in ({"choices": 5}, {"choices": [{"message": {"tool_calls": 7}}]},
                {"tool_calls": "abc"}, "{(1,): 2}", "{[1]: 2}", {"score": {"x": 10**5000}}):
        parsed = parse_respond(raw)
        assert parsed.score == 0.0 and parsed.error.startswith("unparsed"), raw
