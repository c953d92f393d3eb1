"""Every output type against what swarms 16's ``history_output_formatter`` returned for the
same conversations (tests/fixtures/swarms_outputs.json, written in the swarms venv by
benchmarks/swarms_anchor/output_fixtures.py): the same Python types and values."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from parley.shared.models import Message
from parley.swarms.history import HISTORY_OUTPUT_TYPES, conversation_rows, format_history, history_string

ROOT = Path(__file__).parents[2]
FIXTURE_PATH = ROOT / "tests" / "fixtures" / "swarms_outputs.json"
FIXTURE = json.loads(FIXTURE_PATH.read_text(encoding="utf-8"))
# The benchmarks' swarms venv (benchmarks/swarms_anchor/setup_venv.sh), where there is one.
SWARMS_PYTHON = Path(os.environ.get("SWARMS_VENV", ROOT / "benchmarks" / ".swarms-venv")) / "bin" / "python"
CASES = {case["name"]: case for case in FIXTURE["cases"]}


def messages_of(case: dict[str, Any]) -> list[Message]:
    """The case's conversation as parley's log holds it."""
    return [Message(seq=seq, sender=row["role"], content=row["content"],
                    score=(row.get("metadata") or {}).get("score"))
            for seq, row in enumerate(case["conversation_history"], start=1)]


def expected(output: dict[str, Any]) -> Any:
    """The fixture's value with its Python type back (JSON has no tuple)."""
    return tuple(output["value"]) if output["type"] == "tuple" else output["value"]


def test_the_output_types_are_swarms_own():
    assert FIXTURE["swarms"] == "16.0.3"
    assert tuple(FIXTURE["output_types"]) == HISTORY_OUTPUT_TYPES


@pytest.mark.parametrize("output_type", HISTORY_OUTPUT_TYPES)
@pytest.mark.parametrize("case", sorted(CASES))
def test_every_output_type_is_what_swarms_returns(case: str, output_type: str):
    want = CASES[case]["outputs"][output_type]

    output = format_history(messages_of(CASES[case]), output_type)

    assert type(output).__name__ == want["type"]
    assert output == expected(want)


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_conversation_is_stored_as_swarms_stores_it(case: str):
    rows = conversation_rows(messages_of(CASES[case]))
    assert rows == CASES[case]["conversation_history"]
    assert all(("metadata" in row) == (row["role"] not in ("User", "System")) for row in rows)


def test_dict_final_is_a_tuple_and_list_final_one_element():
    messages = messages_of(CASES["panel"])
    assert format_history(messages, "dict-final") == (messages[-1].content, messages[-1].content)
    assert format_history(messages, "list-final") == [messages[-1].content]


def test_a_long_history_is_cut_to_swarms_context_as_swarms_cuts_it():
    case = CASES["long_history"]
    whole = "\n\n".join(f"{row['role']}: {row['content']}" for row in case["conversation_history"])
    cut = expected(case["outputs"]["str"])
    # The case exercises the cut: the newest line whole, the one before it from mid-line.
    assert len(cut) < len(whole) and whole.endswith(cut)
    assert not cut.startswith("Beta: ")
    assert history_string(case["conversation_history"]) == cut


def test_an_unknown_output_type_names_the_choices():
    with pytest.raises(ValueError, match="output_type must be one of list, dict, .* not 'xml'"):
        format_history(messages_of(CASES["panel"]), "xml")


@pytest.mark.skipif(not SWARMS_PYTHON.exists(), reason="no swarms venv (set SWARMS_VENV)")
def test_the_fixture_is_what_swarms_writes_today(tmp_path: Path):
    written = tmp_path / "swarms_outputs.json"
    subprocess.run([str(SWARMS_PYTHON), str(ROOT / "benchmarks" / "swarms_anchor" / "output_fixtures.py"),
                    "--out", str(written)], check=True, capture_output=True, timeout=120)
    assert json.loads(written.read_text(encoding="utf-8")) == FIXTURE
