"""A real ``parley worker`` refuses to start with an MCP servers file it cannot use: one
line naming the file and what is wrong, exit 2, before it connects to anything."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from parley.processes import ProcessGroup
from tests.chaos.harness import parley_env

pytestmark = [pytest.mark.e2e]


@pytest.mark.parametrize(("content", "problem"), [
    (None, "no such file"),
    ('{"mcpServers": {"grafana": {"command": "mcp-grafana", "url": "http://grafana/mcp"}}}',
     "mcpServers.grafana: give exactly one of command (a stdio server) or url"),
], ids=["missing", "command-and-url"])
def test_a_worker_refuses_to_start_with_an_mcp_config_it_cannot_use(
        tmp_path: Path, queue: str, content: str | None, problem: str):
    path = tmp_path / "mcp.json"
    if content is not None:
        json.loads(content)  # the file is JSON: the shape is what is wrong
        path.write_text(content)
    # No Redis answers there: the worker must refuse before it connects.
    env = parley_env("redis://127.0.0.1:1/0", "parley-mcp-refused", worker_mcp_config=path)
    with ProcessGroup(tmp_path, env) as group:
        worker = group.worker("-Q", queue)
        try:
            worker.wait(timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail("the worker started with an MCP config it cannot use")
        log = group.logs[worker.pid].read_text(errors="replace")

    assert worker.returncode == 2
    (line,) = log.splitlines()
    assert line.startswith(f"parley: PARLEY_WORKER_MCP_CONFIG={path}: {problem}")
