"""swarms' GroupChat interface, run on real coordinator and worker processes."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from parley import GroupChat, RunFailed
from parley.client import Client
from parley.shared.models import StopReason
from parley.swarms.groupchat import FIRST_TURN_SILENT, as_agent_spec
from parley.swarms.history import HISTORY_OUTPUT_TYPES
from tests.support.openai_stub import OpenAIStub, tool_call
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
    assert chat.spec.agents[0].model_dump(include={"name", "system_prompt", "model", "description",
                                                   "temperature", "max_tokens"}) == {
        "name": "Critic", "system_prompt": "Find flaws.", "model": "openai/gpt-4o-mini",
        "description": "finds flaws", "temperature": 0.3, "max_tokens": 256}


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


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    """What GroupChat warned, through the standard library's logging, in order."""
    return [record.getMessage() for record in caplog.records
            if record.name == "parley.groupchat" and record.levelno == logging.WARNING]


def test_a_failed_run_warns_and_raises_run_failed_or_returns_as_swarms(processes, settings, queue,
                                                                       caplog):
    processes.worker("-Q", queue)
    processes.coordinator()
    broken = [{"name": name, "model": "scripted", "queue": queue, "script": [{"error": "no key"}]}
              for name in ("Alpha", "Beta")]

    with pytest.raises(RunFailed) as raised:
        GroupChat(agents=broken, client=Client(settings)).run("plan")
    returned = GroupChat(agents=broken, output_type="list", raise_on_failure=False,
                         client=Client(settings)).run("plan")

    assert raised.value.stop_reason is StopReason.ALL_FAILED
    # One entry per distinct error, after the agents it failed.
    assert raised.value.stop_detail == "Alpha, Beta: ScriptedError: no key"
    assert warnings(caplog) == 2 * [
        "[dynamic-groupchat] Alpha failed to bid on turn 1: ScriptedError: no key",
        "[dynamic-groupchat] Beta failed to bid on turn 1: ScriptedError: no key",
        f"[dynamic-groupchat] {FIRST_TURN_SILENT}"]
    assert returned == [{"role": "User", "content": "plan"}]


def test_an_agent_failing_on_every_turn_is_warned_on_each_while_the_others_talk(
        processes, settings, queue, caplog):
    processes.worker("-Q", queue)
    processes.coordinator()
    keyless = {"name": "Keyless", "model": "scripted", "queue": queue,
               "script": 3 * [{"error": "no API key"}]}
    talker = {"name": "Talker", "model": "scripted", "queue": queue,
              "script": [{"score": 0.9, "message": "first"}, {"score": 0.9, "message": "second"}]}

    output = GroupChat(agents=[keyless, talker], recency_penalty=0.0, max_loops=3,
                       client=Client(settings)).run("plan")

    assert output == "first\nsecond"
    assert warnings(caplog) == [
        f"[dynamic-groupchat] Keyless failed to bid on turn {turn}: ScriptedError: no API key"
        for turn in (1, 2)]


def test_verbose_prints_replies_as_text_and_says_each_failed_bid(processes, settings, queue, capsys):
    processes.worker("-Q", queue)
    processes.coordinator()
    reply = "[/] is not markup, nor is [bold]this[/bold]; [red] stays"
    agents = [{"name": "Broken", "model": "scripted", "queue": queue, "script": [{"error": "down"}]},
              {"name": "Plain", "model": "scripted", "queue": queue,
               "script": [{"score": 0.9, "message": reply}]}]

    output = GroupChat(agents=agents, verbose=True, client=Client(settings)).run("[b]plan[/b]")

    assert output == reply
    printed = " ".join(capsys.readouterr().out.split())
    assert "[b]plan[/b]" in printed and reply in printed
    assert printed.index("Broken failed to bid on turn 1: ScriptedError: down") < printed.index(reply)


def test_a_swarms_agents_llm_base_url_is_where_its_calls_go_within_the_allow_list(
        processes, settings, queue):
    key_env, key = "PARLEY_E2E_GROUPCHAT_KEY", "sk-e2e-groupchat"
    with OpenAIStub(api_key=key) as allowed, OpenAIStub() as elsewhere:
        allowed.script("local", tool_call(0.9, "From the local model."), tool_call(0.0, ""))
        processes.worker("-Q", queue, env={key_env: key, "PARLEY_WORKER_KEY_ENVS": key_env,
                                           "PARLEY_WORKER_ALLOWED_API_BASES": allowed.url})
        processes.coordinator()
        local = SimpleNamespace(agent_name="Local", system_prompt="", model_name="openai/local",
                                llm_base_url=allowed.url, api_key_env=key_env)
        other = SimpleNamespace(agent_name="Other", system_prompt="", model_name="openai/other",
                                llm_base_url=elsewhere.url, api_key_env=key_env)
        # Swarms agents name no queue: the test's workers serve its own.
        specs = [as_agent_spec(agent).model_copy(update={"queue": queue}) for agent in (local, other)]

        output = GroupChat(agents=specs, bid_timeout_s=60, client=Client(settings)).run("plan")

        assert output == "From the local model."
        assert len(allowed.requests_for("local")) == 2 and allowed.requests_carrying(key)
        # The other base got its calls, but not the key: it is not on the allow-list.
        assert len(elsewhere.requests_for("other")) == 2
        assert elsewhere.requests_carrying(key) == []


def test_a_swarms_agent_with_an_api_key_is_refused_before_any_room_is_made(settings):
    keyed = SimpleNamespace(agent_name="Keyed", system_prompt="", model_name="openai/gpt-4o-mini",
                            llm_api_key="sk-never-sent")
    other = SimpleNamespace(agent_name="Other", system_prompt="", model_name="openai/gpt-4o-mini")
    client = Client(settings)

    with pytest.raises(ValueError, match=r"^agent 'Keyed': llm_api_key: [^\n]*keys stay on the "
                                         r"workers[^\n]*api_key_env") as refused:
        GroupChat(agents=[keyed, other], client=client)

    assert "sk-never-sent" not in str(refused.value)
    assert client.rooms() == []


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
