"""A room's events across real processes: the coordinator's scripts and the worker's answers
tell the log in order, ``parley events`` follows them until Ctrl-C, and ``parley turns``
shows who an open turn still waits on."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from parley.client import Client
from parley.shared.models import Message, StopReason
from tests.support.commands import run_parley
from tests.support.events import check_event_order
from tests.support.polling import wait_until
from tests.support.rooms import rotating_scripts, scripted_spec

pytestmark = [pytest.mark.e2e, pytest.mark.redis]


def test_a_followed_room_tells_its_runs_in_the_logs_order(processes, settings, queue, tmp_path):
    processes.worker("-Q", queue, "-c", "8")
    processes.coordinator()
    client = Client(settings)
    spec = scripted_spec(rotating_scripts(3, 8, sleep=0.01), queue=queue, max_messages=4)
    room = client.create_room(spec)
    out = (tmp_path / "events.jsonl").open("w")
    follower = subprocess.Popen([sys.executable, "-m", "parley", "events", room, "--json"],
                                stdout=out, stderr=subprocess.PIPE,
                                env={**os.environ, **processes.env})
    try:
        delivered: list[Message] = []
        first = client.wait(room, client.post(room, "go"), timeout_s=60,
                            on_message=delivered.append)
        second = client.wait(room, client.post(room, "more", sender="Ann"), timeout_s=60)
        events = client.store.read_events(room)
        wait_until(lambda: len((tmp_path / "events.jsonl").read_text().splitlines())
                   >= len(events), 20, "the follower to print every event")
    finally:
        follower.send_signal(signal.SIGINT)  # Ctrl-C
        code = follower.wait(15)
        out.close()

    assert code == 0, follower.stderr.read() if follower.stderr else ""
    assert [m.seq for m in delivered] == [m.seq for m in first.messages] == [1, 2, 3, 4]
    assert (first.stop_reason, second.stop_reason) == (StopReason.MAX_MESSAGES,) * 2
    check_event_order(events, second.messages)
    followed = [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert [line["id"] for line in followed] == [event.id for event in events]
    assert [line["run"] for line in followed if line["type"] == "run_ended"] == [1, 2]

    dumped = run_parley(processes.env, "events", room, "--json", "--no-follow")
    assert dumped.returncode == 0, dumped.stderr
    assert dumped.stdout.splitlines() == (tmp_path / "events.jsonl").read_text().splitlines()
    # Following with --until ends at the first run's end, though the stream goes on.
    first_run = run_parley(processes.env, "events", room, "--json", "--until", "run_ended")
    assert first_run.returncode == 0, first_run.stderr
    assert [json.loads(line)["type"] for line in first_run.stdout.splitlines()] == [
        e.type for e in events[:[e.type for e in events].index("run_ended") + 1]]
    turns = run_parley(processes.env, "turns", room, "--json")
    assert turns.returncode == 0, turns.stderr
    report = json.loads(turns.stdout)
    assert [t["winner"] for t in report["turns"]] == ["agent1", "agent2", "agent0",
                                                      "agent1", "agent2", "agent0"]
    assert all(len(t["answers"]) == 3 for t in report["turns"])
    assert report["open_turn"] is None


def test_turns_names_the_agent_an_open_turn_still_waits_on(processes, settings, queue):
    processes.worker("-Q", queue, "-c", "8")
    processes.coordinator()
    client = Client(settings)
    scripts = rotating_scripts(3, 1)
    scripts["agent2"][0]["sleep"] = 8  # the slow one
    room = client.create_room(scripted_spec(scripts, queue=queue, bid_timeout_s=30))
    inbox_id = client.post(room, "go")

    def two_answered() -> dict | None:
        done = run_parley(processes.env, "turns", room, "--json")
        report = json.loads(done.stdout) if done.returncode == 0 else {}
        in_flight = report.get("open_turn")
        return in_flight if in_flight and len(in_flight["answered"]) == 2 else None

    in_flight = wait_until(two_answered, 20, "two of three answers", every_s=0.2)
    human = run_parley(processes.env, "turns", room).stdout
    result = client.wait(room, inbox_id, timeout_s=60)

    assert (in_flight["turn"], in_flight["phase"], in_flight["kind"]) == (1, 0, "bid")
    assert (in_flight["answered"], in_flight["pending"]) == (["agent0", "agent1"], ["agent2"])
    assert "answered 2 of 3 · pending: agent2" in human
    assert [m.sender for m in result.messages] == ["User", "agent1"]
