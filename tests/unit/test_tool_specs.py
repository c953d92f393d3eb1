"""A spec's tools: an agent approves only tools it may call, approvals need approvers, and
the catalog check (tools no live worker offers, approval tools without approvers)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from parley.shared.models import RoomSpec, tool_covered
from parley.shared.tool_catalog import (
    CatalogEntry,
    OfferedOptions,
    ToolsRefused,
    check_offered,
    tools_named,
)


def spec(tools: list[str], approve: list[str] | None = None, approvers: list[str] | None = None
         ) -> RoomSpec:
    return RoomSpec.model_validate({
        "agents": [{"name": "Investigator", "model": "scripted", "script": [{"content": "x"}],
                    "tools": tools, "approve": approve or []},
                   {"name": "SRE", "model": "scripted", "script": [{"content": "y"}]}],
        "policy": {"kind": "bid", "bid_mode": "intent"},  # a full bid runs no tools
        "approvers": approvers or []})


def entry(approval: bool = False) -> CatalogEntry:
    return CatalogEntry(description="", parameters={}, options=OfferedOptions(approval=approval),
                        workers=["w1"])


CATALOG = {"search_logs": entry(), "rollback": entry(approval=True),
           "github/create_issue": entry(), "github/search": entry()}


def test_a_tool_is_covered_by_its_name_or_its_servers_wildcard():
    assert tool_covered("search_logs", ["search_logs"])
    assert tool_covered("github/search", ["github/*"])
    assert not tool_covered("github/search", ["gitlab/*"])
    assert not tool_covered("search_logs", ["search_logs/*"])


def test_an_agent_approving_a_tool_it_does_not_have_is_refused():
    with pytest.raises(ValidationError, match="approve names 'rollback', which is not one of "
                                              r"the agent's tools \(search_logs\)"):
        spec(["search_logs"], approve=["rollback"], approvers=["alice"])


def test_an_agent_may_approve_a_tool_of_a_server_it_names_whole():
    assert spec(["github/*"], approve=["github/create_issue"], approvers=["alice"])


def test_approvals_without_approvers_are_refused():
    with pytest.raises(ValidationError, match=r"agent 'Investigator' has tools to approve "
                                              r"\(rollback\) but the room has no approvers"):
        spec(["rollback"], approve=["rollback"])


def test_a_wildcard_names_every_tool_of_its_server():
    assert tools_named("github/*", CATALOG) == ["github/create_issue", "github/search"]
    assert tools_named("search_logs", CATALOG) == ["search_logs"]
    assert tools_named("gitlab/*", CATALOG) == []


def test_a_spec_whose_tools_live_workers_offer_passes():
    check_offered(spec(["search_logs", "github/*"]), CATALOG)
    check_offered(spec(["rollback"], approvers=["alice"]), CATALOG)


@pytest.mark.parametrize(("tools", "refusal"), [
    (["search_logs", "read_metrics"], "agent 'Investigator' names tool 'read_metrics', which "
                                      "no live worker offers (see parley tools)"),
    (["gitlab/*"], "agent 'Investigator' names tool 'gitlab/*', but no live worker offers a "
                   "tool of server 'gitlab' (see parley tools)"),
    (["rollback"], "agent 'Investigator' may call tool 'rollback', which needs a person's "
                   "approval, and the room has no approvers: name who may approve in approvers"),
])
def test_a_spec_naming_tools_it_cannot_have_is_refused_in_one_line(tools, refusal):
    with pytest.raises(ToolsRefused) as refused:
        check_offered(spec(tools), CATALOG)
    assert str(refused.value) == refusal


def test_nothing_is_offered_when_no_worker_is_live():
    with pytest.raises(ToolsRefused, match="'search_logs', which no live worker offers"):
        check_offered(spec(["search_logs"]), {})


@pytest.mark.parametrize("name", ["", "search logs", "github/", "a/b/c", "x" * 65, "ls;rm"])
def test_a_tool_name_that_no_worker_could_offer_is_refused_by_its_place(name):
    with pytest.raises(ValidationError, match=r"agents\.0\.tools\.0\n.*not a tool name"):
        spec([name])
