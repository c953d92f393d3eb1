"""An unknown field of a spec is named with the nearest valid field, at any depth, and the
spec's other errors are kept as they were."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from parley.shared.models import AgentSpec, RoomSpec
from parley.shared.unknown_fields import nearest
from parley.views.problems import describe_validation

SCRIPTED = {"model": "scripted", "script": []}
AGENTS = [{"name": "A", **SCRIPTED}, {"name": "B", **SCRIPTED}]


def refusal(data: dict[str, Any]) -> str:
    with pytest.raises(ValidationError) as raised:
        RoomSpec.model_validate(data)
    return describe_validation(raised.value)


@pytest.mark.parametrize(("spec", "says"), [
    ({"agents": AGENTS, "limits": {"max_tokens": 100}},
     "limits.max_tokens: Extra inputs are not permitted: did you mean max_tokens_per_run or "
     "max_tokens_per_room?"),
    ({"agents": AGENTS, "policy": {"treshold": 0.6}},
     "policy.treshold: Extra inputs are not permitted: did you mean threshold?"),
    ({"agents": [{**AGENTS[0], "temp": 1}, AGENTS[1]]},
     "agents.0.temp: Extra inputs are not permitted: did you mean temperature?"),
    ({"agents": [{**AGENTS[0], "Descripton": "x"}, AGENTS[1]]},
     "agents.0.Descripton: Extra inputs are not permitted: did you mean description?"),
    ({"agents": AGENTS, "policy": {"kind": "selector", "selector": {"model": "m", "temperatur": 1}}},
     "policy.selector.temperatur: Extra inputs are not permitted: did you mean temperature?"),
    ({"agents": AGENTS, "policy": {"kind": "selector", "selector": {"model": "m"}, "max_turn": 3}},
     "policy.max_turn: Extra inputs are not permitted: did you mean max_turns?"),
    ({"agents": AGENTS, "policy": {"kind": "roundtable", "moderator": "B", "round": 2}},
     "policy.round: Extra inputs are not permitted: did you mean rounds?"),
    ({"agents": AGENTS, "policy": {"kind": "mention", "dispatch": {"model": "m", "treshold": 1}}},
     "policy.dispatch.treshold: Extra inputs are not permitted: did you mean threshold?"),
    ({"agents": [{"name": "A", "model": "scripted", "script": [{"scor": 1}]}, AGENTS[1]]},
     "agents.0.script.0.scor: Extra inputs are not permitted: did you mean score?"),
], ids=["limits", "bid", "agent", "case", "selector", "selector-policy", "roundtable",
        "dispatch", "script"])
def test_an_unknown_field_is_named_with_the_nearest_valid_one(spec, says):
    assert says in refusal(spec)


def test_a_name_like_no_field_is_told_the_fields_there_are():
    said = refusal({"agents": AGENTS, "colour": "red"})
    assert said.startswith("colour: Extra inputs are not permitted: did you mean ")
    assert said.endswith("(the fields here: name, description, policy, agents, limits, approvers, "
                          "approval_timeout_s, tool_results)")


def test_the_specs_other_errors_are_kept_beside_the_hints():
    said = refusal({"agents": [{"name": "A", "model": "scripted", "script": [{"score": 1, "error": "x"}],
                                "temp": 1}, {"name": "B", "model": "scripted"}],
                    "policy": {"threshold": 2, "recency_windw": 1}, "limits": {"max_cost_usd": 1}})
    assert said.split("; ") == [
        "policy.threshold: Input should be less than or equal to 1",
        "policy.recency_windw: Extra inputs are not permitted: did you mean recency_window?",
        "agents.0.script.0: a script entry is exactly one of {score, message}, {arguments}, "
        "{content}, {tool_calls} or {error} (with an optional sleep)",
        "agents.0.temp: Extra inputs are not permitted: did you mean temperature?",
        "agents.1: a scripted agent needs a script (a list of entries)",
        "limits.max_cost_usd: Extra inputs are not permitted: did you mean max_cost_usd_per_run "
        "or max_cost_usd_per_room?",
    ]


def test_a_refused_value_is_still_never_shown():
    with pytest.raises(ValidationError) as raised:
        AgentSpec.model_validate({"name": "A", "model": "m", "api_kye": "sk-secret-value"})
    assert "sk-secret-value" not in str(raised.value)
    assert "did you mean api_key_env?" in str(raised.value)


def test_the_nearest_fields_are_the_likeliest_first_and_two_only_when_about_as_alike():
    fields = ["max_tokens_per_run", "max_cost_usd_per_run", "max_tokens_per_room"]
    assert nearest("max_tokens", fields) == ["max_tokens_per_run", "max_tokens_per_room"]
    assert nearest("max_cost_usd_per_rum", fields) == ["max_cost_usd_per_run"]
    assert nearest("anything", []) == []
