"""The chaos test's random round-table rooms, run in process without failures: every room
keeps the invariants check_room asserts, and together the rooms play every round-table
rule the chaos test must see survive kills (so a change of the generator cannot quietly
stop exercising one)."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from parley.coordinator import policies
from parley.coordinator.policies import roundtable
from parley.shared.models import AnswerStatus, CallKind, RoomSpec, RoundtablePolicy, StopReason, TurnRecord
from parley.shared.store import RoomStore
from tests.chaos.harness import check_room, reference_store
from tests.chaos.roundtable_rooms import random_roundtable_room

SEEDS = range(30)


def rules_played(spec: RoomSpec, record: TurnRecord) -> set[str]:
    """Which of the round-table's rules a recorded turn played."""
    policy = spec.policy
    assert isinstance(policy, RoundtablePolicy)
    (answer,) = record.bids
    played = set()
    if answer.kind is CallKind.PANEL and answer.status is AnswerStatus.ERROR:
        played.add("panelist failed")
    if record.cuts:
        played.add("impersonation cut")
    if record.cuts and policies.replay(spec, record).message.endswith("an empty reply)"):
        played.add("cut to nothing")
    if answer.kind is CallKind.PANEL and int(record.policy_state.get("spoken", "0")) >= len(
            roundtable.panelists(spec)):
        played.add("a later round")
    if record.stop_reason is StopReason.VERDICT:
        played.add("verdict")
    if record.stop_reason is StopReason.MODERATOR_FAILED:
        played.add("moderator failed")
    return played


@pytest.fixture(scope="module")
def rooms() -> list[tuple[RoomSpec, RoomStore]]:
    """Random round-table rooms (as the chaos test plans them) after their reference run."""
    made = []
    for seed in SEEDS:
        spec = random_roundtable_room(random.Random(seed), "parley.agents")
        made.append((spec, reference_store(spec)))
    return made


def test_every_random_roundtable_room_keeps_the_invariants_without_failures(rooms):
    for spec, store in rooms:
        expected = [(m.sender, m.content) for m in store.read_messages("room")]
        check = check_room(store, "room", spec, expected)
        assert not check.timed_out and check.turns >= 3


def test_the_random_roundtable_rooms_play_every_rule(rooms):
    played: Counter[str] = Counter()
    for spec, store in rooms:
        for record in store.read_turns("room"):
            played.update(rules_played(spec, record))
        names = spec.agent_names
        moderator = spec.policy.moderator  # type: ignore[union-attr]
        played["moderator listed " + ("first" if names[0] == moderator else
                                      "last" if names[-1] == moderator else "between")] += 1
    assert set(played) == {
        "panelist failed", "impersonation cut", "cut to nothing", "a later round", "verdict",
        "moderator failed", "moderator listed first", "moderator listed last",
        "moderator listed between"}, played
