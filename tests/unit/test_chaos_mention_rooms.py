"""The chaos test's random discussion rooms, run in process without failures: every room
keeps the invariants check_room asserts, and together they end every way a discussion
run ends and play silence, failures and waiting for the person."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from parley.shared.models import AnswerStatus, RoomSpec
from parley.shared.store import RoomStore
from tests.chaos.harness import check_room, reference_store
from tests.chaos.mention_rooms import ENDINGS, random_mention_room

SEEDS = range(30)


@pytest.fixture(scope="module")
def rooms() -> list[tuple[RoomSpec, RoomStore]]:
    """Random discussion rooms (as the chaos test plans them) after their reference run."""
    return [(spec, reference_store(spec)) for spec in
            (random_mention_room(random.Random(seed), "parley.agents") for seed in SEEDS)]


def test_every_random_discussion_keeps_the_invariants_without_failures(rooms):
    for spec, store in rooms:
        expected = [(m.sender, m.content) for m in store.read_messages("room")]
        check = check_room(store, "room", spec, expected)
        assert not check.timed_out and check.turns >= 1


def test_the_random_discussions_end_every_way_and_play_every_rule(rooms):
    played: Counter[str] = Counter()
    for _spec, store in rooms:
        played[str(store.read_state("room").stop_reason)] += 1
        for record in store.read_turns("room"):
            if record.winner is None and record.stop_reason is None:
                played["silence"] += 1
            if any(b.status is AnswerStatus.ERROR for b in record.bids):
                played["failure"] += 1
    assert {str(reason) for reason in ENDINGS} | {"silence", "failure"} <= set(played), played
