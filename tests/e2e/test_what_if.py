"""What if, over turns recorded by real runs: a worker and a coordinator play bid, selector
and round-table rooms on the real Redis, then ``parley replay`` and ``GET
/rooms/{room}/replay`` decide the recorded turns again under other settings."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from parley.api.app import make_app
from parley.client import Client
from parley.shared.models import RoomSpec
from tests.support.commands import run_parley
from tests.support.rooms import scripted_spec

pytestmark = [pytest.mark.e2e, pytest.mark.redis]

# Turn 1: Ana 0.9 wins. Turn 2: Ana is recent (0.3 - 0.3), Ben's 0.6 clears 0.5 and wins.
# Turn 3: Ana 0.4, Ben recent (0.3 - 0.3): nobody clears 0.5, a lull. Under threshold 0.7
# Ben's 0.6 no longer clears it: the lull comes at turn 2, one turn earlier.
LULL_SCRIPTS = {
    "Ana": [{"score": 0.9, "message": "Start with the logs."},
            {"score": 0.3, "message": "Maybe."},
            {"score": 0.4, "message": "Anything else?"}],
    "Ben": [{"score": 0.2, "message": "Sure."},
            {"score": 0.6, "message": "The disk is full."},
            {"score": 0.3, "message": "Agreed."}],
}


def selector_room(queue: str) -> RoomSpec:
    """Alice, then (her repeat refused) Bob, then TERMINATE."""
    return RoomSpec.model_validate({
        "policy": {"kind": "selector", "call_timeout_s": 30, "selector": {
            "model": "scripted", "queue": queue,
            "script": [{"content": "Alice"}, {"content": "Alice"}, {"content": "Bob"},
                       {"content": "TERMINATE"}]}},
        "agents": [{"name": name, "model": "scripted", "queue": queue,
                    "script": [{"content": f"{name} here."}]} for name in ("Alice", "Bob")],
    })


def roundtable_room(queue: str) -> RoomSpec:
    """Two panelists once each, then the moderator's verdict."""
    return RoomSpec.model_validate({
        "policy": {"kind": "roundtable", "moderator": "Mod", "call_timeout_s": 30},
        "agents": [{"name": name, "model": "scripted", "queue": queue,
                    "script": [{"content": f"{name}'s view."}]} for name in ("P1", "P2", "Mod")],
    })


def replay_json(env: dict[str, str], room: str, *sets: str) -> dict:
    """``parley replay ROOM --set ... --json``, run as its own process."""
    args = [arg for pair in sets for arg in ("--set", pair)]
    done = run_parley(env, "replay", room, *args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_higher_threshold_ends_the_bid_room_one_turn_earlier_in_a_lull(
        processes, settings, queue):
    processes.worker("-Q", queue, "-c", "4")
    processes.coordinator()
    client = Client(settings)
    result = client.run(scripted_spec(LULL_SCRIPTS, queue=queue), "Why is it slow?",
                        timeout_s=60)
    assert [t.winner for t in client.turns(result.room)] == ["Ana", "Ben", None]

    replay = replay_json(processes.env, result.room, "threshold=0.7")

    assert [(t["turn"], t["then"]["winner"], t["now"]["winner"], t["changed"])
            for t in replay["turns"]] == [(1, "Ana", "Ana", False), (2, "Ben", None, True)]
    assert replay["settings"] == {"threshold": {"then": 0.5, "now": 0.7}}
    assert replay["summary"] == {
        "turns_replayed": 2, "turns_recorded": 3, "first_divergence": 2,
        "floor_share": {"then": {"Ana": 1, "Ben": 1}, "now": {"Ana": 1}},
        "stop": {"then": None, "now": {"reason": "lull", "turn": 2}}}
    # Without the penalty nothing changes: every turn replays, the lull where it was.
    same = client.replay(result.room, {"recency_penalty": 0.0}).as_json()["summary"]
    assert (same["turns_replayed"], same["first_divergence"], same["stop"]["now"]) == (
        3, None, {"reason": "lull", "turn": 3})
    # The HTTP API answers the same JSON.
    with TestClient(make_app(settings), base_url="http://127.0.0.1") as api:
        answer = api.get(f"/rooms/{result.room}/replay", params={"threshold": "0.7"})
        refused = api.get(f"/rooms/{result.room}/replay", params={"bid_mode": "intent"})
    assert answer.status_code == 200 and answer.json() == replay
    assert refused.status_code == 400
    assert "bid_mode cannot be replayed" in refused.json()["error"]
    text = run_parley(processes.env, "replay", result.room, "--set", "threshold=0.7")
    assert "turn 2: then Ben speaks; now nobody speaks, the run ends (lull)  [CHANGED]" in text.stdout
    assert "stopped at turn 2, the first whose outcome differs" in text.stdout


def test_selector_and_roundtable_rooms_replay_until_a_new_call_is_needed(
        processes, settings, queue):
    processes.worker("-Q", queue, "-c", "4")
    processes.coordinator()
    client = Client(settings)
    selector = client.run(selector_room(queue), "Plan the trip.", timeout_s=60)
    table = client.run(roundtable_room(queue), "Worth it?", timeout_s=60)
    assert [t.winner for t in client.turns(selector.room)] == ["Alice", "Bob", None]

    repeat = client.replay(selector.room, {"allow_repeat": True}).as_json()
    capped = client.replay(selector.room, {"max_turns": 1}).as_json()
    longer = client.replay(table.room, {"rounds": 2}).as_json()

    assert repeat["turns"][-1] == {
        "turn": 2, "then": {"winner": "Bob", "stop": None, "needs_calls": None},
        "now": {"winner": "Alice", "stop": None, "needs_calls": "a new speak call to Alice"},
        "changed": True, "adjusted": {}}
    assert capped["summary"]["stop"] == {"then": None, "now": {"reason": "max_turns", "turn": 1}}
    assert [(t["then"]["winner"], t["now"]["winner"]) for t in longer["turns"]] == [
        ("P1", "P1"), ("P2", "P2"), ("Mod", "P1")]
    assert longer["turns"][-1]["now"]["needs_calls"] == "a new panel call to P1"
    refused = run_parley(processes.env, "replay", table.room, "--set", "moderator=P1")
    assert refused.returncode == 2
    assert "moderator cannot be replayed" in refused.stderr
