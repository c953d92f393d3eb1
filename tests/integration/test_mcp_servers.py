"""The workers' MCP servers over their real protocol: the test server
(tests/support/mcp_server.py) started over stdio by McpServers itself, or over streamable
HTTP by the test; calls from many threads, errors, timeouts, a killed server reconnected."""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from parley.workers.tools.base import ToolError
from parley.workers.tools.mcp_servers import McpServers, load_mcp_servers
from tests.support.mcp_servers import (
    http_server,
    runs,
    server_pid,
    stdio_entry,
    write_config,
)
from tests.support.polling import wait_until

TOOLS = ["complain", "count", "environment", "fail", "lookup", "picture", "query", "slow"]


@pytest.fixture(scope="module")
def shared_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("mcp")


@pytest.fixture(scope="module")
def servers(shared_dir: Path) -> Iterator[McpServers]:
    """One stdio server, its tools named grafana/...; the approval and timeout options set."""
    entry = stdio_entry(shared_dir, approval=["count"], timeout_s=7,
                        env={"GRAFANA_URL": "http://grafana:3000"})
    loaded = load_mcp_servers(write_config(shared_dir, {"grafana": entry}))
    assert loaded is not None
    yield loaded
    loaded.close()


@pytest.fixture
def own_servers(tmp_path: Path) -> Iterator[list[McpServers]]:
    """Servers a test loads for itself; closed afterwards (their processes stopped)."""
    loaded: list[McpServers] = []
    yield loaded
    for servers in loaded:
        servers.close()


def load(own_servers: list[McpServers], path: Path) -> McpServers:
    servers = load_mcp_servers(path)
    assert servers is not None
    own_servers.append(servers)
    return servers


def test_every_tool_is_named_after_its_server(servers: McpServers):
    tools = {tool.name: tool for tool in servers.tools()}

    assert sorted(tools) == [f"grafana/{name}" for name in TOOLS]
    query = tools["grafana/query"]
    assert query.description == "Evaluate a metrics expression (echoes it)."
    assert query.parameters["properties"]["expr"]["type"] == "string"
    assert query.source == "mcp:grafana"


def test_the_operators_options_and_the_servers_idempotent_hint_are_the_tools_options(
        servers: McpServers):
    options = {tool.name: tool.options for tool in servers.tools()}

    assert options["grafana/count"].approval and not options["grafana/query"].approval
    assert options["grafana/lookup"].idempotent and not options["grafana/count"].idempotent
    assert {option.timeout_s for option in options.values()} == {7}


def test_a_call_returns_the_tools_text(servers: McpServers):
    assert servers.call("grafana/query", {"expr": "rate(errors[5m])"}, 10) == \
        "result of rate(errors[5m])"


def test_content_that_is_not_text_is_described(servers: McpServers):
    assert servers.call("grafana/picture", {}, 10) == "[image/png, 68 bytes]"


def test_an_error_result_is_a_tool_error_with_its_text(servers: McpServers):
    with pytest.raises(ToolError, match="nope"):
        servers.call("grafana/fail", {"reason": "nope"}, 10)


def test_a_tool_the_server_does_not_offer_is_a_tool_error(servers: McpServers):
    with pytest.raises(ToolError, match="offers no tool 'drop_tables'"):
        servers.call("grafana/drop_tables", {}, 10)
    with pytest.raises(ToolError, match="no MCP server offers 'github/search'"):
        servers.call("github/search", {}, 10)


def test_a_call_longer_than_its_timeout_is_a_timeout_and_the_session_lives_on(
        servers: McpServers):
    started = time.monotonic()
    with pytest.raises(TimeoutError, match="grafana/slow took longer than 0.5s"):
        servers.call("grafana/slow", {"seconds": 5}, 0.5)

    assert time.monotonic() - started < 2
    assert servers.call("grafana/query", {"expr": "up"}, 10) == "result of up"


def test_calls_from_many_threads_run_at_once_on_the_one_session(servers: McpServers):
    started = time.monotonic()
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda _: servers.call("grafana/slow", {"seconds": 1}, 10),
                                range(8)))

    assert results == ["slept 1s"] * 8
    assert time.monotonic() - started < 4  # one after the other would take 8 s


def test_a_stdio_server_sees_only_its_configs_env_and_the_safe_default(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, own_servers: list[McpServers]):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-worker-secret")
    monkeypatch.setenv("PARLEY_API_TOKENS", "token-secret")
    servers = load(own_servers, write_config(tmp_path, {"probe": stdio_entry(tmp_path)}))

    seen = set(servers.call("probe/environment", {}, 10).splitlines())

    assert "OPENAI_API_KEY" not in seen and "PARLEY_API_TOKENS" not in seen
    configured = {"MCP_TEST_RUNS_FILE", "MCP_TEST_PID_FILE", "MCP_TEST_STARTED_FILE",
                  "PYTHONPATH"}
    assert configured | {"PATH"} <= seen
    # The mcp package's safe default (HOME, LOGNAME, PATH, SHELL, TERM, USER), and what a
    # Python process sets for itself.
    assert seen - configured <= {
        "HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER", "LC_CTYPE"}


def test_a_servers_stderr_lines_are_log_lines_without_its_secrets(
        tmp_path: Path, own_servers: list[McpServers]):
    entry = stdio_entry(tmp_path, env={"GRAFANA_API_KEY": "Bearer glsa_secret_value"})
    servers = load(own_servers, write_config(tmp_path, {"grafana": entry}))

    with capture_logs() as logs:
        servers.call("grafana/complain", {"text": "401 with glsa_secret_value"}, 10)
        said = wait_until(lambda: [entry for entry in logs
                                   if entry["event"] == "mcp_server_stderr"], 10,
                          "the server's stderr line to be logged")

    assert said[0]["server"] == "grafana"
    assert said[0]["line"] == "401 with ***"


def test_a_killed_server_is_started_again_for_the_next_call_without_running_a_call_twice(
        tmp_path: Path, own_servers: list[McpServers]):
    servers = load(own_servers, write_config(tmp_path, {"ops": stdio_entry(tmp_path)}))
    assert servers.call("ops/count", {}, 10) == "run 1"
    first = server_pid(tmp_path)

    os.kill(first, signal.SIGKILL)
    wait_until(lambda: not servers.up()["ops"], 10, "the server's death to be noticed")

    assert servers.call("ops/count", {}, 20) == "run 2"
    assert server_pid(tmp_path) != first
    assert runs(tmp_path) == 2


def test_a_killed_server_is_started_again_in_the_background(
        tmp_path: Path, own_servers: list[McpServers]):
    servers = load(own_servers, write_config(tmp_path, {"ops": stdio_entry(tmp_path)}))
    first = server_pid(tmp_path)

    os.kill(first, signal.SIGKILL)
    wait_until(lambda: not servers.up()["ops"], 10, "the server's death to be noticed")

    wait_until(lambda: servers.up()["ops"], 20, "the server to be started again")
    assert server_pid(tmp_path) != first
    assert "ops/query" in {tool.name for tool in servers.tools()}


def test_a_server_killed_while_a_call_runs_fails_that_call_once(
        tmp_path: Path, own_servers: list[McpServers]):
    servers = load(own_servers, write_config(tmp_path, {"ops": stdio_entry(tmp_path)}))
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(servers.call, "ops/slow", {"seconds": 30}, 30)
        wait_until((tmp_path / "started").exists, 10, "the slow call to start")
        os.kill(server_pid(tmp_path), signal.SIGKILL)
        with pytest.raises(ToolError, match="MCP server ops stopped while slow ran: its "
                                            "result is unknown"):
            running.result(20)

    assert servers.call("ops/query", {"expr": "up"}, 20) == "result of up"


def test_a_server_that_cannot_be_reached_is_a_tool_error_naming_it(
        tmp_path: Path, own_servers: list[McpServers]):
    from parley.processes import free_port

    url = f"http://127.0.0.1:{free_port()}/mcp"
    servers = load_mcp_servers(write_config(tmp_path, {"metrics": {"url": url}}), wait_s=5)
    assert servers is not None
    own_servers.append(servers)

    assert servers.tools() == [] and servers.up() == {"metrics": False}
    with pytest.raises(ToolError, match=r"MCP server metrics is down \("):
        servers.call("metrics/query", {"expr": "up"}, 1)


def test_a_server_that_exits_at_once_is_started_again_with_a_backoff_even_when_called(
        tmp_path: Path, own_servers: list[McpServers]):
    starts = tmp_path / "starts"
    crashing = {"command": sys.executable,
                "args": ["-c", f"open({str(starts)!r}, 'a').write('start\\n')"]}
    servers = load_mcp_servers(write_config(tmp_path, {"flaky": crashing}), wait_s=5)
    assert servers is not None
    own_servers.append(servers)
    began = time.monotonic()

    with pytest.raises(ToolError, match=r"MCP server flaky is down \("):
        servers.call("flaky/query", {}, 2)
    with pytest.raises(ToolError, match=r"MCP server flaky is down \("):
        servers.call("flaky/query", {}, 1)
    count = len(starts.read_text().splitlines())

    # Attempts at least 0.5 s apart, backing off: never one per call, never a tight loop.
    assert 2 <= count <= 2 + (time.monotonic() - began) / 0.5


def test_a_streamable_http_server_is_listed_and_called_and_reconnected_after_a_restart(
        tmp_path: Path, own_servers: list[McpServers]):
    with http_server(tmp_path) as (url, _process):
        servers = load(own_servers, write_config(tmp_path, {"remote": {"url": url}}))
        assert sorted(tool.name for tool in servers.tools()) == [f"remote/{n}" for n in TOOLS]
        assert servers.call("remote/query", {"expr": "up"}, 10) == "result of up"
        port = int(url.split(":")[2].split("/")[0])

    with pytest.raises(ToolError, match="MCP server remote"):
        servers.call("remote/query", {"expr": "down"}, 3)

    with http_server(tmp_path, port):
        assert servers.call("remote/query", {"expr": "back"}, 20) == "result of back"


def test_closing_stops_the_servers_processes(tmp_path: Path):
    servers = load_mcp_servers(write_config(tmp_path, {"ops": stdio_entry(tmp_path)}))
    assert servers is not None
    pid = server_pid(tmp_path)

    servers.close()

    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    with pytest.raises(ToolError, match="stopped"):
        servers.call("ops/query", {"expr": "up"}, 1)


def test_an_empty_path_means_no_servers():
    assert load_mcp_servers("") is None
