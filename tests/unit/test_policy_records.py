"""Every floor policy is one record the rest of parley reads: for every kind the spec
models accept, each registry has it (its record, its calls' prompts and templates, its
scripted example room, the way its turns and stops are told, what the dashboard shows),
and a kind without a record fails loudly wherever it is told."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest
import yaml

from parley.api.dashboard import policy_state_view
from parley.cli.demo import task_sender
from parley.client import load_spec
from parley.coordinator import policies
from parley.coordinator.policies import POLICIES, UnknownPolicy
from parley.shared.keys import Keys
from parley.shared.models import POLICY_CONFIGS, POLICY_KINDS, CallKind, RoomSpec, StopReason, config_kind
from parley.shared.store import RoomStore
from parley.views.explain import legend, next_steps, stop_line, stop_words, turn_line
from parley.workers.prompts import CALL_PROMPTS, template
from tests.support.fake_turns import serve_once
from tests.support.local_worker import LocalWorkerTransport

REPOSITORY = Path(__file__).parents[2]
EXAMPLES = REPOSITORY / "examples" / "rooms"
ROOM = "room-1"
# The modules that serve every policy alike: none names one.
POLICY_FREE = ["coordinator/turn_loop.py", "coordinator/room_io.py", "parley/views/explain.py",
               "parley/views/run_printer.py", "parley/api/dashboard.py", "parley/api/static/app.js",
               "coordinator/policies/what_if.py", "parley/views/what_if.py",
               "parley/console/room_view.py", "parley/console/app.py",
               "workers/tasks.py", "workers/llm.py", "workers/calls.py",
               *(str(path.relative_to(REPOSITORY)) for path in (REPOSITORY / "shared" / "lua")
                 .rglob("*.lua"))]


def scripted_example(kind: str) -> Path:
    """A room of ``kind`` in examples/rooms/ that runs offline (every caller scripted)."""
    for path in sorted(EXAMPLES.glob("*.yaml")):
        document = yaml.safe_load(path.read_text())
        spec = RoomSpec.model_validate(document)
        if spec.policy.kind == kind and all(agent.is_scripted for agent in spec.callers):
            return path
    raise AssertionError(f"no scripted example room of kind {kind!r} in {EXAMPLES}")


def recorded(sync_redis, async_redis, spec: RoomSpec):
    """The turn records and the state of one run of an example room's task."""
    keys = Keys("t")
    store = RoomStore(sync_redis, keys)
    store.create_room(ROOM, spec)
    store.post(ROOM, task_sender(spec), "Should we ship the beta next week?")
    asyncio.run(serve_once(async_redis, keys, LocalWorkerTransport(sync_redis, keys)))
    return store.read_turns(ROOM), store.read_state(ROOM)


def test_the_spec_models_and_the_records_know_the_same_kinds():
    assert tuple(POLICIES) == POLICY_KINDS == tuple(config_kind(c) for c in POLICY_CONFIGS)
    assert all(record.kind == kind for kind, record in POLICIES.items())


def test_an_unknown_kind_is_refused_naming_every_kind():
    with pytest.raises(ValueError, match="kind must be one of: " + ", ".join(POLICY_KINDS)):
        RoomSpec.model_validate({"policy": {"kind": "swarm"}, "agents": []})


@pytest.mark.parametrize("kind", POLICY_KINDS)
def test_every_call_of_every_policy_has_its_prompt_and_template(kind):
    for call in POLICIES[kind].calls:
        assert call in CALL_PROMPTS
        assert template(call.value).strip()


def test_every_call_kind_is_some_policys():
    assert set().union(*(record.calls for record in POLICIES.values())) == set(CallKind)


@pytest.mark.parametrize("kind", POLICY_KINDS)
def test_every_policy_tells_the_turns_of_its_example_room(kind, sync_redis, async_redis):
    spec = load_spec(scripted_example(kind))
    records, state = recorded(sync_redis, async_redis, spec)

    assert records
    for index, record in enumerate(records):
        line = turn_line(spec, record, records[:index])
        assert line.policy == kind and line.text()
    assert legend(spec)
    assert state.stop_reason is not None
    assert stop_line(spec, state.stop_reason, state.stop_detail, records[-1]).startswith(
        f"{state.stop_reason.value}: ")


@pytest.mark.parametrize("kind", POLICY_KINDS)
def test_every_stop_has_words_and_next_steps_in_a_room_of_every_kind(kind):
    spec = load_spec(scripted_example(kind))
    for reason in StopReason:
        assert stop_words(spec, reason, "the detail")
        assert isinstance(next_steps(spec, reason, "r1"), list)
    # A policy words only stops there are.
    assert set(POLICIES[kind].stop_words) <= set(StopReason)


@pytest.mark.parametrize("kind", POLICY_KINDS)
def test_every_policy_says_what_the_dashboard_shows_of_it(kind):
    spec = load_spec(scripted_example(kind))
    record = POLICIES[kind]
    shown = policy_state_view(spec, {})
    assert shown is None or json.loads(json.dumps(shown)) == shown
    assert record.scored <= record.calls
    assert record.cut_on_listen <= record.calls


def test_a_kind_without_a_record_fails_loudly_wherever_it_is_told(monkeypatch, sync_redis,
                                                                  async_redis):
    spec = load_spec(scripted_example("mention"))
    records, _ = recorded(sync_redis, async_redis, spec)
    monkeypatch.delitem(policies.POLICIES, "mention")
    tellings = [lambda: legend(spec), lambda: turn_line(spec, records[0]),
                lambda: stop_words(spec, StopReason.MAX_TURNS),
                lambda: next_steps(spec, StopReason.MAX_TURNS, "r1"),
                lambda: policy_state_view(spec, {})]
    for tell in tellings:
        with pytest.raises(UnknownPolicy, match="no floor policy 'mention': the policies are"):
            tell()


@pytest.mark.parametrize("path", POLICY_FREE)
def test_the_modules_that_serve_every_policy_name_none(path):
    text = (REPOSITORY / path).read_text()
    names = [*(f"[\"']{kind}[\"']" for kind in POLICY_KINDS),
             *(config.__name__ for config in POLICY_CONFIGS)]
    assert not re.findall("|".join(names), text)
