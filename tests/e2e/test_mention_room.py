"""Discussion (mention) rooms across real processes: the incident example through the
CLI, waiting for the person on call across runs, and a coordinator killed mid-discussion
whose successor keeps the speak queue and the wait exactly."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
import yaml

from parley.client import Client
from parley.coordinator import policies
from parley.coordinator.policies import mention
from parley.shared.models import RoomSpec, StopReason
from tests.support.commands import run_parley
from tests.support.polling import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.redis]

EXAMPLE = Path(__file__).parents[2] / "examples" / "rooms" / "incident.yaml"


def parley(processes, *args: str) -> dict:
    done = run_parley(processes.env, *args)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout) if done.stdout.strip() else {}


def test_the_incident_example_waits_for_oncall_across_runs(processes, tmp_path, queue):
    processes.worker("-Q", queue, "-c", "4")
    processes.coordinator()
    data = yaml.safe_load(EXAMPLE.read_text())
    for agent in data["agents"]:
        agent["queue"] = queue
    spec_path = tmp_path / "incident.yaml"
    spec_path.write_text(yaml.safe_dump(data))

    first = parley(processes, "run", str(spec_path), "--as", "oncall", "--task",
                   "checkout-api is failing", "--json")
    assert first["stop_reason"] == "waiting_for_person"
    assert [m["sender"] for m in first["messages"]] == ["oncall", "investigator", "dev"]
    room = first["room"]
    assert parley(processes, "queue", room, "--json") == {
        "speaking": None, "queue": [], "listening": [], "asked": [["dev", "oncall"]],
        "waiting": True, "over": False}

    second = parley(processes, "post", room, "yes, roll back", "--as", "oncall", "--wait",
                    "--json")
    assert second["stop_reason"] == "queue_empty"
    assert [m["sender"] for m in second["messages"]][3:] == ["oncall", "dev", "sre"]
    assert parley(processes, "queue", room, "--json")["waiting"] is False


def test_a_coordinator_killed_mid_discussion_keeps_the_queue(processes, settings, queue):
    spec = RoomSpec.model_validate({
        "policy": {"kind": "mention", "everyone": ["a", "b", "c"], "call_timeout_s": 20},
        "agents": [{"name": name, "model": "scripted", "queue": queue,
                    "script": [{"content": text, "sleep": 1.0}]}
                   for name, text in (("a", "@b @c over to you"), ("b", "@User shall I?"),
                                      ("c", "(silent)"))]})
    processes.worker("-Q", queue, "-c", "4")
    doomed = processes.coordinator()
    client = Client(settings)
    room = client.create_room(spec)
    inbox_id = client.post(room, "@a start")
    wait_until(lambda: client.state(room).turn >= 2 and client.state(room).turn_open, 30,
               "the second turn to be open")
    processes.kill(doomed, signal.SIGKILL)
    processes.coordinator()

    result = client.wait(room, inbox_id, timeout_s=60)
    assert [(m.sender, m.content) for m in result.messages] == [
        ("User", "@a start"), ("a", "@b @c over to you"), ("b", "@User shall I?")]
    assert result.stop_reason is StopReason.WAITING_FOR_PERSON
    floor = mention.Floor.read(client.state(room).floor_state)
    assert (floor.queue, floor.asked, floor.waiting, floor.turns) == (
        [], [("b", "User")], True, 3)
    assert client.state(room).epoch >= 2
    for record in client.turns(room):
        decision = policies.replay(spec, record)
        assert (decision.winner, decision.stop) == (record.winner, record.stop_reason)
