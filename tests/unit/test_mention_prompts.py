"""The classifier's prompt in a mention room with dispatch."""

from __future__ import annotations

from parley.shared.models import AgentSpec, Message
from parley.workers.prompts import (
    askers_of,
    build_discuss_prompt,
    build_dispatch_prompt,
    build_select_prompt,
)

AGENTS = [AgentSpec(name="dev", role="reads the code", model="scripted", script=[]),
          AgentSpec(name="sre", role="runs production", model="scripted", script=[])]
CLASSIFIER = AgentSpec(name="dispatch", model="scripted", script=[])
THREAD = [Message(seq=1, sender="oncall", content="checkout fails", run=1),
          Message(seq=2, sender="sre", content="@oncall which region?", run=1),
          Message(seq=3, sender="dev", content="> @oncall quoted\nlooking", run=1),
          Message(seq=4, sender="oncall", content="eu-west", run=1)]


def test_the_agents_that_asked_the_person_are_marked():
    assert askers_of("oncall", THREAD, ["dev", "sre"]) == ["sre"]
    text = build_dispatch_prompt(CLASSIFIER, AGENTS, THREAD, None, len).messages[-1]["content"]
    assert "- sre: runs production (asked oncall)" in text
    assert "- dev: reads the code\n" in text
    assert "eu-west" in text and "The last message, from oncall, names nobody" in text


def test_an_earlier_question_answered_before_is_not_marked():
    thread = [*THREAD, Message(seq=5, sender="oncall", content="and now?", run=1)]
    assert askers_of("oncall", thread, ["dev", "sre"]) == []


def test_a_discussion_turn_tells_the_agent_how_names_silence_and_instructions_work():
    from parley.shared.models import CallKind, CallRequest, RoomSpec
    from parley.workers.tasks import caller

    spec = RoomSpec.model_validate({
        "policy": {"kind": "mention", "people": ["oncall"], "silent_token": "(pass)"},
        "agents": [{"name": "dev", "role": "reads the code", "model": "scripted",
                    "script": []},
                   {"name": "sre", "model": "scripted", "script": []}]})
    request = CallRequest(prefix="t", room="r", turn=1, attempt=1, agents=["dev"],
                         kind=CallKind.DISCUSS, snapshot_seq=1, deadline=0, spec_version=1,
                         instructions={"dev": "summarise the incident"})
    agent = caller(spec, request, "dev")
    assert agent.system_prompt.startswith("You are dev, who reads the code.")
    assert "People in the room: @oncall." in agent.system_prompt
    assert "answer exactly (pass)" in agent.system_prompt
    assert "the operator instructs you: summarise the incident" in agent.system_prompt
    plain = caller(spec, request.model_copy(update={"instructions": {}}), "dev")
    assert "instructs" not in plain.system_prompt
    prompt = build_discuss_prompt(agent, spec.agents, THREAD, None, len).messages
    assert prompt[0]["content"] == agent.system_prompt
    assert "@name (for example @sre)" in prompt[-1]["content"]
    assert "TERMINATE" not in prompt[-1]["content"]


# Seed 003's agents: a role and, beside it, a description.
TEAM = [AgentSpec(name="investigator", role="Investigator", description="Reads logs and metrics first",
                  model="scripted", script=[]),
        AgentSpec(name="dev", role="Developer", description="Knows the code and the releases",
                  model="scripted", script=[]),
        AgentSpec(name="comms", description="owns the public status page", model="scripted",
                  script=[])]


def test_an_agent_takes_a_description_beside_its_role():
    agent = AgentSpec.model_validate({"name": "dev", "role": "Developer", "model": "scripted",
                                      "description": "Knows the code and the releases",
                                      "script": []})
    assert (agent.role, agent.description) == ("Developer", "Knows the code and the releases")


def test_the_dispatch_classifier_reads_each_agents_name_role_and_description():
    text = build_dispatch_prompt(CLASSIFIER, TEAM, THREAD, None, len).messages[-1]["content"]
    assert "- investigator: Investigator — Reads logs and metrics first\n" in text
    assert "- dev: Developer — Knows the code and the releases\n" in text
    assert "- comms: owns the public status page\n" in text


def test_the_selector_reads_each_participants_role_and_description():
    selector = AgentSpec(name="selector", model="scripted", script=[])
    text = build_select_prompt(selector, TEAM, THREAD, None, len).messages[-1]["content"]
    assert "- dev: Developer — Knows the code and the releases\n" in text
    assert "- comms: owns the public status page\n" in text


def test_a_turns_notes_give_the_others_names_roles_and_descriptions():
    prompt = build_discuss_prompt(TEAM[1], TEAM, THREAD, None, len).messages[-1]["content"]
    assert ("The other agents are: investigator (Investigator — Reads logs and metrics first), "
            "comms (owns the public status page).") in prompt
