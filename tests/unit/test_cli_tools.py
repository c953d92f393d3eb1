"""``parley tools``: the catalog as a table and as JSON, one line when no worker offers
tools; on fakeredis (tests/integration/test_tool_catalog.py runs it on the real Redis)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from parley import cli
from parley.client import Client
from tests.support.fake_client import cli_on_fake_client
from tests.support.tool_catalog import OPS_TOOLS, ROLLBACK, SEARCH_LOGS, publish


@pytest.fixture
def client(monkeypatch) -> Client:
    return cli_on_fake_client(monkeypatch)


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli.app, list(args))
    return result.exit_code, result.output


def test_tools_lists_each_tool_with_its_first_line_options_and_workers(client):
    publish(client.redis, client.store.keys, "parley@a-1", OPS_TOOLS)
    publish(client.redis, client.store.keys, "parley@b-2", [SEARCH_LOGS])

    code, output = invoke("tools")

    assert code == 0
    rows = {line.split()[1]: line for line in output.splitlines() if line.startswith("│")}
    assert list(rows) == ["grafana/query", "rollback", "search_logs"]
    assert "Search a service's logs." in rows["search_logs"]
    assert "Returns the matching" not in output  # the description's first line only
    assert "idempotent, timeout 30s" in rows["search_logs"]
    assert "parley@a-1, parley@b-2" in rows["search_logs"]
    assert "approval, queue=ops, timeout 120s" in rows["rollback"]


def test_tools_json_is_every_tool_with_its_schema_options_and_workers(client):
    publish(client.redis, client.store.keys, "w1", [ROLLBACK])

    code, output = invoke("tools", "--json")

    assert code == 0
    assert json.loads(output) == {"tools": [{
        "name": "rollback", "description": ROLLBACK.description,
        "parameters": ROLLBACK.parameters,
        "options": {"approval": True, "idempotent": False, "timeout_s": 120.0, "queue": "ops"},
        "workers": ["w1"]}]}


def test_tools_without_any_offered_says_how_to_offer_them(client):
    publish(client.redis, client.store.keys, "w1", [])

    code, output = invoke("tools")

    assert code == 0
    assert output == ("no live worker offers tools (1 live worker(s) in the catalog): start "
                      "workers with PARLEY_WORKER_TOOLS (modules of @parley.tool functions) or "
                      "PARLEY_WORKER_MCP_CONFIG (MCP servers)\n")
    assert json.loads(invoke("tools", "--json")[1]) == {"tools": []}


def test_a_tool_description_cannot_write_control_characters_to_the_terminal(client):
    sly = SEARCH_LOGS.__class__("sly", "clears \x1b[2J the screen", {})
    publish(client.redis, client.store.keys, "w1", [sly])
    assert "\x1b" not in invoke("tools")[1]
