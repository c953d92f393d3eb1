"""Reading ``@names`` in what a participant wrote (seed 003, to the letter).

=====================  =================================================================
rule                   behaviour
=====================  =================================================================
a name                 ``@`` then letters of any script, digits, ``_``, ``.``, ``-``;
                       a final ``.`` (or several) ends the sentence, not the name
where it starts        at the start of the text or after a character that cannot be part
                       of a name (``mail@dev`` names nobody)
``@all``               every agent of the room
fenced code            nothing between a ``` (or ~~~) fence line and the next one is read
quoted lines           a line whose first non-blank character is ``>`` is not read
order                  names in the order written, each once (the first place counts)
matching               case and spacing aside (``@Dev`` names ``dev``); a name that is no
                       agent and no person of the room names nobody
=====================  =================================================================
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from parley.shared.models import name_key

ALL = "all"
_NAME = re.compile(r"(?<![\w.@-])@([\w.-]+)")
_FENCE = re.compile(r"^\s*(```|~~~)")


def readable_lines(text: str) -> list[str]:
    """The lines names are read in: outside fenced code blocks, not quoted."""
    lines: list[str] = []
    fenced = False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if fenced or line.lstrip().startswith(">"):
            continue
        lines.append(line)
    return lines


def read_names(text: str) -> list[str]:
    """Every ``@name`` the text writes where names are read, in order, each once, as
    written (without the ``@`` and a sentence's final periods)."""
    names: list[str] = []
    seen: set[str] = set()
    for line in readable_lines(text):
        for match in _NAME.finditer(line):
            name = match.group(1).rstrip(".")
            if name and name_key(name) not in seen:
                seen.add(name_key(name))
                names.append(name)
    return names


def addressed(text: str, agents: Iterable[str], people: Iterable[str]
              ) -> tuple[list[str], list[str]]:
    """The agents and the people the text names, each in the order first named; ``@all``
    names every agent (in the room's order, at its place)."""
    agent_names = list(agents)
    by_key = {name_key(name): name for name in agent_names}
    person_by_key = {name_key(name): name for name in people}
    named_agents: list[str] = []
    named_people: list[str] = []
    for name in read_names(text):
        key = name_key(name)
        found = agent_names if key == ALL else [by_key[key]] if key in by_key else []
        for agent in found:
            if agent not in named_agents:
                named_agents.append(agent)
        if not found and key in person_by_key and person_by_key[key] not in named_people:
            named_people.append(person_by_key[key])
    return named_agents, named_people
