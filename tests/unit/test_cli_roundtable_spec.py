"""Bad round-table specs through the CLI: one clear line naming what is wrong, exit code 2."""

from __future__ import annotations

from typing import Any

import pytest

from parley.shared.models import RoomSpec, RoundtablePolicy
from tests.support.commands import run_spec_in_process


def agent(name: str) -> dict[str, Any]:
    return {"name": name, "role": f"the {name}", "model": "scripted", "script": []}


PANEL = [agent("Value"), agent("Quality"), agent("Moderator")]


def roundtable(agents: list[dict[str, Any]] | None = None, **policy: Any) -> dict[str, Any]:
    """A round-table spec with ``policy`` fields over the defaults (None removes one)."""
    fields = {"kind": "roundtable", "moderator": "Moderator", **policy}
    return {"name": "headphones", "policy": {k: v for k, v in fields.items() if v is not None},
            "agents": agents if agents is not None else PANEL}


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (roundtable(moderator="Judge"),
         "agents: the moderator 'Judge' is not one of the agents: name one of "
         "'Value', 'Quality', 'Moderator', or add it to agents"),
        (roundtable(moderator="moderator"),
         "agents: the moderator 'moderator' is not one of the agents: did you "
         "mean 'Moderator'?"),
        (roundtable([agent("Moderator")]),
         "agents: a round-table needs at least one panelist besides the "
         "moderator 'Moderator': add an agent"),
        (roundtable([]),
         "agents: the moderator 'Moderator' is not one of the agents: add it "
         "to agents"),
        (roundtable(rounds=0), "policy.rounds: Input should be greater than or equal to 1"),
        (roundtable(rounds=-2), "policy.rounds: Input should be greater than or equal to 1"),
        (roundtable(rounds=10**7), "policy.rounds: Input should be less than or equal to 1000000"),
        (roundtable(rounds="twice"), "policy.rounds: Input should be a valid integer"),
        (roundtable(rounds=600_000),
         "agents: rounds x panelists is 1,200,000: a run posts at most "
         "1,000,000 messages, so lower rounds"),
        (roundtable(moderator=None), "policy.moderator: Field required"),
        (roundtable(moderator=""), "policy.moderator: String should have at least 1 character"),
        (roundtable(moderator="M" * 65),
         "policy.moderator: String should have at most 64 characters"),
        (roundtable(call_timeout_s=0), "policy.call_timeout_s: Input should be greater than 0"),
        (roundtable(call_timeout_s=7200),
         "policy.call_timeout_s: Input should be less than or equal to 3600"),
        (roundtable(max_turns=5), "policy.max_turns: Extra inputs are not permitted"),
        (roundtable(selector={"model": "scripted", "script": []}),
         "policy.selector: Extra inputs are not permitted"),
        ({"policy": {"kind": "round-table", "moderator": "Moderator"}, "agents": PANEL},
         "policy: kind must be one of: bid, selector, roundtable"),
    ],
    ids=["moderator not an agent", "moderator in another case", "no panelist", "no agents",
         "rounds 0", "rounds negative", "rounds unbounded", "rounds not a number",
         "rounds x panelists over a run's messages",
         "no moderator", "empty moderator", "moderator too long", "call_timeout_s 0",
         "call_timeout_s over an hour", "a selector field", "a selector",
         "a misspelt kind"],
)
def test_a_bad_roundtable_spec_is_one_line_naming_what_is_wrong(tmp_path, spec, expected):
    code, output = run_spec_in_process(tmp_path, spec)
    assert code == 2
    assert output.startswith("parley: invalid room spec")
    assert expected in output, output
    assert len(output.splitlines()) == 1
    assert "Traceback" not in output


def test_an_unknown_moderator_names_only_a_few_of_many_agents():
    with pytest.raises(ValueError, match=r"name one of 'a0', .*'a7', \.\.\., or add it") as error:
        RoomSpec.model_validate(roundtable([agent(f"a{i}") for i in range(500)]))
    assert "'a8'" not in str(error.value)


def test_a_roundtable_spec_defaults_to_one_round_and_round_trips():
    spec = RoomSpec.model_validate(roundtable())
    assert isinstance(spec.policy, RoundtablePolicy)
    assert (spec.policy.rounds, spec.policy.call_timeout) == (1, 60.0)
    assert RoomSpec.model_validate(spec.model_dump(mode="json")) == spec


def test_the_moderator_may_be_listed_anywhere_among_the_agents():
    spec = RoomSpec.model_validate(roundtable([agent("Moderator"), agent("Value")]))
    assert spec.policy.moderator == "Moderator"  # type: ignore[union-attr]
