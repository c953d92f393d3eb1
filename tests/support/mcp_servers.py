"""Running the test MCP server (tests/support/mcp_server.py): its config entry over
stdio, and the server over streamable HTTP as a process of its own, stopped by its PID."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from parley.processes import free_port, start, stop
from tests.support.polling import wait_until

ROOT = Path(__file__).resolve().parents[2]
SERVER_MODULE = "tests.support.mcp_server"


def stdio_entry(tmp_path: Path, **options: Any) -> dict[str, Any]:
    """A config entry starting the test server over stdio; its runs are counted in
    ``tmp_path/runs``, its pid written to ``tmp_path/pid``, a slow call's start marked in
    ``tmp_path/started``."""
    env = {"PYTHONPATH": str(ROOT), "MCP_TEST_RUNS_FILE": str(tmp_path / "runs"),
           "MCP_TEST_PID_FILE": str(tmp_path / "pid"),
           "MCP_TEST_STARTED_FILE": str(tmp_path / "started"), **options.pop("env", {})}
    return {"command": sys.executable, "args": ["-m", SERVER_MODULE, "--stdio"],
            "cwd": str(ROOT), "env": env, **options}


def write_config(tmp_path: Path, servers: dict[str, Any]) -> Path:
    """The MCP servers file holding ``servers``."""
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": servers}))
    return path


def server_pid(tmp_path: Path) -> int:
    """The pid the test server wrote."""
    return int((tmp_path / "pid").read_text())


def runs(tmp_path: Path) -> int:
    """How many times the server's count tool ran."""
    path = tmp_path / "runs"
    return len(path.read_text().splitlines()) if path.exists() else 0


def answers(port: int) -> bool:
    """Whether something accepts connections on 127.0.0.1:``port``."""
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


@contextmanager
def http_server(tmp_path: Path, port: int | None = None) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """The test server over streamable HTTP on a free port: its URL and process, stopped by
    its PID afterwards."""
    port = port or free_port()
    process = start([sys.executable, "-m", SERVER_MODULE, "--http", str(port)],
                    tmp_path / f"mcp-http-{port}.log",
                    {"PYTHONPATH": str(ROOT), "MCP_TEST_RUNS_FILE": str(tmp_path / "runs")})
    try:
        wait_until(lambda: answers(port) or process.poll() is not None, 30,
                   "the HTTP MCP server to listen")
        assert process.poll() is None, (tmp_path / f"mcp-http-{port}.log").read_text()
        yield f"http://127.0.0.1:{port}/mcp", process
    finally:
        stop(process)
