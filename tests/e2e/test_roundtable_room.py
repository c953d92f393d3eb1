"""Round-table rooms (seed 004) across real processes: a Celery worker answering panel and
moderate calls, and coordinators playing the debate on the real Redis; one of them killed
mid-debate."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest
import yaml

from parley.client import Client
from parley.coordinator import policies
from parley.shared.models import RoomSpec, RoomStatus, StopReason
from parley.shared.records import answer_from_fields
from tests.chaos.harness import check_room, expected_messages, turns_asked_again
from tests.support.commands import run_parley
from tests.support.observe import log_events
from tests.support.polling import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.redis]

EXAMPLE = Path(__file__).parents[2] / "examples" / "rooms" / "roundtable.yaml"
QUESTION = "Is the Sony WH-1000XM5 worth it?"


def table(queue: str, scripts: dict[str, list[dict[str, Any]]], **policy: Any) -> RoomSpec:
    """A round-table of the scripted agents in ``scripts`` (in order), the last one the
    moderator."""
    return RoomSpec.model_validate({
        "policy": {"kind": "roundtable", "moderator": list(scripts)[-1], "call_timeout_s": 30,
                   **policy},
        "agents": [{"name": name, "role": f"the {name}", "model": "scripted", "queue": queue,
                    "script": script} for name, script in scripts.items()],
    })


def test_seed_004_two_panelists_in_order_then_the_verdict(processes, settings, queue):
    processes.worker("-Q", queue, "-c", "8")
    processes.coordinator()
    client = Client(settings)
    spec = table(queue, {"value": [{"content": "Strong price for the feature set."}],
                         "quality": [{"content": "Build quality is excellent."}],
                         "Moderator": [{"content": "Verdict: worth it."}]})

    result = client.run(spec, QUESTION, timeout_s=60)

    assert [(m.sender, m.content) for m in result.messages] == [
        ("User", QUESTION), ("value", "Strong price for the feature set."),
        ("quality", "Build quality is excellent."), ("Moderator", "Verdict: worth it.")]
    assert (result.status, result.stop_reason, result.answer) == (
        RoomStatus.IDLE, StopReason.VERDICT, "Verdict: worth it.")
    for record in client.turns(result.room):
        decision = policies.replay(spec, record)
        assert (decision.winner, decision.stop) == (record.winner, record.stop_reason)


def test_seed_004_a_panelist_that_raises_is_contained_and_logged(processes, settings, queue):
    processes.worker("-Q", queue, "-c", "8")
    processes.coordinator()
    client = Client(settings)
    spec = table(queue, {"value": [{"error": "pricing service down"}],
                         "quality": [{"content": "Solid build."}],
                         "Moderator": [{"content": "Verdict: buy."}]})

    result = client.run(spec, QUESTION, timeout_s=60)

    assert [(m.sender, m.content) for m in result.messages][1:] == [
        ("value", "(value could not respond: ScriptedError: pricing service down)"),
        ("quality", "Solid build."), ("Moderator", "Verdict: buy.")]
    assert result.stop_reason is StopReason.VERDICT
    failed = [(e["room"], e["agent"], e["error_kind"]) for e in log_events(processes,
                                                                         "panelist_failed")]
    assert failed == [(result.room, "value", "scripted")]


def test_two_rounds_then_a_failing_moderator_ends_the_run_failed(processes, settings, queue):
    processes.worker("-Q", queue, "-c", "8")
    processes.coordinator()
    client = Client(settings)
    spec = table(queue, {"value": [{"content": "v1"}, {"content": "v2"}],
                         "quality": [{"content": "q1"}, {"content": "q2"}],
                         "Moderator": [{"error": "model overloaded"}]}, rounds=2)

    result = client.run(spec, QUESTION, timeout_s=60)

    assert [(m.sender, m.content) for m in result.messages][1:] == [
        ("value", "v1"), ("quality", "q1"), ("value", "v2"), ("quality", "q2")]
    assert (result.status, result.stop_reason) == (RoomStatus.FAILED,
                                                   StopReason.MODERATOR_FAILED)
    assert result.stop_detail == "Moderator: ScriptedError: model overloaded"
    assert result.answer is None


def test_the_example_roundtable_runs_offline_with_parley_run(processes, tmp_path, queue):
    processes.worker("-Q", queue, "-c", "8")
    processes.coordinator()
    data = yaml.safe_load(EXAMPLE.read_text())
    for agent in data["agents"]:
        agent["queue"] = queue
    spec_path = tmp_path / "roundtable.yaml"
    spec_path.write_text(yaml.safe_dump(data))

    done = run_parley(processes.env, "run", str(spec_path), "--task", QUESTION, "--json")

    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert [m["sender"] for m in result["messages"]] == [
        "User", "Value", "Quality", "Value", "Quality", "Moderator"]
    assert result["stop_reason"] == "verdict"
    assert result["answer"].startswith("Verdict: worth it, best bought on sale.")


def test_a_coordinator_killed_mid_debate_is_replaced_and_the_debate_resumes_where_it_was(
        processes, settings, queue):
    short_ttl = {"PARLEY_LEASE_TTL_S": "1"}
    # Each panelist takes 0.3 s per turn: the kill lands while a turn is in flight.
    scripts = {name: [{"content": f"{name} in round {r}", "sleep": 0.3} for r in range(1, 4)]
               for name in ("value", "quality", "price")}
    spec = table(queue, {**scripts, "Moderator": [{"content": "Verdict: buy."}]}, rounds=3)
    processes.worker("-Q", queue, "-c", "8")
    first = processes.coordinator("--id", "first", env=short_ttl)
    client = Client(settings)
    room = client.create_room(spec)
    inbox_id = client.post(room, QUESTION)
    wait_until(lambda: len(client.messages(room)) >= 4, 30, "the debate to be under way")

    processes.kill(first, signal.SIGKILL)
    processes.coordinator("--id", "second", env=short_ttl)
    result = client.wait(room, inbox_id, timeout_s=60)

    assert result.stop_reason is StopReason.VERDICT
    check = check_room(client.store, room, spec, expected_messages(spec, QUESTION),
                       turns_asked_again(processes).get(room, ()), StopReason.VERDICT)
    assert check.takeovers == 1
    assert [m.sender for m in result.messages] == [
        "User", *(["value", "quality", "price"] * 3), "Moderator"]
    epochs = [record.epoch for record in client.turns(room)]
    assert epochs == sorted(epochs) and set(epochs) == {1, 2}
    # Whoever asked, each turn's calls went to one agent: the position never moved twice.
    asked: dict[int, set[str]] = {}
    for _, fields in client.redis.xrange(client.store.keys.bids(room)):
        answer = answer_from_fields(fields)
        asked.setdefault(answer.turn, set()).add(answer.agent)
    assert all(len(agents) == 1 for agents in asked.values()), asked
