"""The CLI's spec loader under fuzzing: whatever a spec file holds, ``read_spec`` returns a
spec that survives storage, or raises CliError with one line; it never crashes or hangs."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from parley.cli.common import read_spec
from parley.cli.errors import CliError
from parley.shared.models import RoomSpec

# Deadlines catch a hang (an alias bomb, a quadratic walk) as a failure, not a stuck suite.
FUZZ = settings(max_examples=150, deadline=timedelta(seconds=3), derandomize=True,
                database=None, suppress_health_check=[HealthCheck.too_slow])
DEMO_PATH = Path(__file__).parents[2] / "examples" / "rooms" / "demo.yaml"
DEMO_TEXT = DEMO_PATH.read_text()
DEMO = yaml.safe_load(DEMO_TEXT)

FIELDS = ["name", "description", "policy", "kind", "threshold", "recency_penalty",
          "recency_window", "max_messages", "bid_timeout_s", "agents", "role", "model", "script",
          "score", "message", "arguments", "content", "error", "sleep", "temperature",
          "max_tokens", "api_base", "api_key_env", "timeout_s", "max_context_tokens",
          "litellm_kwargs", "queue", "system_prompt", "extra_headers", "extra_body", "top_p",
          "Authorization", "api_token"]
WORDS = ["scripted", "openai/gpt-4o-mini", "Optimist", "Optimist\n", "User", "bid", "Bearer x",
         "sk-proj-abcdefghijklmnopqrstuvwx", "http://u:p@127.0.0.1/v1", "http://127.0.0.1/v1",
         ".inf", "1e999", "0.5", "", " ", "\t", "parley.local\n", "\x01", "é", "\ufeff"]
FRAGMENTS = ["\n", " ", "  ", "- ", ": ", "{", "}", "[", "]", ", ", "&a ", "*a", "&b ", "*b",
             "!!binary ", "!!set ", "!!omap ", "!!float ", "!!int ", "!!str ", "!!timestamp ",
             "!!python/object:os.system ", "? ", "<<: ", "---\n", "...\n", "#", "'", '"', "|\n",
             ">\n", "%YAML 1.1\n", ".inf", "-.inf", ".nan", "1e999", "0x1F", "0o17", "1_000",
             "2001-02-30", "2001-12-14t21:59:43.10-99:00", "9" * 400, "\\ud800", "null", "~",
             "yes", *FIELDS, *WORDS]

scalars = (st.none() | st.booleans() | st.integers() | st.integers(-(10**400), 10**400)
           | st.floats() | st.text(max_size=12) | st.sampled_from(WORDS)
           | st.dates() | st.datetimes() | st.binary(max_size=8))
values = st.recursive(
    scalars,
    lambda inner: (st.lists(inner, max_size=3)
                   | st.dictionaries(st.sampled_from(FIELDS) | st.text(max_size=6), inner,
                                     max_size=3)),
    max_leaves=10,
)


@pytest.fixture(scope="module")
def spec_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One file every example overwrites (hypothesis runs examples one at a time)."""
    return tmp_path_factory.mktemp("fuzz") / "room.yaml"


def read_back(path: Path, text: str | bytes) -> RoomSpec | None:
    """Load ``text`` the CLI's way; check a spec survives storage, an error is one line."""
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass"))
    try:
        spec = read_spec(path)
    except CliError as error:
        message = str(error)
        assert message.strip() == message and len(message.splitlines()) == 1, message
        return None
    assert isinstance(spec, RoomSpec)
    stored = spec.model_dump_json()
    assert RoomSpec.model_validate_json(stored) == spec
    assert RoomSpec.model_validate_json(stored).model_dump_json() == stored
    return spec


def locations(node: Any, at: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """The path of every mapping value and list item in ``node``."""
    yield at
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, item in items:
        yield from locations(item, (*at, key))


def mutate(document: Any, at: tuple[Any, ...], operation: str, value: Any, key: str) -> Any:
    """``document`` with one change at ``at``: replace, delete, add a key, or share a node
    (which YAML writes as an anchor and an alias)."""
    document = copy.deepcopy(document)
    if not at:
        return value if operation == "replace" else document
    parent = document
    for step in at[:-1]:
        parent = parent[step]
    last = at[-1]
    if operation == "replace":
        parent[last] = value
    elif operation == "delete":
        del parent[last]
    elif operation == "add" and isinstance(parent[last], dict):
        parent[last][key] = value
    elif operation == "share":
        parent[last] = [parent[last], parent[last]] if isinstance(parent, dict) else parent[last]
        parent[key if isinstance(parent, dict) else last] = parent[last]
    return document


def dump(document: Any, style: str) -> str:
    if style == "json":
        return json.dumps(document, default=str)
    return yaml.safe_dump(document, default_flow_style=style == "flow", allow_unicode=True,
                          sort_keys=False)


@FUZZ
@given(st.lists(st.sampled_from(FRAGMENTS) | st.text(max_size=4), max_size=40).map("".join))
def test_yaml_like_text_loads_or_fails_with_one_line(spec_path, text):
    read_back(spec_path, text)


@FUZZ
@given(values, st.sampled_from(["json", "block", "flow"]))
def test_random_documents_load_or_fail_with_one_line(spec_path, document, style):
    read_back(spec_path, dump(document, style))


@FUZZ
@given(st.data(), st.sampled_from(["replace", "delete", "add", "share"]), values,
       st.sampled_from(FIELDS), st.sampled_from(["json", "block", "flow"]))
def test_mutations_of_a_valid_spec_load_or_fail_with_one_line(spec_path, data, operation, value,
                                                             key, style):
    at = data.draw(st.sampled_from(list(locations(DEMO))))
    read_back(spec_path, dump(mutate(DEMO, at, operation, value, key), style))


@FUZZ
@given(st.lists(st.tuples(st.integers(0, len(DEMO_TEXT)), st.integers(0, 8),
                          st.sampled_from(FRAGMENTS) | st.text(max_size=3)), max_size=4))
def test_text_edits_of_a_valid_spec_load_or_fail_with_one_line(spec_path, edits):
    text = DEMO_TEXT
    for position, cut, fragment in edits:
        text = text[:position] + fragment + text[position + cut:]
    read_back(spec_path, text)


def test_the_demo_spec_itself_loads_and_round_trips(spec_path):
    spec = read_back(spec_path, DEMO_TEXT)
    assert spec is not None and spec.agent_names == ("Optimist", "Skeptic", "Economist", "Ethicist")


@pytest.mark.parametrize("text, says", [
    ("agents: [1, 2\nname: {", "is not valid YAML: while parsing a flow sequence: expected ',' "
                                "or ']', but got ':' (line 2, column 5)"),
    ("name: 2001-02-30\n", "is not valid YAML: cannot read a value: day is out of range"),
    ("name: x\x01\n", "is not valid YAML: unacceptable character #x0001"),
    (b"name: \xff\n", "is not valid YAML: "),
    ("agents: " + "[" * 3000, "room spec too large: nested too deeply to read"),
    ("agents:\n- {name: \"A\\n\", model: scripted, script: []}\n", "agents.0.name: must be 1-64 letters"),
    ('description: "\\ud83d alone"\n', "text holds a lone surrogate (half of a \\uXXXX\\uXXXX "
                                         "pair) (line 1, column 14)"),
])
def test_a_bad_spec_file_is_one_line_naming_the_problem(spec_path, text, says):
    with pytest.raises(CliError) as caught:
        read_spec(spec_path.parent / "missing.yaml")
    assert "no such spec file" in str(caught.value)
    spec_path.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(CliError) as caught:
        read_spec(spec_path)
    assert says in str(caught.value) and len(str(caught.value).splitlines()) == 1


def test_a_json_spec_with_escaped_emoji_reads_them_as_the_characters_they_stand_for(spec_path):
    document = {**DEMO, "description": "Ship it 🚀"}
    spec = read_back(spec_path, json.dumps(document))  # ASCII: "\\ud83d\\ude80"
    assert spec is not None and spec.description == "Ship it 🚀"
