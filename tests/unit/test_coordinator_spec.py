"""How the coordinator reads a stored spec: validated, without its agents' scripts (the
workers replay them), so a standby taking a thousand rooms does not validate their
scripts entry by entry."""

from __future__ import annotations

import orjson
import pytest
from pydantic import ValidationError

from parley.coordinator.room_io import coordinator_spec
from tests.support.rooms import rotating_scripts, scripted_spec


def stored(**changes: object) -> dict:
    document = orjson.loads(scripted_spec(rotating_scripts(2, 3)).model_dump_json())
    document.update(changes)
    return document


def test_the_coordinators_spec_has_every_field_but_the_scripts():
    spec = scripted_spec(rotating_scripts(2, 3))

    read = coordinator_spec(spec.model_dump_json().encode())

    assert [agent.script for agent in read.agents] == [[], []]
    assert read.policy == spec.policy
    assert [agent.name for agent in read.agents] == [agent.name for agent in spec.agents]


def test_a_script_entry_the_coordinator_never_replays_is_not_validated_by_it():
    document = stored()
    document["agents"][0]["script"][0] = {"score": 0.5, "content": "two shapes at once"}

    assert coordinator_spec(orjson.dumps(document)).agents[0].script == []


def test_a_stored_spec_corrupted_outside_the_scripts_still_fails():
    document = stored()
    document["policy"]["bid_timeout_s"] = None

    with pytest.raises(ValidationError, match="bid_timeout_s"):
        coordinator_spec(orjson.dumps(document))
    with pytest.raises(ValidationError, match="agents"):
        coordinator_spec(orjson.dumps(stored(agents="none")))
    with pytest.raises(ValidationError):
        coordinator_spec(b"{not json")
