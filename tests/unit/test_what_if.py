"""What if, the pure part: which settings replay, and how bad ones are refused."""

from __future__ import annotations

import pytest

from parley.coordinator.policies.what_if import NotReplayable, parse_settings, respecified
from parley.shared.models import RoomSpec
from tests.support.api import AUTH, run_room, spec_json
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


def test_the_replay_route_needs_a_token_and_refuses_bad_queries_in_words(server, secured):
    room = secured.post("/rooms", json=spec_json(turns=3), headers=AUTH).json()["room"]
    secured.post(f"/rooms/{room}/messages", json={"sender": "Ann", "content": "go"},
                 headers=AUTH)
    run_room(server, room)

    assert secured.get(f"/rooms/{room}/replay?threshold=0.7").status_code == 401
    same = secured.get(f"/rooms/{room}/replay?threshold=0.5&run=1", headers=AUTH)
    bad_run = secured.get(f"/rooms/{room}/replay?threshold=0.7&run=one", headers=AUTH)
    nothing = secured.get(f"/rooms/{room}/replay", headers=AUTH)
    missing = secured.get("/rooms/nope/replay?threshold=0.7", headers=AUTH)

    assert same.status_code == 200
    assert same.json()["summary"]["first_divergence"] is None
    assert same.json()["summary"]["turns_replayed"] == same.json()["summary"]["turns_recorded"]
    assert (bad_run.status_code, bad_run.json()) == (400, {"error": "run 'one' is not a run number"})
    assert nothing.status_code == 400 and "nothing to replay" in nothing.json()["error"]
    assert missing.status_code == 404


def test_the_dashboard_page_has_the_what_if_panel(secured):
    page = secured.get("/").text
    script = secured.get("/static/app.js").text
    assert 'id="what-if-threshold" type="range"' in page and 'id="what-if-penalty"' in page
    assert "/replay?" in script and '"changed"' in script
