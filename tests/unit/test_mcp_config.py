"""The MCP servers file: what it may say, each problem as one line naming the file and
never repeating a value; the operator's per-server options; a tool result as text."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest

from parley.workers.tools.mcp_config import McpConfigError, McpServerConfig, read_mcp_config
from parley.workers.tools.mcp_servers import result_text

PYTHON = {"command": sys.executable}


def written(tmp_path: Path, content: Any) -> Path:
    path = tmp_path / "mcp.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return path


def refusal(path: Path) -> str:
    with pytest.raises(McpConfigError) as refused:
        read_mcp_config(path)
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith(f"PARLEY_WORKER_MCP_CONFIG={path}: ")
    return message.removeprefix(f"PARLEY_WORKER_MCP_CONFIG={path}: ")


def test_the_usual_form_is_read_stdio_and_http():
    config = McpServerConfig(command="mcp-grafana", args=["-t", "stdio"], env={"K": "v"})
    remote = McpServerConfig(url="https://mcp.example.com/mcp", headers={"X": "y"})

    assert (config.transport, remote.transport) == ("stdio", "http")


def test_a_good_file_gives_every_server_by_its_name(tmp_path: Path):
    path = written(tmp_path, {"mcpServers": {
        "grafana": {**PYTHON, "args": ["-m", "x"], "env": {"GRAFANA_URL": "http://g"}},
        "git-hub_2": {"type": "http", "url": "https://mcp.example.com/mcp",
                      "headers": {"Authorization": "Bearer t"}, "approval": ["create_issue"],
                      "timeout_s": 60}}})

    config = read_mcp_config(path)

    assert sorted(config.servers) == ["git-hub_2", "grafana"]
    assert config.servers["git-hub_2"].timeout_s == 60
    assert config.servers["grafana"].timeout_s == 30


def test_a_missing_file_is_one_line(tmp_path: Path):
    assert refusal(tmp_path / "nowhere.json") == "no such file"


def test_a_file_that_is_not_json_is_one_line(tmp_path: Path):
    assert refusal(written(tmp_path, '{"mcpServers": {')).startswith("not JSON (")


def test_a_file_that_is_not_an_object_is_one_line(tmp_path: Path):
    assert refusal(written(tmp_path, "[]")) == 'not an object of the form {"mcpServers": {...}}'


def test_a_file_without_mcp_servers_is_one_line(tmp_path: Path):
    assert refusal(written(tmp_path, {"servers": {}})) == \
        "mcpServers: Field required; servers: unknown field"


def test_both_command_and_url_is_refused(tmp_path: Path):
    path = written(tmp_path, {"mcpServers": {"g": {**PYTHON, "url": "http://g/mcp"}}})

    assert refusal(path) == ("mcpServers.g: give exactly one of command (a stdio server) or "
                             "url (streamable HTTP)")


def test_neither_command_nor_url_is_refused(tmp_path: Path):
    assert "give exactly one of command" in refusal(written(tmp_path, {"mcpServers": {"g": {}}}))


def test_an_unknown_field_is_refused_by_its_place(tmp_path: Path):
    path = written(tmp_path, {"mcpServers": {"g": {**PYTHON, "colour": "blue"}}})

    assert refusal(path) == "mcpServers.g.colour: unknown field"


@pytest.mark.parametrize("name", ["a/b", "has space", "", "x" * 65, "grafana.v2"])
def test_a_server_name_other_than_letters_digits_underscore_and_dash_is_refused(
        tmp_path: Path, name: str):
    message = refusal(written(tmp_path, {"mcpServers": {name: PYTHON}}))

    assert "may hold only letters, digits, '_' and '-'" in message


def test_options_of_the_other_transport_are_refused(tmp_path: Path):
    headers = written(tmp_path, {"mcpServers": {"g": {**PYTHON, "headers": {"A": "b"}}}})
    assert refusal(headers) == "mcpServers.g: headers are for a streamable HTTP server (url), " \
                               "not a command"
    env = written(tmp_path, {"mcpServers": {"g": {"url": "http://g", "env": {"A": "b"}}}})
    assert "args, env and cwd are for a stdio server" in refusal(env)


def test_a_type_that_does_not_match_is_refused(tmp_path: Path):
    path = written(tmp_path, {"mcpServers": {"g": {"type": "stdio", "url": "http://g/mcp"}}})

    assert refusal(path) == "mcpServers.g: type stdio does not match url"


def test_a_command_not_on_the_servers_path_is_refused(tmp_path: Path):
    path = written(tmp_path, {"mcpServers": {"g": {"command": "no-such-mcp-server"}}})

    assert refusal(path) == ("mcpServers.g.command: 'no-such-mcp-server' is not an executable "
                             "on the server's PATH")


def test_a_url_must_be_http(tmp_path: Path):
    path = written(tmp_path, {"mcpServers": {"g": {"url": "file:///etc/passwd"}}})

    assert refusal(path).startswith("mcpServers.g.url: String should match pattern")


def test_a_bad_value_is_not_repeated_in_the_line(tmp_path: Path):
    path = written(tmp_path, {"mcpServers": {"g": {
        **PYTHON, "env": {"TOKEN": ["sk-secret-value"]}, "timeout_s": "sk-other-secret"}}})

    message = refusal(path)

    assert "mcpServers.g.env.TOKEN" in message and "mcpServers.g.timeout_s" in message
    assert "sk-" not in message


def test_a_config_repr_shows_no_env_or_header_values():
    config = McpServerConfig(command="x", env={"TOKEN": "sk-secret"})
    remote = McpServerConfig(url="https://m/mcp", headers={"Authorization": "Bearer sk-hdr"})

    assert "sk-" not in repr(config) + repr(remote)


def test_approval_is_every_tool_or_the_named_ones():
    assert McpServerConfig(command="x", approval=True).needs_approval("any")
    named = McpServerConfig(command="x", approval=["rollback"])
    assert named.needs_approval("rollback") and not named.needs_approval("query")
    assert not McpServerConfig(command="x").needs_approval("rollback")


def test_idempotent_follows_the_servers_hint_unless_the_operator_says_otherwise():
    unset = McpServerConfig(command="x")
    assert unset.is_idempotent("lookup", hinted=True)
    assert not unset.is_idempotent("write", hinted=False)
    named = McpServerConfig(command="x", idempotent=["read"])
    assert named.is_idempotent("read", hinted=False) and named.is_idempotent("h", hinted=True)
    assert not McpServerConfig(command="x", idempotent=False).is_idempotent("h", hinted=True)
    assert McpServerConfig(command="x", idempotent=True).is_idempotent("w", hinted=False)


def test_a_result_joins_its_text_and_describes_the_rest():
    result = types.CallToolResult(content=[
        types.TextContent(text="12 lines"),
        types.ImageContent(data="aGVsbG8=", mime_type="image/png"),
        types.AudioContent(data="aGk=", mime_type="audio/wav"),
        types.EmbeddedResource(resource=types.TextResourceContents(uri="file:///a.log",
                                                                   text="log text")),
        types.EmbeddedResource(resource=types.BlobResourceContents(
            uri="file:///b.bin", blob="AAAA", mime_type="application/zip")),
        types.ResourceLink(uri="file:///c.txt", name="c")])

    assert result_text(result).splitlines() == [
        "12 lines", "[image/png, 5 bytes]", "[audio/wav, 2 bytes]", "log text",
        "[application/zip file:///b.bin, 3 bytes]", "[resource file:///c.txt]"]


def test_a_result_with_only_structured_content_is_its_json():
    result = types.CallToolResult(content=[], structured_content={"lines": 12})

    assert result_text(result) == '{"lines": 12}'


def test_a_reference_in_an_env_or_header_value_is_the_workers_variable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("GRAFANA_TOKEN", "glsa_value")
    path = written(tmp_path, {"mcpServers": {
        "grafana": {**PYTHON, "env": {"GRAFANA_API_KEY": "${GRAFANA_TOKEN}", "PLAIN": "$x"}},
        "github": {"url": "https://m/mcp", "headers": {"Authorization": "Bearer ${GRAFANA_TOKEN}"}}}})

    config = read_mcp_config(path)

    assert config.servers["grafana"].env == {"GRAFANA_API_KEY": "glsa_value", "PLAIN": "$x"}
    assert config.servers["github"].headers == {"Authorization": "Bearer glsa_value"}


def test_a_reference_to_a_variable_that_is_not_set_is_refused_by_name(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("NO_SUCH_TOKEN", raising=False)
    path = written(tmp_path, {"mcpServers": {"github": {
        "url": "https://m/mcp", "headers": {"Authorization": "Bearer ${NO_SUCH_TOKEN}"}}}})

    assert refusal(path) == ("mcpServers.github.headers.Authorization: ${NO_SUCH_TOKEN} is not "
                             "set in the worker's environment")
