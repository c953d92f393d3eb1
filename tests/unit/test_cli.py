"""The CLI's answers to bad input: one clear line naming what is wrong, exit code 2."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from parley.cli import app
from parley.processes import free_port
from shared.settings import get_settings

GOOD = {
    "name": "panel",
    "policy": {"kind": "bid"},
    "agents": [
        {"name": "A", "model": "scripted", "script": [{"score": 0.9, "message": "hi"}]},
        {"name": "B", "model": "scripted", "script": []},
    ],
}


def run_cli(tmp_path: Path, spec: object, raw: str | None = None) -> tuple[int, str]:
    path = tmp_path / "room.yaml"
    path.write_text(raw if raw is not None else yaml.safe_dump(spec))
    result = CliRunner().invoke(app, ["run", str(path), "--task", "t"])
    return result.exit_code, result.output


def with_policy(**policy: object) -> dict:
    return {**GOOD, "policy": {"kind": "bid", **policy}}


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({**GOOD, "agents": GOOD["agents"][:1]}, "agents: Value error, a room needs at least 2 agents"),
        ({**GOOD, "agents": [GOOD["agents"][0]] * 2}, "agent names must be unique, repeated: A"),
        (with_policy(threshold=1.5), "policy.threshold: Input should be less than or equal to 1"),
        (with_policy(threshold=-0.1), "policy.threshold: Input should be greater than or equal to 0"),
        (with_policy(recency_penalty=-1), "policy.recency_penalty: Input should be greater than"),
        (with_policy(max_messages=0), "policy.max_messages: Input should be greater than or equal to 1"),
        ({**GOOD, "policy": {"kind": "vote"}}, "policy.kind: Input should be 'bid'"),
        ({**GOOD, "colour": "red"}, "colour: Extra inputs are not permitted"),
        ({**GOOD, "agents": [{**GOOD["agents"][0], "temp": 1}, GOOD["agents"][1]]},
         "agents.0.temp: Extra inputs are not permitted"),
        ({**GOOD, "agents": [{"name": "A", "model": "scripted"}, GOOD["agents"][1]]},
         "agents.0: Value error, a scripted agent needs a script"),
        ({**GOOD, "agents": [{"name": "A", "model": "scripted", "script": [{"score": 1, "error": "x"}]},
                             GOOD["agents"][1]]},
         "agents.0.script.0: Value error, a script entry is exactly one of"),
    ],
)
def test_an_invalid_spec_is_one_line_naming_the_field(tmp_path, spec, expected):
    code, output = run_cli(tmp_path, spec)
    assert code == 2
    assert expected in output
    assert "Traceback" not in output
    assert output.startswith("parley: invalid room spec")


def test_a_spec_that_is_not_yaml_is_named(tmp_path):
    code, output = run_cli(tmp_path, None, raw="agents: [unclosed")
    assert code == 2 and "is not valid YAML" in output


def test_a_missing_spec_file_is_named(tmp_path):
    result = CliRunner().invoke(app, ["run", str(tmp_path / "nope.yaml"), "--task", "t"])
    assert result.exit_code == 2 and "no such spec file" in result.output


def test_unreachable_redis_is_one_line_with_the_url(tmp_path, monkeypatch):
    url = f"redis://127.0.0.1:{free_port()}/0"
    monkeypatch.setenv("PARLEY_REDIS_URL", url)
    get_settings.cache_clear()
    try:
        code, output = run_cli(tmp_path, GOOD)
    finally:
        get_settings.cache_clear()
    assert code == 2
    assert output.count("\n") == 1 or len(output.strip().splitlines()) <= 2
    assert f"cannot reach Redis at {url}" in output and "PARLEY_REDIS_URL" in output
