"""Reading @names: every rule of shared.mentions."""

from __future__ import annotations

import pytest

from parley.shared.mentions import addressed, read_names

AGENTS = ("investigator", "dev", "sre")


@pytest.mark.parametrize(("text", "names"), [
    ("@dev look", ["dev"]),
    ("@dev @sre both", ["dev", "sre"]),
    ("@sre then @dev", ["sre", "dev"]),
    ("ask @dev.", ["dev"]),  # a sentence's final period is not the name's
    ("@a.b-c_d9 ok", ["a.b-c_d9"]),
    ("@Жора и @東京 hello", ["Жора", "東京"]),  # letters of any script
    ("mail@dev.com", []),  # inside a word: no name
    ("@dev and @DEV again", ["dev"]),  # each once
    ("nothing here", []),
    ("@ alone", []),
])
def test_names_read(text: str, names: list[str]) -> None:
    assert read_names(text) == names


def test_no_names_in_fenced_code() -> None:
    text = "look:\n```\n@dev inside\n```\n@sre outside\n~~~\n@investigator\n~~~"
    assert read_names(text) == ["sre"]


def test_no_names_in_quoted_lines() -> None:
    text = "> @dev said this\n  > @sre too\nand @investigator"
    assert read_names(text) == ["investigator"]


def test_all_names_every_agent_in_room_order() -> None:
    agents, people = addressed("@sre first then @all", AGENTS, ())
    assert agents == ["sre", "investigator", "dev"]
    assert people == []


def test_names_match_agents_and_people_case_aside() -> None:
    agents, people = addressed("@Dev ask @OnCall", AGENTS, ("oncall",))
    assert agents == ["dev"]
    assert people == ["oncall"]


def test_unknown_names_name_nobody() -> None:
    assert addressed("@ghost hi", AGENTS, ("oncall",)) == ([], [])
