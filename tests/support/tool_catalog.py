"""The tool catalog in the tests: the definitions of tests/support/tool_modules/ops_tools.py
as a worker offers them, and offers published as a worker's publisher writes them."""

from __future__ import annotations

from typing import Any

from parley.shared.keys import Keys
from parley.workers.tools.base import ToolDef, ToolOptions
from parley.workers.tools.catalog_publisher import CatalogPublisher

SEARCH_LOGS = ToolDef(
    name="search_logs",
    description="Search a service's logs.\n\nReturns the matching lines of the last minutes.",
    parameters={"type": "object", "properties": {"service": {"type": "string"},
                                                 "minutes": {"type": "integer", "default": 15}},
                "required": ["service"]},
    options=ToolOptions(idempotent=True))
ROLLBACK = ToolDef(
    name="rollback", description="Roll a service back to its previous release.",
    parameters={"type": "object", "properties": {"service": {"type": "string"}},
                "required": ["service"]},
    options=ToolOptions(approval=True, timeout_s=120, queue="ops"))
GRAFANA_QUERY = ToolDef(
    name="grafana/query", description="Query a Grafana data source.",
    parameters={"type": "object", "properties": {"expr": {"type": "string"}}},
    source="mcp:grafana")
OPS_TOOLS = [SEARCH_LOGS, ROLLBACK, GRAFANA_QUERY]


def publish(client: Any, keys: Keys, worker: str, tools: list[ToolDef],
            interval_s: float = 5.0) -> CatalogPublisher:
    """One publish of ``worker``'s offer, as its publisher's thread makes it (no thread:
    the offer expires after three intervals unless published again)."""
    publisher = CatalogPublisher(client, keys, worker, lambda: tools, interval_s)
    publisher.publish()
    return publisher
