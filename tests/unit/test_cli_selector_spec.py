"""Bad selector specs through the CLI: one clear line naming what is wrong, exit code 2."""

from __future__ import annotations

from typing import Any

import pytest

from parley.shared.models import RoomSpec
from tests.support.commands import run_spec_in_process

SELECTOR = {"model": "scripted", "script": [{"content": "planner"}]}
AGENTS = [{"name": name, "role": f"the {name}", "model": "scripted", "script": []}
          for name in ("planner", "budget")]


def selector_room(agents: list[dict[str, Any]] | None = None, **policy: Any) -> dict[str, Any]:
    """A selector room spec with ``policy`` fields over the defaults (None removes one)."""
    fields = {"kind": "selector", "selector": SELECTOR, **policy}
    return {"name": "tokyo", "policy": {k: v for k, v in fields.items() if v is not None},
            "agents": agents if agents is not None else AGENTS}


def participant(name: str) -> dict[str, Any]:
    return {"name": name, "model": "scripted", "script": []}


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (selector_room(selector=None), "policy.selector: Field required"),
        (selector_room(selector={"role": "picks who speaks"}), "policy.selector.model: Field required"),
        (selector_room(selector={"model": "scripted"}),
         "policy.selector: a scripted agent needs a script"),
        (selector_room(selector="openai/gpt-4o-mini"),
         "policy.selector: Input should be a valid dictionary"),
        (selector_room(max_turns=0), "policy.max_turns: Input should be greater than or equal to 1"),
        (selector_room(max_turns=-3), "policy.max_turns: Input should be greater than or equal to 1"),
        (selector_room(max_turns="many"), "policy.max_turns: Input should be a valid integer"),
        (selector_room(call_timeout_s=0), "policy.call_timeout_s: Input should be greater than 0"),
        (selector_room(max_messages=5), "policy.max_messages: Extra inputs are not permitted"),
        (selector_room(turn_cap=5), "policy.turn_cap: Extra inputs are not permitted"),
        (selector_room(selector={**SELECTOR, "temp": 0.2}),
         "policy.selector.temp: Extra inputs are not permitted"),
        (selector_room(selector={**SELECTOR, "name": "chair"}),
         "policy.selector: the selector takes every agent field except name"),
        (selector_room(selector={**SELECTOR, "litellm_kwargs": {"api_key": "sk-x"}}),
         "policy.selector.litellm_kwargs: 'api_key': never put credentials"),
        (selector_room([*AGENTS, participant("selector")]),
         "agents: 'selector' is the selector's name in a selector room"),
        (selector_room([*AGENTS, participant("Selector")]),
         "agents: 'Selector' is the selector's name in a selector room"),
        (selector_room([*AGENTS, participant("selector ")]),
         "agents: 'selector ' is the selector's name in a selector room"),
        (selector_room([*AGENTS, participant("Planner")]),
         "agents: agent names must be unique, repeated: Planner, planner"),
        ({"policy": {"selector": SELECTOR}, "agents": AGENTS},
         "policy.selector: Extra inputs are not permitted"),
    ],
    ids=["no selector", "selector without model", "scripted selector without script",
         "selector as a string", "max_turns 0", "max_turns negative", "max_turns not a number",
         "call_timeout_s 0", "a bid field", "an unknown policy field", "an unknown selector field",
         "the selector named", "a credential in the selector", "a participant named selector",
         "a participant named Selector", "a participant named 'selector '",
         "participants told apart only by case", "a selector without kind: selector"],
)
def test_a_bad_selector_spec_is_one_line_naming_what_is_wrong(tmp_path, spec, expected):
    code, output = run_spec_in_process(tmp_path, spec)
    assert code == 2
    assert output.startswith("parley: invalid room spec")
    assert expected in output, output
    assert len(output.splitlines()) == 1
    assert "Traceback" not in output


def test_the_selector_may_carry_its_own_name_so_a_spec_round_trips():
    spec = RoomSpec.model_validate(selector_room())
    again = RoomSpec.model_validate(spec.model_dump(mode="json"))
    assert again == spec
    assert again.policy.selector.name == "selector"  # type: ignore[union-attr]


def test_a_participant_may_be_named_selector_in_a_bid_room():
    spec = RoomSpec.model_validate({"policy": {"kind": "bid"},
                                    "agents": [*AGENTS, participant("selector")]})
    assert spec.agent_names[-1] == "selector"
