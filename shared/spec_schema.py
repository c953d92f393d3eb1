"""The room spec's JSON Schema, from the spec models: what `parley schema` prints, what the
docs' reference is made from and what examples/rooms/*.yaml point editors at."""

from __future__ import annotations

import copy
import json
import re
from typing import Any

from parley.shared.models import SELECTOR_NAME, RoomSpec

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
# Where the examples' `# yaml-language-server: $schema=` lines find it, from examples/rooms/.
SCHEMA_FILE = "docs/reference/room-spec.schema.json"


def room_spec_schema() -> dict[str, Any]:
    """The JSON Schema of a room spec, its descriptions on one line each (they are the
    fields' docstrings, wrapped in the source)."""
    schema = RoomSpec.model_json_schema()
    _selector_without_name(schema)
    _one_line_descriptions(schema)
    return {"$schema": SCHEMA_DIALECT, **schema, "title": "parley room spec"}


def room_spec_schema_text() -> str:
    """The schema as the committed file holds it: indented, keys in the models' order."""
    return json.dumps(room_spec_schema(), indent=2, ensure_ascii=False) + "\n"


def _one_line_descriptions(node: Any) -> None:
    if isinstance(node, dict):
        description = node.get("description")
        if isinstance(description, str):
            node["description"] = re.sub(r"\s+", " ", description).strip()
        for value in node.values():
            _one_line_descriptions(value)
    elif isinstance(node, list):
        for value in node:
            _one_line_descriptions(value)


def _selector_without_name(schema: dict[str, Any]) -> None:
    # A selector is an agent whose name the policy gives (a validator fills it in): in the
    # schema it is the agent's fields with `name` optional and fixed.
    selector = copy.deepcopy(schema["$defs"]["AgentSpec"])
    selector["title"] = "SelectorSpec"
    selector["description"] = "The selector model: every agent field except name."
    selector["properties"]["name"] = {"const": SELECTOR_NAME, "default": SELECTOR_NAME,
                                      "description": "Always `selector`, when given."}
    selector["required"] = [field for field in selector["required"] if field != "name"]
    schema["$defs"]["SelectorSpec"] = selector
    field = schema["$defs"]["SelectorPolicy"]["properties"]["selector"]
    field["$ref"] = "#/$defs/SelectorSpec"
