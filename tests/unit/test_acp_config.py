"""The workers' ACP profiles file: strict, one line per problem, secrets only by name."""

from __future__ import annotations

import json

import pytest

from parley.workers.acp.config import AcpConfigError, acp_queues, read_acp_config


def write(tmp_path, data) -> str:
    path = tmp_path / "acp.json"
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return str(path)


def test_profiles_are_read_with_their_queues(tmp_path):
    path = write(tmp_path, {"agents": {"claude": {"command": ["claude-agent-acp"],
                                                  "cwd": str(tmp_path), "max_sessions": 2}}})
    config = read_acp_config(path)
    assert config.agents["claude"].max_sessions == 2
    assert acp_queues(path) == ["parley.acp.claude"]


def test_no_file_is_no_profiles():
    assert read_acp_config("").agents == {}


def test_env_names_the_workers_variables_it_passes_on(tmp_path, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_KEY", "sk-1")
    path = write(tmp_path, {"agents": {"c": {"command": ["x"], "cwd": str(tmp_path),
                                             "env": {"ANTHROPIC_API_KEY": "${ANTHROPIC_KEY}"}}}})
    profile = read_acp_config(path).agents["c"]
    assert profile.environment() == {"ANTHROPIC_API_KEY": "sk-1"}
    assert "sk-1" not in repr(profile)


@pytest.mark.parametrize("data, said", [
    ("{not json", "cannot be read as JSON"),
    ({"agents": {"c": {"command": []}}}, "agents.c.command"),
    ({"agents": {"c": {"command": ["x"], "shell": True}}}, "agents.c.shell"),
    ({"agents": {"c d": {"command": ["x"]}}}, "profile 'c d' must be"),
    ({"agents": {"c": {"command": ["x"], "cwd": "/no/such/dir"}}}, "cwd is not a directory"),
])
def test_a_bad_file_is_one_line_naming_what_is_wrong(tmp_path, data, said):
    with pytest.raises(AcpConfigError) as caught:
        read_acp_config(write(tmp_path, data))
    assert said in str(caught.value) and "\n" not in str(caught.value)
