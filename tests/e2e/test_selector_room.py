"""Selector rooms (seed 002) across real processes: a Celery worker answering select and
speak calls, and a coordinator playing each turn's phases, on the real Redis."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from parley.client import Client
from parley.coordinator import policies
from parley.shared.models import RoomSpec, StopReason
from tests.support.commands import run_parley

pytestmark = [pytest.mark.e2e, pytest.mark.redis]

EXAMPLE = Path(__file__).parents[2] / "examples" / "rooms" / "selector.yaml"


def seed_room(queue: str) -> RoomSpec:
    """Seed 002's test: the selector answers planner, budget, planner, TERMINATE; the
    participants answer fixed text without TERMINATE."""
    return RoomSpec.model_validate({
        "policy": {"kind": "selector", "call_timeout_s": 30,
                   "selector": {"model": "scripted", "queue": queue, "script": [
                       {"content": pick} for pick in ("planner", "budget", "planner", "TERMINATE")]}},
        "agents": [{"name": name, "role": f"the {name}", "model": "scripted", "queue": queue,
                    "script": [{"content": f"{name} fixed text"}] * 3}
                   for name in ("planner", "local", "budget")],
    })


def test_seed_002_thread_holds_four_messages_in_the_selectors_order(processes, settings, queue):
    processes.worker("-Q", queue, "-c", "8")
    processes.coordinator()
    client = Client(settings)
    spec = seed_room(queue)

    result = client.run(spec, "Plan a 3-day Tokyo trip under $1,500", timeout_s=60)

    assert [m.sender for m in result.messages] == ["User", "planner", "budget", "planner"]
    assert (result.status, result.stop_reason) == ("idle", StopReason.TERMINATE)
    assert result.answer == "planner fixed text"
    for record in client.turns(result.room):
        decision = policies.replay(spec, record)
        assert (decision.winner, decision.stop) == (record.winner, record.stop_reason)


def test_the_example_selector_room_runs_offline_with_parley_run(processes, tmp_path, queue):
    processes.worker("-Q", queue, "-c", "8")
    processes.coordinator()
    data = yaml.safe_load(EXAMPLE.read_text())
    for agent in [*data["agents"], data["policy"]["selector"]]:
        agent["queue"] = queue
    spec_path = tmp_path / "selector.yaml"
    spec_path.write_text(yaml.safe_dump(data))

    done = run_parley(processes.env, "run", str(spec_path), "--task", "Plan Tokyo", "--json")

    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert [m["sender"] for m in result["messages"]] == [
        "User", "planner", "local", "budget", "planner"]
    assert result["stop_reason"] == "terminate"
    assert result["answer"].endswith("total $1,380.")
