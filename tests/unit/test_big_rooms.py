"""Big rooms cannot freeze a coordinator: a turn's reply cut is one matcher per room and
linear in the replies, and a new room's agents are bounded (PARLEY_MAX_AGENTS)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import fakeredis
import pytest
from pydantic import ValidationError

from parley.client import load_spec
from parley.coordinator import policies
from parley.coordinator.policies import TurnView
from parley.coordinator.turn_loop import TurnAnswers
from parley.shared import speakers
from parley.shared.keys import Keys
from parley.shared.models import Answer, CallKind, RoomSpec
from parley.shared.settings import Settings
from parley.shared.spec_limits import DEFAULT_MAX_AGENTS, TooManyAgents, create_context
from parley.shared.store import RoomStore

REFUSED_257 = "a room may have at most 256 agents (PARLEY_MAX_AGENTS), this spec has 257"


def room_data(agents: int) -> dict[str, Any]:
    return {"agents": [{"name": f"Agent {i}", "model": "scripted", "script": []}
                       for i in range(agents)]}


def view() -> TurnView:
    return TurnView(turn=1, run=1, run_turns=1, messages_in_run=1, recent=(), snapshot_seq=1)


def long_reply(agent: int, lines: int) -> str:
    # Every line has a colon, so that every line is a candidate the matcher must look at;
    # only the last speaks for someone else.
    body = "\n".join(f"Point {n}: agent {agent} weighs the cost at 10:30" for n in range(lines))
    return f"{body}\nAgent {(agent + 1) % DEFAULT_MAX_AGENTS}: I agree"


class Counted:
    """Counts the calls of name_skeleton while a test runs."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls = 0
        original = speakers.name_skeleton

        def counted(name: str) -> str:
            self.calls += 1
            return original(name)

        monkeypatch.setattr(speakers, "name_skeleton", counted)


def test_a_turn_of_a_room_at_the_bound_builds_one_matcher_and_reads_each_line_once(monkeypatch):
    spec = RoomSpec.model_validate(room_data(DEFAULT_MAX_AGENTS))
    lines = 40
    bids = [Answer(agent=f"Agent {i}", turn=1, score=0.4, message=long_reply(i, lines))
            for i in range(DEFAULT_MAX_AGENTS)]
    speakers._speaker_lines.cache_clear()
    counted = Counted(monkeypatch)

    decision = policies.decide(spec, view(), bids)

    assert speakers._speaker_lines.cache_info().misses == 1
    # One skeleton per participant (the agents and User) to build the matcher, then one per
    # line that could speak: quadratic work would be 256 x 257 names.
    assert counted.calls == DEFAULT_MAX_AGENTS + 1 + DEFAULT_MAX_AGENTS * (lines + 1)
    assert len(decision.cuts) == DEFAULT_MAX_AGENTS
    assert decision.cuts["Agent 0"] == "Agent 1"


def test_the_next_turn_of_the_same_room_reuses_its_matcher():
    spec = RoomSpec.model_validate(room_data(DEFAULT_MAX_AGENTS))
    bids = [Answer(agent="Agent 0", turn=1, score=0.9, message="Fine.\nAgent 1: no")]
    speakers._speaker_lines.cache_clear()

    policies.decide(spec, view(), bids)
    policies.decide(spec, view(), bids)

    assert speakers._speaker_lines.cache_info().misses == 1


def test_a_cut_reads_a_long_reply_in_work_proportional_to_its_lines(monkeypatch):
    lines = speakers.speaker_lines([f"Agent {i}" for i in range(DEFAULT_MAX_AGENTS)])
    counted = Counted(monkeypatch)
    reply = "x: y\n" * 20_000 + "Agent 7: forged"

    assert lines.first(reply, besides="Agent 3") == (len("x: y\n") * 20_000, "Agent 7")
    assert counted.calls == 20_001


def test_call_numbers_of_a_big_phase_count_each_answer_once():
    names = tuple(f"Agent {i}" for i in range(DEFAULT_MAX_AGENTS))
    inbox = TurnAnswers(turn=1, cursor="0-0", committed_calls={"Agent 0": 4})
    inbox.answers = [Answer(agent=name, turn=1) for name in names] + [Answer(agent="Agent 1", turn=1)]

    numbers = inbox.numbers(policies.Calls(CallKind.BID, names))

    assert (numbers["Agent 0"], numbers["Agent 1"], numbers["Agent 2"]) == (6, 3, 2)


def test_a_spec_checked_for_a_new_room_is_refused_past_the_bound_in_one_line():
    with pytest.raises(ValidationError) as refused:
        RoomSpec.model_validate(room_data(257), context=create_context(DEFAULT_MAX_AGENTS))
    assert REFUSED_257 in str(refused.value)


def test_a_spec_at_the_bound_is_accepted():
    spec = RoomSpec.model_validate(room_data(256), context=create_context(DEFAULT_MAX_AGENTS))
    assert len(spec.agents) == 256


def test_the_bound_is_a_setting(monkeypatch):
    assert Settings().max_agents == 256
    monkeypatch.setenv("PARLEY_MAX_AGENTS", "1000")
    assert Settings().max_agents == 1000


def test_a_spec_file_past_the_bound_is_refused(tmp_path: Path):
    path = tmp_path / "big.json"
    path.write_text(json.dumps(room_data(257)))
    with pytest.raises(ValidationError, match=r"at most 256 agents \(PARLEY_MAX_AGENTS\)"):
        load_spec(path, max_agents=256)
    assert len(load_spec(path, max_agents=300).agents) == 257


def test_a_room_past_the_bound_is_not_created(fake_redis: fakeredis.FakeRedis):
    store = RoomStore(fake_redis, Keys("t"))
    with pytest.raises(TooManyAgents) as refused:
        store.create_room("r1", RoomSpec.model_validate(room_data(257)))
    assert str(refused.value) == REFUSED_257
    assert not fake_redis.exists(store.keys.spec("r1"))


def test_a_room_created_under_a_raised_bound_stays_readable(fake_redis: fakeredis.FakeRedis):
    RoomStore(fake_redis, Keys("t"), max_agents=300).create_room(
        "r1", RoomSpec.model_validate(room_data(257)))

    _, spec = RoomStore(fake_redis, Keys("t")).read_spec("r1")

    assert len(spec.agents) == 257
