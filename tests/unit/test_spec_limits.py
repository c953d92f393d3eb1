"""What a room spec may hold: every spec that validates can be stored and run, and no spec
costs more to read than its text is long."""

from __future__ import annotations

import json
import math
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from parley.client import load_spec
from parley.coordinator.room_io import coordinator_spec
from parley.shared.keys import check_room_id
from parley.shared.models import AgentSpec, RoomSpec
from parley.shared.spec_limits import (
    MAX_DURATION_S,
    MAX_SPEC_BYTES,
    MAX_SPEC_DEPTH,
    MAX_SPEC_JSON_BYTES,
    SpecTooLarge,
    check_document_size,
)
from parley.swarms.groupchat import GroupChat
from parley.workers.parsing import parse_respond
from parley.workers.scripted import completion

FUZZ = settings(max_examples=200, deadline=timedelta(seconds=3), derandomize=True,
                database=None, suppress_health_check=[HealthCheck.too_slow])


def room(policy: dict[str, Any] | None = None, entry: dict[str, Any] | None = None,
         **agent: Any) -> dict[str, Any]:
    """A valid room's data: one scripted agent with one entry, one LLM agent."""
    return {"policy": policy or {},
            "agents": [{"name": "Scripted", "model": "scripted",
                        "script": [entry or {"score": 0.5, "message": "hi"}]},
                       {"name": "Model", "model": "openai/gpt-4o-mini", **agent}]}


def refusal(data: Any) -> str:
    with pytest.raises(ValidationError) as caught:
        RoomSpec.model_validate(data)
    return str(caught.value)


def round_trip(spec: RoomSpec) -> RoomSpec:
    """The spec as the coordinator reads it back from Redis."""
    return RoomSpec.model_validate_json(spec.model_dump_json())


def test_a_room_id_with_a_trailing_newline_is_refused():
    assert check_room_id("launch-panel-1") == "launch-panel-1"
    with pytest.raises(ValueError, match="invalid room id"):
        check_room_id("launch-panel-1\n")


@pytest.mark.parametrize("data", [
    room(policy={"recency_penalty": math.inf}),
    room(policy={"bid_timeout_s": math.inf}),
    room(policy={"threshold": math.nan}),
    room(entry={"score": 0.5, "sleep": math.inf}),
    room(temperature=math.nan),
    room(timeout_s=math.inf),
    room(entry={"score": 0.5, "message": [1.0, math.inf]}),
    room(litellm_kwargs={"top_p": math.inf}),
    room(litellm_kwargs={"extra_body": {"options": [{"mirostat_tau": -math.inf}]}}),
], ids=["recency_penalty", "bid_timeout_s", "threshold", "sleep", "temperature", "timeout_s",
        "message", "top_p", "nested"])
def test_a_non_finite_number_is_refused_anywhere_in_the_spec(data):
    assert "finite number" in refusal(data)


@pytest.mark.parametrize("data, says", [
    (room(policy={"bid_timeout_s": 1e12}), "bid_timeout_s"),
    (room(policy={"bid_timeout_s": MAX_DURATION_S + 1}), "bid_timeout_s"),
    (room(timeout_s=MAX_DURATION_S + 1), "timeout_s"),
    (room(entry={"score": 0.5, "sleep": MAX_DURATION_S + 1}), "sleep"),
    (room(max_tokens=10**7), "max_tokens"),
    (room(max_context_tokens=10**9), "max_context_tokens"),
    (room(policy={"max_messages": 10**9}), "max_messages"),
])
def test_a_duration_or_token_count_beyond_its_bound_is_refused(data, says):
    message = refusal(data)
    assert says in message and "less than or equal to" in message


def test_durations_up_to_an_hour_are_accepted():
    spec = RoomSpec.model_validate(room(policy={"bid_timeout_s": MAX_DURATION_S},
                                        entry={"score": 1, "sleep": MAX_DURATION_S},
                                        timeout_s=MAX_DURATION_S))
    assert spec.policy.bid_timeout_s == MAX_DURATION_S == 3600


@pytest.mark.parametrize("given, stored", [
    (math.inf, 1.0), (-math.inf, 0.0), (7, 1.0), (-2.5, 0.0), (10**400, 1.0),
    (0.25, 0.25), (1, 1), ("0.8", "0.8"), (None, None),
], ids=["inf", "-inf", "int", "negative", "huge", "inside", "one", "text", "null"])
def test_a_scripted_score_outside_0_to_1_is_clamped_as_the_parser_clamps(given, stored):
    spec = round_trip(RoomSpec.model_validate(room(entry={"score": given})))
    entry = spec.agents[0].script[0]  # type: ignore[index]
    assert entry.score == stored and "score" in entry.model_fields_set


@pytest.mark.parametrize("score, bid", [(".inf", 1.0), ("-.inf", 0.0), ("1e999", 1.0)])
def test_a_stored_scripted_score_bids_as_the_parser_reads_a_providers(tmp_path, score, bid):
    text = ("agents:\n- {name: A, model: scripted, script: []}\n"
            f"- {{name: B, model: scripted, script: [{{score: {score}, message: go}}]}}\n")
    spec = round_trip(load_spec(spec_file(tmp_path, text)))
    raw = completion(spec.agents[1].script[0])  # type: ignore[index]
    assert parse_respond(raw) == parse_respond({"score": float(score.replace(".inf", "inf")),
                                                "message": "go"})
    assert parse_respond(raw).score == bid


def test_a_nan_scripted_score_is_refused():
    assert "NaN is not a score" in refusal(room(entry={"score": math.nan}))


def test_an_integer_beyond_64_bits_in_free_form_values_is_refused():
    assert "fit in 64 bits" in refusal(room(litellm_kwargs={"seed": 2**64}))
    assert "fit in 64 bits" in refusal(room(entry={"message": [2**70]}))


@pytest.mark.parametrize("window", [0, -1, -(2**63 - 1)])
def test_a_recency_window_of_zero_or_below_is_kept_as_given(window):
    spec = round_trip(RoomSpec.model_validate(room(policy={"recency_window": window})))
    assert spec.policy.recency_window == window  # type: ignore[union-attr]


def test_a_recency_window_beyond_64_bits_is_refused():
    assert "recency_window" in refusal(room(policy={"recency_window": -(2**64)}))


# --- sizes -------------------------------------------------------------------------------

def alias_bomb(levels: int, leaf: str = "lol", fanout: int = 9, indent: int = 0) -> str:
    """A YAML mapping whose last anchor expands to fanout**levels copies of ``leaf``, in a
    few hundred bytes."""
    lines = [f"l0: &l0 [{', '.join([leaf] * fanout)}]"]
    lines += [f"l{level}: &l{level} [{', '.join([f'*l{level - 1}'] * fanout)}]"
              for level in range(1, levels)]
    return "\n".join(" " * indent + line for line in lines)


def spec_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "room.yaml"
    path.write_text(text)
    return path


@pytest.mark.timeout(60)
def test_a_yaml_alias_bomb_in_litellm_kwargs_is_refused_before_anything_expands_it(tmp_path):
    text = ("agents:\n- {name: A, model: scripted, script: []}\n"
            "- name: B\n  model: openai/gpt-4o-mini\n  litellm_kwargs:\n    extra_body:\n"
            + alias_bomb(12, indent=6))
    assert len(text) < 1000  # 9**12 strings once expanded: walked naively, it never ends
    with pytest.raises(ValidationError, match="room spec too large: at least [0-9,]+ values "
                                              "once YAML aliases are expanded"):
        load_spec(spec_file(tmp_path, text))


@pytest.mark.timeout(60)
def test_a_small_yaml_that_would_store_megabytes_is_refused(tmp_path):
    text = ("agents:\n- {name: A, model: scripted, script: []}\n"
            "- name: B\n  model: scripted\n  script:\n  - score: 0.9\n    message:\n"
            + alias_bomb(5, leaf="x" * 40, indent=6))
    assert len(text) < 1000  # 9**5 copies of 40 characters: 2.4 MB of text once expanded
    with pytest.raises(ValidationError, match="room spec too large: at least [0-9,]+ "
                                              "characters of text once YAML aliases"):
        load_spec(spec_file(tmp_path, text))


def test_a_spec_nested_too_deeply_is_refused_with_the_limit():
    deep: Any = "x"
    for _ in range(MAX_SPEC_DEPTH):
        deep = {"k": deep}
    message = refusal(room(litellm_kwargs={"extra_body": deep}))
    assert f"room spec too large: nested {MAX_SPEC_DEPTH + 1} levels deep " \
           f"(limit {MAX_SPEC_DEPTH})" in message


def test_yaml_nested_deeper_than_the_parser_can_read_is_one_clear_error(tmp_path):
    with pytest.raises(SpecTooLarge, match="room spec too large: nested too deeply to read"):
        load_spec(spec_file(tmp_path, "agents: " + "[" * 5000))


def test_a_spec_file_over_the_byte_limit_is_refused_unread(tmp_path):
    text = "# " + "x" * MAX_SPEC_BYTES + "\n" + yaml.safe_dump(room())
    with pytest.raises(SpecTooLarge, match=f"room spec too large: {len(text):,} bytes "
                                           f"\\(limit {MAX_SPEC_BYTES:,}\\)"):
        load_spec(spec_file(tmp_path, text))


def test_a_spec_whose_stored_json_is_over_the_limit_is_refused():
    # Control characters are one character of text and six bytes of JSON each.
    prompt = "\x01" * (MAX_SPEC_JSON_BYTES // 5)
    message = refusal(room(system_prompt=prompt))
    assert "bytes as stored JSON" in message and f"(limit {MAX_SPEC_JSON_BYTES:,})" in message


@pytest.mark.parametrize("text", ["\ud800", "\ud83d\ude00"], ids=["lone", "pair"])
def test_text_holding_surrogates_is_refused_not_stored_differently(text):
    assert "surrogate code point" in refusal(room(system_prompt=text))
    assert "surrogate code point" in refusal(room(entry={"message": {"k": [text]}}))
    assert "surrogate code point" in refusal(room(litellm_kwargs={"extra_body": {text: 1}}))


def test_shared_python_objects_are_measured_once_and_refused_when_they_expand():
    node: Any = ["x"] * 10
    for _ in range(30):
        node = [node] * 10  # 10**31 strings once expanded; 31 distinct lists
    with pytest.raises(ValidationError, match="room spec too large"):
        AgentSpec(name="A", model="openai/gpt-4o-mini", litellm_kwargs={"stop": node})
    with pytest.raises(ValueError, match="^agent 'A': room spec too large"):
        GroupChat(agents=[{"name": "A", "model": "openai/x", "litellm_kwargs": {"stop": node}},
                          {"name": "B", "model": "openai/x"}], client=object())  # type: ignore[arg-type]


def test_a_document_that_contains_itself_is_refused_as_too_deep():
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(SpecTooLarge, match="nested"):
        check_document_size({"agents": loop})


def test_the_example_rooms_are_far_inside_every_bound():
    for path in Path(__file__).parents[2].joinpath("examples", "rooms").glob("*.yaml"):
        extent = check_document_size(yaml.safe_load(path.read_text()))
        # A scripted tool call's arguments are the deepest: 8 levels down.
        assert extent.nodes < 1000 and extent.height < 10


# --- round trip ---------------------------------------------------------------------------

# Mostly valid specs, with the values that do not survive JSON unless handled: extreme
# floats and integers, text of every kind, tuples, nesting; now and then inf and nan.
edge_floats = st.floats(allow_nan=False, allow_infinity=False) | st.sampled_from(
    [-0.0, 5e-324, 1e308, math.inf, -math.inf, math.nan])
# Any code point, surrogates included (a Python string can hold them, UTF-8 cannot), and
# often the code points around them.
texts = (st.text(st.characters(exclude_categories=()), max_size=8)
         | st.text(st.characters(min_codepoint=0xD7F0, max_codepoint=0xE010), max_size=4))
plain = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**64), max_value=2**64) | edge_floats
    | texts,
    lambda inner: (st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
                   | st.tuples(inner)),
    max_leaves=8)
seconds = st.floats(min_value=0.001, max_value=MAX_DURATION_S) | st.sampled_from([MAX_DURATION_S, 1e12])
sleeps = st.fixed_dictionaries({}, optional={"sleep": st.just(0) | seconds})
responds = st.fixed_dictionaries({}, optional={"score": plain | edge_floats, "message": plain})
entries = st.builds(lambda shape, sleep: {**shape, **sleep}, st.one_of(
    responds,
    st.fixed_dictionaries({"arguments": st.text(max_size=20)}),
    st.fixed_dictionaries({"content": st.text(max_size=20)}),
    st.fixed_dictionaries({"error": st.text(min_size=1, max_size=20)}),
), sleeps)
kwargs = st.dictionaries(st.sampled_from(["top_p", "seed", "stop", "extra_body", "logit_bias",
                                          "mock_response", "user", "thinking"]),
                         plain, max_size=3)
scripted = st.fixed_dictionaries({"model": st.just("scripted"), "script": st.lists(entries, max_size=4)},
                                 optional={"system_prompt": st.text(max_size=10)})
llm = st.fixed_dictionaries({"model": st.just("openai/gpt-4o-mini")}, optional={
    "temperature": st.floats(min_value=0, max_value=2), "max_tokens": st.integers(1, 255),
    "timeout_s": seconds, "max_context_tokens": st.integers(256, 10**7),
    "litellm_kwargs": kwargs, "system_prompt": st.text(max_size=10)})
policies = st.fixed_dictionaries({}, optional={
    "threshold": st.floats(min_value=0, max_value=1), "recency_penalty": edge_floats,
    "recency_window": st.integers(min_value=-1, max_value=10**6),
    "max_messages": st.integers(min_value=1, max_value=10**6), "bid_timeout_s": seconds})


def named(agent_list: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"name": f"Agent {index}", **agent} for index, agent in enumerate(agent_list)]


@FUZZ
@given(policies, st.lists(scripted | llm, min_size=2, max_size=3).map(named))
def test_every_spec_that_validates_round_trips_through_its_stored_json(policy, agent_list):
    try:
        spec = RoomSpec.model_validate({"policy": policy, "agents": agent_list})
    except ValidationError as error:
        assert error.error_count() >= 1
        return
    reread = round_trip(spec)
    assert reread == spec
    assert reread.model_dump_json() == spec.model_dump_json()


def test_a_stored_spec_is_read_back_without_checking_the_write_bounds_again(store, keys):
    # Checked against every bound as it was written (or by an earlier version's bounds): a
    # stored spec is read back as it is, by the workers and the coordinator alike, while
    # the same document given for a new room is refused.
    document = room(entry={"message": [2**70]})
    raw = json.dumps(document)
    store.redis.hset(keys.spec("stored"), mapping={"version": 1, "json": raw})

    assert store.read_spec("stored")[1].agents[0].script[0].message == [2**70]
    assert coordinator_spec(raw.encode()).agents[1].name == "Model"
    assert "fit in 64 bits" in refusal(document)


def test_a_stored_spec_that_does_not_validate_still_fails_to_read(store, keys):
    document = room()
    document["agents"][1]["temprature"] = 0.2
    store.redis.hset(keys.spec("stored"), mapping={"version": 1, "json": json.dumps(document)})

    with pytest.raises(ValidationError, match="temprature"):
        store.read_spec("stored")
