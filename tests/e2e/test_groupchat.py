"""swarms' GroupChat interface, run on real coordinator and worker processes."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from parley import GroupChat
from parley.client import Client
from tests.support.rooms import rotating_scripts

pytestmark = [pytest.mark.e2e, pytest.mark.redis]


def agents(queue: str, turns: int) -> list[dict]:
    return [{"name": name, "model": "scripted", "script": script, "queue": queue}
            for name, script in rotating_scripts(3, turns).items()]


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
                                  model_name="openai/gpt-4o-mini")
    other = SimpleNamespace(agent_name="Builder", system_prompt="", model_name="openai/gpt-4o-mini")
    chat = GroupChat(agents=[swarm_agent, other], client=Client())
    assert chat.spec.agents[0].model_dump(include={"name", "system_prompt", "model"}) == {
        "name": "Critic", "system_prompt": "Find flaws.", "model": "openai/gpt-4o-mini"}
