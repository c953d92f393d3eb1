"""``parley status``: failed rooms with their error, and each stream's length beside its cap."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from parley import cli
from parley.client import Client
from parley.shared.scripts import Scripts
from parley.shared.settings import Settings
from tests.support.fake_client import cli_on_fake_client
from tests.support.rooms import rotating_scripts, scripted_spec

ROOM = "room-1"
SETTINGS = Settings(key_prefix="t", bids_stream_maxlen=300, turns_stream_maxlen=200,
                    dead_letter_stream_maxlen=50, events_stream_maxlen=400)


@pytest.fixture
def client(monkeypatch) -> Client:
    client = cli_on_fake_client(monkeypatch, SETTINGS)
    client.store.create_room(ROOM, scripted_spec(rotating_scripts(2, 1)))
    return client


def test_status_of_a_room_shows_each_stream_beside_its_cap(client):
    keys = client.store.keys
    client.post(ROOM, "hello")
    for turn in range(3):
        client.redis.xadd(keys.bids(ROOM), {"agent": "agent0", "turn": str(turn)})

    result = CliRunner().invoke(cli.app, ["status", ROOM, "--raw"])

    assert result.exit_code == 0, result.output
    streams = json.loads(result.output)["streams"]
    assert streams == {
        "log": {"length": 0, "max_length": None},
        "inbox": {"length": 1, "max_length": None},
        "bids": {"length": 3, "max_length": 300},
        "turns": {"length": 0, "max_length": 200},
        "dead_letters": {"length": 0, "max_length": 50},
        "events": {"length": 0, "max_length": 400},
    }


def test_status_lists_a_failed_room_with_its_error(client):
    keys = client.store.keys
    scripts = Scripts(client.redis)
    scripts.acquire(keys=[keys.lease(ROOM), keys.state(ROOM), keys.events(ROOM)], args=["c1", 5000, 1000])
    error = "ValidationError: 1 validation error for RoomSpec " + "policy.bid_timeout_s " * 8
    scripts.count_failed_take(keys=[keys.lease(ROOM), keys.state(ROOM), keys.inbox(ROOM),
                                    keys.events(ROOM)],
                              args=["c1:1", 1, error, 1000])

    listing = CliRunner().invoke(cli.app, ["status"])
    detail = CliRunner().invoke(cli.app, ["status", ROOM, "--raw"])

    assert listing.exit_code == 0, listing.output
    assert "room_error" in listing.output
    # One line however long, for grep.
    assert f"room {ROOM} failed after 1 take(s): {error}\n" in listing.output
    state = json.loads(detail.output)
    assert (state["status"], state["stop_reason"], state["stop_detail"], state["failed_takes"]) == (
        "failed", "room_error", error, "1")


def test_status_of_a_room_shows_what_rooms_show_shows(client):
    client.post(ROOM, "hello")

    status = CliRunner().invoke(cli.app, ["status", ROOM])
    shown = CliRunner().invoke(cli.app, ["rooms", "show", ROOM])

    assert status.exit_code == 0, status.output
    def facts(output: str) -> list[str]:  # "last activity" is relative to each command's now
        return [line for line in output.splitlines() if not line.startswith("last activity")]

    assert facts(status.output) == facts(shown.output)
    assert status.output.startswith(f"room: {ROOM}\n")
    assert "posts waiting: 1\n" in status.output
