"""The chaos test's random selector rooms, run in process without failures: every room keeps
the invariants check_room asserts, and together the rooms play every selector rule the
chaos test must see survive kills (so a change of the generator cannot quietly stop
exercising one)."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from parley.coordinator.policies import selector
from parley.shared.models import AnswerStatus, CallKind, RoomSpec, SelectorPolicy, StopReason, TurnRecord
from tests.chaos.harness import check_room, reference_store
from tests.chaos.selector_rooms import random_selector_room

SEEDS = range(30)


def rules_played(spec: RoomSpec, record: TurnRecord) -> set[str]:
    """Which of the selector's rules a recorded turn played."""
    policy = spec.policy
    assert isinstance(policy, SelectorPolicy)
    last = record.recent[-1] if record.recent else None
    picks = [answer for answer in record.bids if answer.kind is CallKind.SELECT]
    choices = [selector.valid_choice(policy, spec.agent_names, pick, last) for pick in picks]
    played = set()
    if len(picks) == 2:
        played.add("retry")
    if len(picks) == 2 and choices == [None, None]:
        played.add("rotation")
    if any(selector.read_choice(pick.message).casefold() == (last or "").casefold()
           and choice is None for pick, choice in zip(picks, choices, strict=True)):
        played.add("back to back refused")
    if any(pick.status is AnswerStatus.ERROR for pick in picks):
        played.add("selector failed")
    if record.stop_reason is StopReason.TERMINATE:
        played.add("participant TERMINATE" if record.winner else "selector TERMINATE")
    if record.stop_reason is StopReason.MAX_TURNS:
        played.add("max_turns")
    if record.cuts:
        played.add("impersonation cut")
    if any(answer.kind is CallKind.SPEAK and answer.status is AnswerStatus.ERROR
           for answer in record.bids):
        played.add("participant failed")
    return played


@pytest.fixture(scope="module")
def rooms() -> list[tuple[RoomSpec, object]]:
    """Random selector rooms (as the chaos test plans them) after their reference run."""
    made = []
    for seed in SEEDS:
        rng = random.Random(seed)
        spec = random_selector_room(rng, "parley.agents", turns=rng.randint(6, 20))
        made.append((spec, reference_store(spec)))
    return made


def test_every_random_selector_room_keeps_the_invariants_without_failures(rooms):
    for spec, store in rooms:
        expected = [(m.sender, m.content) for m in store.read_messages("room")]
        check = check_room(store, "room", spec, expected)
        assert not check.timed_out and check.turns >= 1


def test_the_random_selector_rooms_play_every_rule(rooms):
    played: Counter[str] = Counter()
    for spec, store in rooms:
        for record in store.read_turns("room"):
            played.update(rules_played(spec, record))
    assert set(played) == {
        "retry", "rotation", "back to back refused", "selector failed", "selector TERMINATE",
        "participant TERMINATE", "max_turns", "impersonation cut", "participant failed"}, played
