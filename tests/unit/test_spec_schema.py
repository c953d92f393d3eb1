"""The room spec's JSON Schema: generated from the models, committed for editors, and
agreeing with what the models accept."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml
from pydantic import ValidationError
from typer.testing import CliRunner

from parley.cli import app
from parley.shared.models import RoomSpec
from parley.shared.spec_schema import SCHEMA_FILE, room_spec_schema, room_spec_schema_text

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples" / "rooms").glob("*.yaml"))
SCHEMA_LINE = "# yaml-language-server: $schema=../../" + SCHEMA_FILE


def properties(schema: dict) -> list[tuple[str, str, dict]]:
    """(model, field, field schema) of every model the schema defines."""
    models = [schema, *schema["$defs"].values()]
    return [(model["title"], name, field) for model in models
            for name, field in model.get("properties", {}).items()]


def test_the_committed_schema_is_the_models_schema():
    committed = (ROOT / SCHEMA_FILE).read_text()
    assert committed == room_spec_schema_text(), (
        f"{SCHEMA_FILE} is stale: run `parley schema > {SCHEMA_FILE}`")


def test_parley_schema_prints_it():
    result = CliRunner().invoke(app, ["schema"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == room_spec_schema()


def test_every_field_says_what_it_is_on_one_line():
    undescribed = [f"{model}.{name}" for model, name, field in properties(room_spec_schema())
                   if not field.get("description")]
    assert undescribed == []
    assert all("\n" not in field["description"] for _, _, field in properties(room_spec_schema()))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda path: path.name)
def test_each_example_names_the_schema_and_validates_against_it(path):
    text = path.read_text()
    assert text.splitlines()[0] == SCHEMA_LINE
    assert (path.parent / SCHEMA_LINE.split("=", 1)[1]).resolve() == ROOT / SCHEMA_FILE
    spec = yaml.safe_load(text)
    jsonschema.Draft202012Validator(room_spec_schema()).validate(spec)
    RoomSpec.model_validate(spec)


@pytest.mark.parametrize("change, where", [
    ({"policy": {"kind": "bid", "treshold": 0.7}}, "treshold"),
    ({"policy": {"kind": "bid", "threshold": 1.5}}, "1.5"),
    ({"agents": [{"name": "solo", "model": "scripted", "script": [], "tools": 3}]}, "3"),
])
def test_a_spec_the_models_refuse_the_schema_refuses(change, where):
    spec = {"name": "r", "agents": [{"name": "a", "model": "scripted", "script": []},
                                    {"name": "b", "model": "scripted", "script": []}]} | change
    with pytest.raises(ValidationError):
        RoomSpec.model_validate(spec)
    with pytest.raises(jsonschema.ValidationError, match=where):
        jsonschema.Draft202012Validator(room_spec_schema()).validate(spec)
