"""A spec's approvals: approvers are people (never an agent's name, each once), an agent
approves only tools it names, and tools to approve need someone to approve them."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from parley.shared.models import RoomSpec


def spec(approvers: list[str], **agent: Any) -> dict[str, Any]:
    return {"policy": {"kind": "bid", "bid_mode": "intent"},
            "agents": [{"name": "SRE", "model": "scripted", "script": [], **agent},
                       {"name": "Investigator", "model": "scripted", "script": []}],
            "approvers": approvers}


def refusal(document: dict[str, Any]) -> str:
    with pytest.raises(ValidationError) as caught:
        RoomSpec.model_validate(document)
    return str(caught.value)


def test_an_agent_may_approve_its_tools_and_a_servers_tools_by_its_wildcard() -> None:
    room = RoomSpec.model_validate(spec(["alice"], tools=["rollback", "github/*"],
                                        approve=["rollback", "github/merge"]))
    assert room.agents[0].approve == ["rollback", "github/merge"]
    assert room.approval_timeout_s == 300


def test_approving_a_tool_the_agent_does_not_name_is_refused() -> None:
    assert ("approve names 'deploy', which is not one of the agent's tools (rollback)"
            in refusal(spec(["alice"], tools=["rollback"], approve=["deploy"])))


def test_tools_to_approve_without_approvers_are_refused() -> None:
    assert ("agent 'SRE' has tools to approve (rollback) but the room has no approvers"
            in refusal(spec([], tools=["rollback"], approve=["rollback"])))


@pytest.mark.parametrize(("approvers", "problem"), [
    (["sre"], "approvers names 'sre', which is an agent of the room: an approver is a person"),
    (["alice", "Alice"], "approvers names a person twice: Alice, alice"),
    (["bad:name"], "approvers: sender 'bad:name' must be 1-64 letters"),
])
def test_approvers_are_people_each_once(approvers: list[str], problem: str) -> None:
    assert problem in refusal(spec(approvers))
