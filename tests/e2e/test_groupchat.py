"""swarms' GroupChat interface, run on real coordinator and worker processes."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from structlog.testing import capture_logs

from parley import GroupChat, RunFailed
from parley.client import Client
from parley.shared.models import StopReason
from parley.swarms.groupchat import FIRST_TURN_SILENT
from parley.swarms.history import HISTORY_OUTPUT_TYPES
from tests.support.rooms import rotating_scripts

pytestmark = [pytest.mark.e2e, pytest.mark.redis]


FIXTURE = json.loads((Path(__file__).parents[1] / "fixtures" / "swarms_outputs.json")
                     .read_text(encoding="utf-8"))
SWARMS_CHATS = {case["name"]: case for case in FIXTURE["cases"] if case["kind"] == "groupchat"}


def agents(queue: str, turns: int, sleep: float = 0.0) -> list[dict]:
    return [{"name": name, "model": "scripted", "script": script, "queue": queue}
            for name, script in rotating_scripts(3, turns, sleep).items()]


def replayed_agents(case: dict[str, Any], queue: str) -> list[dict]:
    """The swarms case's agents, each scripted with its bids turn by turn."""
    return [{"name": name, "model": "scripted", "queue": queue,
             "script": [{"score": turn[name][0], "message": turn[name][1]} for turn in case["turns"]]}
            for name in case["agents"]]


def swarms_value(output: dict[str, Any]) -> Any:
    return tuple(output["value"]) if output["type"] == "tuple" else output["value"]


def test_run_returns_the_replies_and_streams_every_message(processes, settings, queue):
    processes.worker("-Q", queue)
    processes.coordinator()
    chat = GroupChat(agents=agents(queue, 2), max_loops=10, client=Client(settings))
    chunks: list[tuple[str, str, bool]] = []

    output = chat.run("plan it", streaming_callback=lambda *c: chunks.append(c))

    assert output == "agent1 on turn 1\nagent2 on turn 2"
    finals = [sender for sender, _, final in chunks if final]
    assert finals == ["User", "agent1", "agent2"]
    assert "".join(c for s, c, _ in chunks if s == "agent1") == "agent1 on turn 1"


def test_max_loops_counts_the_task(processes, settings, queue):
    processes.worker("-Q", queue)
    processes.coordinator()
    chat = GroupChat(agents=agents(queue, 9), max_loops=3, output_type="list",
                     client=Client(settings))

    assert [m["role"] for m in chat.run("go")] == ["User", "agent1", "agent2"]


def test_run_batch_gives_each_task_its_own_room(processes, settings, queue):
    processes.worker("-Q", queue, "-c", "16")
    processes.coordinator()
    chat = GroupChat(agents=agents(queue, 1), output_type="dict", client=Client(settings))

    outputs = chat.run_batch(["one", "two", "three"])

    assert [rows[0]["content"] for rows in outputs] == ["one", "two", "three"]
    assert all(len(rows) == 2 for rows in outputs)
    assert len(set(chat.rooms)) == 3


def test_swarms_style_agent_objects_are_accepted():
    swarm_agent = SimpleNamespace(agent_name="Critic", system_prompt="Find flaws.",
                                  model_name="openai/gpt-4o-mini", agent_description="finds flaws",
                                  temperature=0.3, max_tokens=256)
    other = SimpleNamespace(agent_name="Builder", system_prompt="", model_name="openai/gpt-4o-mini")
    chat = GroupChat(agents=[swarm_agent, other], client=Client())
    assert chat.spec.agents[0].model_dump(include={"name", "system_prompt", "model", "role",
                                                   "temperature", "max_tokens"}) == {
        "name": "Critic", "system_prompt": "Find flaws.", "model": "openai/gpt-4o-mini",
        "role": "finds flaws", "temperature": 0.3, "max_tokens": 256}


@pytest.mark.parametrize("name", sorted(SWARMS_CHATS))
def test_every_output_type_is_what_swarms_returned_for_the_same_bids(processes, settings, queue, name):
    processes.worker("-Q", queue, "-c", "4")
    processes.coordinator()
    case = SWARMS_CHATS[name]
    params = case["params"]

    for output_type in HISTORY_OUTPUT_TYPES:
        chat = GroupChat(name=name, agents=replayed_agents(case, queue), output_type=output_type,
                         client=Client(settings), **params)
        output = chat.run(case["task"])

        want = case["outputs"][output_type]
        assert type(output).__name__ == want["type"], output_type
        assert output == swarms_value(want), output_type
        assert chat.conversation.conversation_history == case["conversation_history"]


def test_a_failed_run_warns_and_raises_run_failed_or_returns_as_swarms(processes, settings, queue):
    processes.worker("-Q", queue)
    processes.coordinator()
    broken = [{"name": name, "model": "scripted", "queue": queue, "script": [{"error": "no key"}]}
              for name in ("Alpha", "Beta")]

    with capture_logs() as logs, pytest.raises(RunFailed) as raised:
        GroupChat(agents=broken, client=Client(settings)).run("plan")
    returned = GroupChat(agents=broken, output_type="list", raise_on_failure=False,
                         client=Client(settings)).run("plan")

    assert raised.value.stop_reason is StopReason.ALL_FAILED
    assert raised.value.stop_detail == "Alpha: ScriptedError: no key; Beta: ScriptedError: no key"
    assert [log["event"] for log in logs if log["log_level"] == "warning"] == [
        f"[dynamic-groupchat] {FIRST_TURN_SILENT}"]
    assert returned == [{"role": "User", "content": "plan"}]


def test_run_batch_keeps_task_order_and_never_interleaves_callbacks(processes, settings, queue):
    processes.worker("-Q", queue, "-c", "8")
    processes.coordinator()
    tasks = ["one", "two", "three"]
    # Slow enough that the three rooms' turns overlap.
    chat = GroupChat(agents=agents(queue, 3, sleep=0.05), max_loops=4, output_type="list",
                     client=Client(settings))
    messages: list[str] = []
    words: list[str] = []

    def on_chunk(sender: str, chunk: str, final: bool) -> None:
        words.append(chunk)
        if final:
            messages.append(f"{sender}: {''.join(words)}")
            words.clear()

    outputs = chat.run_batch(tasks, streaming_callback=on_chunk)

    replies = ["agent1: agent1 on turn 1", "agent2: agent2 on turn 2", "agent0: agent0 on turn 3"]
    assert messages == [line for task in tasks for line in [f"User: {task}", *replies]]
    assert [output[0]["content"] for output in outputs] == tasks
    assert [chat.client.messages(room)[0].content for room in chat.rooms] == tasks
