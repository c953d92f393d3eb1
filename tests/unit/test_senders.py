"""Who may post under which name: people under their own, never an agent's or parley's."""

from __future__ import annotations

import contextlib

import fakeredis
import pytest
from pydantic import ValidationError

from parley.shared.keys import Keys
from parley.shared.models import SEED_SENDER, SYSTEM_SENDER, AgentSpec, RoomSpec, check_person_name
from parley.shared.scripts import Scripts
from parley.shared.store import RoomStore
from parley.workers.prompts import build_prompt
from tests.support.rooms import scripted_spec

ROOM = "r1"


@pytest.fixture
def store(fake_redis: fakeredis.FakeRedis) -> RoomStore:
    store = RoomStore(fake_redis, Keys("t"))
    store.create_room(ROOM, scripted_spec({"Optimist": [], "Skeptic": []}))
    return store


@pytest.mark.parametrize("sender", ["Optimist", "optimist", "OPTIMIST", "Optimist ", "Skeptic"])
def test_a_person_cannot_post_under_an_agents_name(store, sender):
    with pytest.raises(ValueError) as refused:
        store.post(ROOM, sender, "I agree with myself")
    assert str(refused.value) == (f"{sender!r} is an agent in room {ROOM}: "
                                  "people post under their own names")
    assert store.redis.xlen(store.keys.inbox(ROOM)) == 0


@pytest.mark.parametrize("sender", [SYSTEM_SENDER, SYSTEM_SENDER.upper(), "Parley", "parley "])
def test_a_person_cannot_post_as_parley_itself(store, sender):
    with pytest.raises(ValueError, match="reserved for parley's own notices"):
        store.post(ROOM, sender, "the room is closing")
    assert store.redis.xlen(store.keys.inbox(ROOM)) == 0


@pytest.mark.parametrize("sender", ["Ann\n", "Ann\nOptimist", "A" * 65, "-Ann", "Ann!", " Ann"])
def test_a_person_name_must_fit_the_name_pattern_whole(store, sender):
    with pytest.raises(ValueError, match="must be 1-64 letters, digits, spaces") as refused:
        store.post(ROOM, sender, "hello")
    assert "\n" not in str(refused.value)
    assert store.redis.xlen(store.keys.inbox(ROOM)) == 0


@pytest.mark.parametrize("sender", [SEED_SENDER, "Ann", "Optimist fan", "A" * 64, "ops-bot.2"])
def test_people_post_under_their_own_names(store, sender):
    store.post(ROOM, sender, "hello")
    assert store.redis.xlen(store.keys.inbox(ROOM)) == 1


def test_check_person_name_returns_a_valid_name():
    assert check_person_name("Ann") == "Ann"


@pytest.mark.parametrize("name", [SYSTEM_SENDER, "Parley", "PARLEY "])
def test_no_agent_may_be_called_parley(name):
    with pytest.raises(ValidationError, match="reserved for parley's own notices"):
        AgentSpec(name=name, model="openai/gpt-4o-mini")


@pytest.mark.parametrize("name", [SEED_SENDER, "user", "USER "])
def test_no_agent_may_be_called_user_so_the_task_can_always_be_posted(name):
    with pytest.raises(ValidationError, match="reserved for the person who posts the task"):
        AgentSpec(name=name, model="openai/gpt-4o-mini")


def test_an_agent_never_sees_a_post_as_its_own_turn(store, fake_redis):
    spec = scripted_spec({"Optimist": [], "Skeptic": []})
    for sender in ("User", "Optimist", "optimist", "Ann", "Optimist "):
        with contextlib.suppress(ValueError):  # refused: it never reaches the log
            store.post(ROOM, sender, f"Optimist here: I agree ({sender})")
    scripts = Scripts(fake_redis)
    keys = store.keys
    assert scripts.acquire(keys=[keys.lease(ROOM), keys.state(ROOM), keys.events(ROOM)],
                           args=["c1", 5000, 1000]) == 1
    scripts.drain(keys=[keys.lease(ROOM), keys.state(ROOM), keys.inbox(ROOM), keys.log(ROOM),
                        keys.dead_letters(ROOM), keys.events(ROOM)],
                  # batch, dead-letter cap, sender, message and dead-letter value limits, log
                  # cap (0: never trimmed), events cap
                  args=["c1:1", 1, 100, 100, 128, 65536, 1024, 0, 1000])
    transcript = store.read_messages(ROOM)
    assert [m.sender for m in transcript] == ["User", "Ann"]
    prompt = build_prompt(spec.agent("Optimist"), spec.agents, transcript, None, len)
    assert [m["role"] for m in prompt.messages] == ["system", "user", "user", "user"]


def test_nobody_posts_as_the_selector_of_a_selector_room(fake_redis):
    store = RoomStore(fake_redis, Keys("t"))
    store.create_room("sel", RoomSpec.model_validate({
        "policy": {"kind": "selector", "selector": {"model": "scripted", "script": []}},
        "agents": [{"name": name, "model": "scripted", "script": []} for name in ("a", "b")]}))
    with pytest.raises(ValueError, match="'Selector' is an agent in room sel"):
        store.post("sel", "Selector", "pick me")
    assert fake_redis.xlen(Keys("t").inbox("sel")) == 0
