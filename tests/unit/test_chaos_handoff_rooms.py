"""The chaos test's random handoff rooms, run in process without failures: every room
keeps the invariants check_room asserts, and together they end both ways a handoff run
ends and play handoffs, refusals and failures."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from parley.shared.models import AnswerStatus, RoomSpec
from parley.shared.store import RoomStore
from tests.chaos.handoff_rooms import ENDINGS, random_handoff_room
from tests.chaos.harness import check_room, reference_store

SEEDS = range(30)


@pytest.fixture(scope="module")
def rooms() -> list[tuple[RoomSpec, RoomStore]]:
    """Random handoff rooms (as the chaos test plans them) after their reference run."""
    return [(spec, reference_store(spec)) for spec in
            (random_handoff_room(random.Random(seed), "parley.agents") for seed in SEEDS)]


def test_every_random_handoff_room_keeps_the_invariants_without_failures(rooms):
    for spec, store in rooms:
        expected = [(m.sender, m.content) for m in store.read_messages("room")]
        check = check_room(store, "room", spec, expected)
        assert not check.timed_out and check.turns >= 1


def test_the_random_handoff_rooms_end_every_way_and_play_every_rule(rooms):
    played: Counter[str] = Counter()
    for _spec, store in rooms:
        played[str(store.read_state("room").stop_reason)] += 1
        for record in store.read_turns("room"):
            answers = record.bids
            played["refused"] += len(answers) > 1
            played["handoff"] += any(a.policy_call for a in answers) and len(answers) == 1
            played["failed"] += any(a.status is AnswerStatus.ERROR for a in answers)
    assert {str(reason) for reason in ENDINGS} <= set(played)
    assert played["refused"] and played["handoff"] and played["failed"]
