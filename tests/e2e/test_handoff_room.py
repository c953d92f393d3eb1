"""Handoff rooms across real processes: a Celery worker answering the active agent's
calls, whose scripted transfers hand the floor on, and coordinators on the real Redis; one
of them killed by PID between a transfer and the target's turn."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest
import yaml

from parley.client import Client
from parley.coordinator import policies
from parley.shared.models import RoomSpec, StopReason
from parley.shared.records import answer_from_fields
from tests.support.commands import run_parley
from tests.support.polling import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.redis]

EXAMPLE = Path(__file__).parents[2] / "examples" / "rooms" / "handoff.yaml"
QUESTION = "Why was I charged $40 on March 3?"


def desk(queue: str, billing_sleep: float = 0.0) -> RoomSpec:
    """Triage hands the billing question to billing, which answers and hands back; triage
    then asks whether there is anything else."""
    def transfer(to: str, reason: str) -> dict[str, Any]:
        return {"tool_calls": [{"name": f"transfer_to_{to}", "arguments": {"reason": reason}}]}

    scripts = {
        "triage": [transfer("billing", "a charge"), {"content": "Passing you to billing."},
                   {"content": "Anything else I can help with?"}],
        "billing": [transfer("triage", "answered"),
                    {"content": "It was the renewal: refunded.", "sleep": billing_sleep}],
    }
    return RoomSpec.model_validate({
        "policy": {"kind": "handoff", "start": "triage", "call_timeout_s": 30},
        "agents": [{"name": name, "model": "scripted", "queue": queue, "script": script}
                   for name, script in scripts.items()],
    })


def test_triage_hands_to_billing_which_hands_back_and_every_turn_replays(
        processes, settings, queue):
    processes.worker("-Q", queue, "-c", "8")
    processes.coordinator()
    client = Client(settings)
    spec = desk(queue)

    result = client.run(spec, QUESTION, timeout_s=60)

    assert [(m.sender, m.content) for m in result.messages][1:] == [
        ("triage", "Passing you to billing."), ("billing", "It was the renewal: refunded."),
        ("triage", "Anything else I can help with?")]
    assert (result.status, result.stop_reason) == ("idle", StopReason.WAITING_FOR_PERSON)
    handoffs = [(e.model_dump()["from"], e.model_dump()["to"])
                for e in client.store.read_events(result.room) if e.type == "handoff"]
    assert handoffs == [("triage", "billing"), ("billing", "triage")]
    for record in client.turns(result.room):
        decision = policies.replay(spec, record)
        assert (decision.winner, decision.stop) == (record.winner, record.stop_reason)


def test_the_example_handoff_room_runs_offline_with_parley_run(processes, tmp_path, queue):
    processes.worker("-Q", queue, "-c", "8")
    processes.coordinator()
    data = yaml.safe_load(EXAMPLE.read_text())
    for agent in data["agents"]:
        agent["queue"] = queue
    spec_path = tmp_path / "handoff.yaml"
    spec_path.write_text(yaml.safe_dump(data))

    done = run_parley(processes.env, "run", str(spec_path), "--task", QUESTION)

    assert done.returncode == 0, done.stderr
    assert "triage handed to billing: a question about a charge" in done.stdout
    assert "billing handed to triage: the charge is explained and refunded" in done.stdout
    assert "waiting_for_person" in done.stdout


def test_a_coordinator_killed_between_a_transfer_and_the_targets_turn_is_replaced_and_the_target_speaks(
        processes, settings, queue):
    short_ttl = {"PARLEY_LEASE_TTL_S": "1"}
    spec = desk(queue, billing_sleep=2.0)
    processes.worker("-Q", queue, "-c", "8")
    first = processes.coordinator("--id", "first", env=short_ttl)
    client = Client(settings)
    room = client.create_room(spec)
    inbox_id = client.post(room, QUESTION)
    # The transfer is committed; billing's turn (2 s) is in flight.
    wait_until(lambda: client.state(room).floor_state.get("to") == "billing", 30,
               "triage's transfer to be committed")

    processes.kill(first, signal.SIGKILL)
    processes.coordinator("--id", "second", env=short_ttl)
    result = client.wait(room, inbox_id, timeout_s=60)

    assert result.stop_reason is StopReason.WAITING_FOR_PERSON
    assert [m.sender for m in result.messages] == ["User", "triage", "billing", "triage"]
    epochs = [record.epoch for record in client.turns(room)]
    assert epochs == sorted(epochs) and set(epochs) == {1, 2}
    # Each turn's calls went to one agent, and no call was answered twice.
    asked: dict[int, set[str]] = {}
    calls: list[tuple[str, int]] = []
    for _, fields in client.redis.xrange(client.store.keys.bids(room)):
        answer = answer_from_fields(fields)
        asked.setdefault(answer.turn, set()).add(answer.agent)
        calls.append((answer.agent, answer.call))
    assert asked == {1: {"triage"}, 2: {"billing"}, 3: {"triage"}}
    assert len(calls) == len(set(calls)), calls
    assert json.loads(client.state(room).floor_state["chain"])[-1][1:3] == ["billing", "triage"]
