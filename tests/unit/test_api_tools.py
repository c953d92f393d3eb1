"""``GET /tools`` and creating rooms over HTTP against the tool catalog, on fakeredis."""

from __future__ import annotations

import json

import fakeredis
from typer.testing import CliRunner

from parley import cli
from parley.shared.keys import Keys
from tests.support.api import AUTH, PREFIX, spec_json
from tests.support.tool_catalog import OPS_TOOLS, ROLLBACK, SEARCH_LOGS, publish


def offer(server, worker: str, tools) -> None:  # noqa: ANN001
    publish(fakeredis.FakeRedis(server=server), Keys(PREFIX), worker, tools)


def tools_spec(tools: list[str], approvers: list[str] | None = None) -> dict:
    spec = spec_json()
    spec["agents"][0]["tools"] = tools
    spec["approvers"] = approvers or []
    spec["policy"] = {**spec.get("policy", {}), "bid_mode": "intent"}  # a full bid runs no tools
    return spec


def test_get_tools_is_parley_tools_json(api, server, monkeypatch):
    offer(server, "w1", OPS_TOOLS)
    offer(server, "w2", [SEARCH_LOGS])
    monkeypatch.setattr(cli.common, "Client", lambda: api.app.state.client)

    reply = api.get("/tools")

    assert reply.status_code == 200
    printed = CliRunner().invoke(cli.app, ["tools", "--json"]).output
    assert reply.json() == json.loads(printed)
    by_name = {tool["name"]: tool for tool in reply.json()["tools"]}
    assert by_name["search_logs"]["workers"] == ["w1", "w2"]
    assert by_name["rollback"]["options"]["approval"] is True


def test_get_tools_with_no_live_worker_is_an_empty_list(api):
    assert api.get("/tools").json() == {"tools": []}


def test_get_tools_needs_a_token_when_tokens_are_set(secured, server):
    offer(server, "w1", [SEARCH_LOGS])
    assert secured.get("/tools").status_code == 401
    assert [t["name"] for t in secured.get("/tools", headers=AUTH).json()["tools"]] == [
        "search_logs"]


def test_a_room_whose_tools_a_live_worker_offers_is_created(api, server):
    offer(server, "w1", [SEARCH_LOGS, ROLLBACK])
    reply = api.post("/rooms", json=tools_spec(["search_logs", "rollback"], ["alice"]))
    assert reply.status_code == 201


def test_a_room_naming_a_tool_no_live_worker_offers_is_422_naming_it(api, server):
    offer(server, "w1", [SEARCH_LOGS])
    reply = api.post("/rooms", json=tools_spec(["search_logs", "github/*"]), params={"room": "r1"})
    assert (reply.status_code, reply.json()) == (422, {"error": (
        "agent 'agent0' names tool 'github/*', but no live worker offers a tool of server "
        "'github' (see parley tools)")})
    assert api.get("/rooms/r1").status_code == 404


def test_a_room_with_an_approval_tool_and_no_approvers_is_422(api, server):
    offer(server, "w1", [ROLLBACK])
    reply = api.post("/rooms", json=tools_spec(["rollback"]))
    assert reply.status_code == 422
    assert reply.json()["error"].startswith("agent 'agent0' may call tool 'rollback', which "
                                            "needs a person's approval")


def test_a_room_approving_without_approvers_is_422_as_an_invalid_spec(api, server):
    offer(server, "w1", [SEARCH_LOGS])
    spec = tools_spec(["search_logs"])
    spec["agents"][0]["approve"] = ["search_logs"]
    reply = api.post("/rooms", json=spec)
    assert reply.status_code == 422
    assert reply.json()["error"].startswith("invalid room spec: ")
    assert "but the room has no approvers" in reply.json()["error"]
