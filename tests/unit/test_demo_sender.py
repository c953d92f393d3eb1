"""The demo posts its task as someone every example room lets post."""

from __future__ import annotations

from pathlib import Path

import pytest

from parley.cli.demo import task_sender
from parley.client import load_spec
from parley.shared.models import SEED_SENDER, MentionPolicy

EXAMPLES = sorted((Path(__file__).parents[2] / "examples" / "rooms").glob("*.yaml"))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda path: path.stem)
def test_every_example_rooms_task_is_posted_by_someone_it_lets_post(path):
    spec = load_spec(path)
    sender = task_sender(spec)
    people = spec.policy.people if isinstance(spec.policy, MentionPolicy) else None
    assert people is None or sender in people
    assert sender not in spec.agent_names


def test_a_roster_without_the_default_poster_gives_its_first_person():
    spec = load_spec(Path(__file__).parents[2] / "examples" / "rooms" / "incident.yaml")
    assert SEED_SENDER not in spec.policy.people
    assert task_sender(spec) == spec.policy.people[0]
