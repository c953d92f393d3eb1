"""What if, the pure part: which settings replay, and how bad ones are refused."""

from __future__ import annotations

import pytest

from parley.coordinator.policies.what_if import NotReplayable, parse_settings, respecified
from parley.shared.models import RoomSpec
from tests.support.rooms import rotating_scripts, scripted_spec


def bid_room() -> RoomSpec:
    return scripted_spec(rotating_scripts(2, 2))


def test_settings_are_read_as_numbers_and_booleans():
    assert parse_settings(["threshold=0.7", "recency_window=2", "allow_repeat=true"]) == {
        "threshold": 0.7, "recency_window": 2, "allow_repeat": True}


@pytest.mark.parametrize(("pairs", "wording"), [
    (["threshold"], "--set 'threshold' is not name=value"),
    (["threshold=0.6", "threshold=0.7"], "--set threshold is given twice"),
    ([], "nothing to replay"),
])
def test_a_set_that_is_not_one_setting_is_refused_naming_it(pairs, wording):
    with pytest.raises(NotReplayable, match=wording):
        parse_settings(pairs)


def test_a_setting_that_changes_the_calls_cannot_be_replayed():
    with pytest.raises(NotReplayable, match="bid_mode cannot be replayed: .* new model calls"):
        respecified(bid_room(), {"bid_mode": "intent"})


def test_an_unknown_setting_is_refused_with_the_ones_that_replay():
    with pytest.raises(NotReplayable, match="'treshold' is not a setting a bid room can replay; "
                       "these can: threshold, recency_penalty, recency_window, max_messages"):
        respecified(bid_room(), {"treshold": 0.7})


def test_an_out_of_range_value_is_refused_naming_the_setting():
    with pytest.raises(NotReplayable, match="^threshold: "):
        respecified(bid_room(), {"threshold": 1.5})


def test_a_handoff_room_says_its_handoffs_cannot_be_replayed():
    spec = RoomSpec.model_validate({
        "policy": {"kind": "handoff", "start": "a"},
        "agents": [{"name": n, "model": "scripted", "script": []} for n in ("a", "b")]})
    with pytest.raises(NotReplayable, match="handoffs cannot be replayed under other settings"):
        respecified(spec, {"max_turns": 3})
