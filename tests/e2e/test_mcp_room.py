"""An MCP server's tools in a room, across real processes: a `parley worker` started with
PARLEY_WORKER_MCP_CONFIG naming the test MCP server (tests/support/mcp_server.py, which
the worker starts over stdio), an LLM agent on the local OpenAI-compatible stub naming
``grafana/*`` in a real litellm tool loop, a `parley coordinator`, the real Redis."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from parley.client import Client
from parley.shared.models import RoomSpec, ToolCallStatus
from tests.support.commands import run_parley
from tests.support.mcp_servers import stdio_entry, write_config
from tests.support.openai_stub import OpenAIStub, asks_tools, text, tool_messages
from tests.support.polling import wait_until
from tests.support.rooms import investigator_room

pytestmark = [pytest.mark.e2e, pytest.mark.redis]

KEY_ENV, KEY = "PARLEY_E2E_STUB_KEY", "sk-e2e-stub"
SERVER_TOOLS = ["complain", "count", "environment", "fail", "lookup", "picture", "query", "slow"]


@pytest.fixture
def stub() -> Iterator[OpenAIStub]:
    with OpenAIStub(api_key=KEY) as server:
        yield server


def room(stub: OpenAIStub, queue: str) -> RoomSpec:
    """A selector room: the scripted selector picks the Investigator (an LLM on the stub
    with all of the grafana server's tools), then ends the run."""
    return investigator_room("mcp", queue, {
        "model": "openai/investigator", "api_base": stub.url, "api_key_env": KEY_ENV,
        "tools": ["grafana/*"]}, call_timeout_s=60)


def test_an_agent_uses_a_workers_mcp_server_tool_through_litellm(stub, processes, settings,
                                                                  queue, tmp_path):
    config = write_config(tmp_path, {"grafana": stdio_entry(tmp_path)})
    stub.script("investigator", asks_tools(("grafana__query", {"expr": "rate(errors[5m])"})),
                text("Errors are flat."))
    processes.worker("-Q", queue, "-c", "4", env={
        KEY_ENV: KEY, "PARLEY_WORKER_KEY_ENVS": KEY_ENV,
        "PARLEY_WORKER_ALLOWED_API_BASES": stub.url, "PARLEY_WORKER_MCP_CONFIG": str(config)})
    processes.coordinator()
    client = Client(settings)
    catalog = wait_until(client.tool_catalog, 60, "the worker's MCP tools")

    assert sorted(catalog) == [f"grafana/{tool}" for tool in SERVER_TOOLS]
    listed = run_parley(processes.env, "tools", "--json")
    assert listed.returncode == 0, listed.stderr
    tools = {tool["name"]: tool for tool in json.loads(listed.stdout)["tools"]}
    assert tools["grafana/query"]["description"] == "Evaluate a metrics expression (echoes it)."
    table = run_parley(processes.env, "tools")
    assert table.returncode == 0 and "grafana/query" in table.stdout

    result = client.run(room(stub, queue), "Are errors up?", timeout_s=120)

    assert [m.content for m in result.messages][1:] == ["Errors are flat."]
    first, after = stub.requests_for("investigator")
    assert sorted(tool["function"]["name"] for tool in first.body["tools"]) == [
        f"grafana__{tool}" for tool in SERVER_TOOLS]
    assert [m["content"] for m in tool_messages(after)] == ["> result of rate(errors[5m])"]
    (call,) = next(answer.tool_calls for record in client.turns(result.room)
                   for answer in record.bids if answer.agent == "Investigator")
    assert (call.tool, call.arguments, call.status, call.result) == (
        "grafana/query", {"expr": "rate(errors[5m])"}, ToolCallStatus.OK,
        "result of rate(errors[5m])")
