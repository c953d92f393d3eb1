"""The scripts' refusals are one vocabulary, read in one place; the checks and the event
writes every script repeats are shared pieces."""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

import fakeredis
import pytest
from redis.exceptions import ResponseError

from parley.shared.refusals import FENCED, Refusal, Refused, refusal_of, refused_with
from parley.shared.scripts import SCRIPT_NAMES, Scripts, source

LUA = Path(str(resources.files("parley.shared").joinpath("lua")))
REPOSITORY = Path(__file__).parents[2]
# The folders of parley's own code (the scripts' codes may be matched only by refusals.py).
SOURCES = ("parley", "coordinator", "workers", "shared")


def refusal_codes(text: str) -> set[str]:
    return set(re.findall(r"error_reply\('([A-Z]+)\b", text))


def test_every_code_a_script_refuses_with_is_in_the_vocabulary():
    used = set().union(*(refusal_codes(source(name)) for name in SCRIPT_NAMES))
    assert used == {code.value for code in Refusal}


def test_a_refusal_is_read_as_its_code_and_detail():
    refused = refusal_of(ResponseError("HELD c-1:4"))
    assert refused == Refused(Refusal.HELD, "c-1:4")
    assert refused_with(ResponseError("STALESEQ log is at 3, not 2"), FENCED)
    assert refused_with(ResponseError("PAUSED the room is paused"), Refusal.PAUSED)
    assert not refused_with(ResponseError("PAUSED the room is paused"), Refusal.HELD)


def test_an_error_no_script_wrote_is_no_refusal():
    assert refusal_of(ResponseError("Error running script (call to f_0): @user_script:1")) is None
    assert not refused_with(ResponseError("LEASELOSTX"), FENCED)


def test_a_real_scripts_refusal_reads_as_its_code():
    client = fakeredis.FakeRedis(server=fakeredis.FakeServer())
    with pytest.raises(ResponseError) as raised:
        Scripts(client).pause(keys=["t:{r}:state", "t:{r}:events"], args=["0", "10"])
    assert refusal_of(raised.value) == Refused(Refusal.NO_ROOM, "no such room")


def test_no_module_but_the_vocabulary_matches_a_refusal_by_its_text():
    codes = "|".join(code.value for code in Refusal)
    matched = re.compile(rf"""startswith\(\s*\(?["'](?:{codes})|==\s*["'](?:{codes})["']""")
    found = [str(path.relative_to(REPOSITORY)) for folder in SOURCES
             for path in (REPOSITORY / folder).rglob("*.py")
             if path.name != "refusals.py" and matched.search(path.read_text())]
    assert found == []


@pytest.mark.parametrize("name", SCRIPT_NAMES)
def test_scripts_check_counts_and_write_events_through_the_shared_pieces(name):
    own = (LUA / f"{name}.lua").read_text()
    assert "redis.call('TIME')" not in own  # lib/events.lua stamps every event
    assert not re.search(r"local function (count|finite)\b", own)  # lib/checks.lua
    assert "the events stream cap must be a count'" not in own
