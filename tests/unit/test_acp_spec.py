"""ACP agents in a room's spec: named by profile, never given a command, not in bid rooms,
and a profile only live workers run."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from parley.shared.models import RoomSpec
from parley.shared.protocol import DEFAULT_QUEUE
from parley.shared.tool_catalog import ToolsRefused, WorkerOffer, check_profiles, offered_profiles

SCRIPTED = {"name": "lead", "model": "scripted", "script": []}


def room(policy: dict, dev: dict | None = None) -> dict:
    return {"policy": policy, "agents": [SCRIPTED, {"name": "dev", "model": "acp/dev", **(dev or {})}]}


def refusal(data: dict) -> str:
    with pytest.raises(ValidationError) as caught:
        RoomSpec.model_validate(data)
    (error,) = caught.value.errors()
    return error["msg"]


def test_an_acp_agent_goes_to_its_profiles_queue():
    spec = RoomSpec.model_validate(room({"kind": "mention"}, {"instructions": "Be brief."}))
    dev = spec.agent("dev")
    assert (dev.is_acp, dev.acp_profile, dev.call_queue) == (True, "dev", "parley.acp.dev")
    assert spec.agent("lead").call_queue == DEFAULT_QUEUE


def test_a_spec_round_trips_with_its_acp_agent():
    selector = {"model": "scripted", "script": []}
    spec = RoomSpec.model_validate(room({"kind": "selector", "selector": selector}))
    assert RoomSpec.model_validate(spec.model_dump()) == spec


@pytest.mark.parametrize("field", ["command", "cwd", "env"])
def test_a_spec_giving_a_process_is_refused_in_one_line(field):
    message = refusal(room({"kind": "mention"}, {field: ["claude"]}))
    assert message == (f"Value error, a spec never gives an agent's {field}: external agents "
                       "run from the workers' ACP profiles (PARLEY_WORKER_ACP_CONFIG); name one "
                       "with model: acp/<profile>")


def test_a_bid_room_with_an_acp_agent_is_refused():
    assert refusal(room({"kind": "bid"})) == (
        "Value error, agent 'dev' (acp/dev) cannot take part in a bid room: an ACP agent has no "
        "respond tool to bid with (use a mention, selector or roundtable room)")


def test_a_roundtable_takes_an_acp_panelist():
    spec = RoomSpec.model_validate(room({"kind": "roundtable", "moderator": "lead"}))
    assert spec.agent("dev").is_acp


@pytest.mark.parametrize("dev, wrong", [
    ({"tools": ["grep"]}, "takes no tools"),
    ({"queue": "elsewhere"}, "drop queue"),
    ({"model": "acp/no.such"}, "names a profile"),
])
def test_an_acp_agent_takes_no_model_settings_of_its_own(dev, wrong):
    assert wrong in refusal(room({"kind": "mention"}, dev))


def test_instructions_are_only_for_acp_agents():
    data = room({"kind": "mention"})
    data["agents"][0] = {**SCRIPTED, "instructions": "hi"}
    assert "instructions are for ACP agents" in refusal(data)


def test_a_profile_no_live_worker_runs_is_refused():
    spec = RoomSpec.model_validate(room({"kind": "mention"}))
    offers = [WorkerOffer(worker="w1", acp_profiles=["claude"]),
              WorkerOffer(worker="w2", acp_profiles=["claude", "dev"])]
    assert offered_profiles(offers) == {"claude": ["w1", "w2"], "dev": ["w2"]}
    check_profiles(spec, offered_profiles(offers))
    with pytest.raises(ToolsRefused, match="^agent 'dev' runs ACP profile 'dev', which no live"):
        check_profiles(spec, offered_profiles(offers[:1]))
