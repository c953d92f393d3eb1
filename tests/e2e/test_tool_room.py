"""Agents that use tools across real processes: `parley worker`s offering the sample tools
(tests/support/tool_modules/sample.py), an LLM agent on the local OpenAI-compatible stub
driving a real litellm tool loop, a `parley coordinator`, the real Redis."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from parley.client import Client
from parley.shared.models import Answer, RoomSpec, ToolCallStatus
from parley.shared.settings import Settings
from tests.support.openai_stub import OpenAIStub, asks_tools, text, tool_messages
from tests.support.polling import wait_until
from tests.support.rooms import investigator_room

pytestmark = [pytest.mark.e2e, pytest.mark.redis]

KEY_ENV, KEY = "PARLEY_E2E_STUB_KEY", "sk-e2e-stub"
SAMPLE = "tests.support.tool_modules.sample"
TOOL_QUEUE = "parley-test-tools"


@pytest.fixture
def stub() -> Iterator[OpenAIStub]:
    with OpenAIStub(api_key=KEY) as server:
        yield server


def room(stub: OpenAIStub, queue: str, tools: list[str], timeout_s: float = 60,
         rounds: int = 5) -> RoomSpec:
    """A selector room: the scripted selector picks the Investigator (an LLM on the stub
    with ``tools``), then ends the run."""
    return RoomSpec.model_validate({
        "name": "tools",
        "policy": {"kind": "selector", "max_turns": 2, "call_timeout_s": timeout_s,
                   "selector": {"model": "scripted", "queue": queue,
                                "script": [{"content": "Investigator"},
                                           {"content": "TERMINATE"}]}},
        "agents": [{"name": "Investigator", "model": "openai/investigator", "queue": queue,
                    "api_base": stub.url, "api_key_env": KEY_ENV, "tools": tools,
                    "max_tool_rounds": rounds},
                   {"name": "Bob", "model": "scripted", "queue": queue, "script": []}],
    })


def worker_env(stub: OpenAIStub, runs: Path, **more: str) -> dict[str, str]:
    return {KEY_ENV: KEY, "PARLEY_WORKER_KEY_ENVS": KEY_ENV,
            "PARLEY_WORKER_ALLOWED_API_BASES": stub.url, "PARLEY_WORKER_TOOLS": SAMPLE,
            "PARLEY_TEST_TOOL_RUNS": str(runs), **more}


def offering(settings: Settings, *tools: str) -> Client:
    """A client once the live workers offer ``tools``: a room naming a tool is refused
    until a live worker offers it."""
    client = Client(settings)
    wait_until(lambda: set(tools) <= set(client.tool_catalog()), 60, f"the offer of {tools}")
    return client


def investigator_answer(client: Client, room_id: str):
    return next(bid for record in client.turns(room_id) for bid in record.bids
                if bid.agent == "Investigator")


def answers_of(client: Client, room_id: str, agent: str, at_least: int) -> list[Answer]:
    """The agent's answers in the room's answers stream once there are ``at_least``."""
    answers = [answer for _, answer in client.store.read_answers(room_id)
               if answer.agent == agent]
    return answers if len(answers) >= at_least else []


def test_a_litellm_agent_runs_parallel_tool_calls_and_reads_their_results(
        stub, processes, settings, queue, tmp_path):
    stub.script("investigator",
                asks_tools(("lookup", {"service": "db", "lines": 2}), ("shout", {"text": "hi"}),
                           prompt_tokens=100, completion_tokens=10),
                asks_tools(("broken", {}), prompt_tokens=120, completion_tokens=5),
                text("The db logs look fine.", prompt_tokens=150, completion_tokens=7))
    processes.worker("-Q", queue, "-c", "8", env=worker_env(stub, tmp_path / "runs"))
    processes.coordinator()
    client = offering(settings, "lookup", "shout", "broken")

    result = client.run(room(stub, queue, ["lookup", "shout", "broken"]), "Is the db ok?",
                        timeout_s=120)

    assert [m.content for m in result.messages][1:] == ["The db logs look fine."]
    answer = investigator_answer(client, result.room)
    assert [(c.tool, c.status, c.round, c.index) for c in answer.tool_calls] == [
        ("lookup", ToolCallStatus.OK, 0, 0), ("shout", ToolCallStatus.OK, 0, 1),
        ("broken", ToolCallStatus.ERROR, 1, 0)]
    first, second, last = stub.requests_for("investigator")
    assert [tool["function"]["name"] for tool in first.body["tools"]] == [
        "lookup", "shout", "broken"]
    assert first.body["tool_choice"] == "auto" and last.body["tool_choice"] == "auto"
    assert [m["content"] for m in tool_messages(second)] == ["> db line 1\n> db line 2", "> HI"]
    assert tool_messages(last)[2]["content"] == (
        "The tool failed:\n> RuntimeError: the disk is on fire")
    # Every model call of the loop counts in the answer, so in the turn's and room's totals.
    assert (answer.prompt_tokens, answer.completion_tokens) == (370, 22)
    assert client.state(result.room).totals()["prompt_tokens"] == 370
    events = [event.type for event in client.store.read_events(result.room)]
    assert events.count("tool_called") == events.count("tool_result") == 3


def test_the_round_cap_asks_for_the_text_with_tools_off(stub, processes, settings, queue,
                                                         tmp_path):
    again = asks_tools(("lookup", {"service": "db"}))
    stub.script("investigator", again, again, text("Stopping here."))
    processes.worker("-Q", queue, "-c", "8", env=worker_env(stub, tmp_path / "runs"))
    processes.coordinator()
    client = offering(settings, "lookup")
    result = client.run(room(stub, queue, ["lookup"], rounds=2), "Look twice", timeout_s=120)

    assert result.messages[-1].content == "Stopping here."
    requests = stub.requests_for("investigator")
    assert [r.body.get("tool_choice") for r in requests] == ["auto", "auto", "none"]


def test_a_worker_killed_while_a_tool_runs_does_not_run_it_again_and_the_model_hears_uncertain(
        stub, processes, settings, queue, tmp_path):
    runs = tmp_path / "runs"
    stub.script("investigator", asks_tools(("counted", {"label": "x"})),
                text("The result is unknown; I will not guess."))
    # The first worker's tool sleeps long; it is killed as soon as the tool started.
    doomed = processes.worker("-Q", queue, "-c", "4",
                              env=worker_env(stub, runs, PARLEY_TEST_TOOL_SLEEP_S="60"))
    processes.coordinator()
    client = offering(settings, "counted")
    room_id = client.create_room(room(stub, queue, ["counted"], timeout_s=20))
    posted = client.post(room_id, "Count once")
    wait_until(lambda: runs.exists() and runs.read_text() == "counted\n", 60, "the tool started")
    processes.kill(doomed)
    # It imports litellm while the phase runs out (seconds), not inside the re-ask's time.
    processes.worker("-Q", queue, "-c", "4",
                     env=worker_env(stub, runs, PARLEY_WORKER_PRELOAD_LITELLM="true"))

    result = client.wait(room_id, posted, timeout_s=120)

    assert result.messages[-1].content == "The result is unknown; I will not guess."
    assert runs.read_text() == "counted\n"  # it ran once, on the killed worker
    answer = investigator_answer(client, room_id)
    assert [(c.status, c.replayed) for c in answer.tool_calls] == [
        (ToolCallStatus.UNCERTAIN, False)]
    # The model was asked once for the tool call (replayed from the journal), once after.
    first, after = stub.requests_for("investigator")
    assert tool_messages(after)[0]["content"] == (
        "The result is unknown because the worker running the tool stopped:\n"
        "> the worker running this tool stopped before it returned")


def test_a_queue_tool_runs_on_the_worker_serving_its_queue(stub, processes, settings, queue,
                                                           tmp_path):
    runs = tmp_path / "runs"
    stub.script("investigator", asks_tools(("remote_echo", {"text": "ping"})), text("Echoed."))
    processes.worker("-Q", queue, "-c", "4", env=worker_env(stub, runs))
    tool_worker = processes.worker("-Q", TOOL_QUEUE, "-c", "2", env=worker_env(stub, runs))
    processes.coordinator()
    client = offering(settings, "remote_echo")

    result = client.run(room(stub, queue, ["remote_echo"]), "Echo", timeout_s=120)

    assert result.messages[-1].content == "Echoed."
    assert runs.read_text() == f"remote_echo {tool_worker.pid}\n"
    (call,) = investigator_answer(client, result.room).tool_calls
    assert (call.status, call.result) == (ToolCallStatus.OK, "remote ping")


def test_a_coordinator_killed_after_a_tool_ran_leaves_its_result_to_the_standby(
        processes, settings, queue, tmp_path):
    runs = tmp_path / "runs"
    # The model step after the tool is slow: the kill lands between the tool and the commit,
    # and the standby asks the call again before the killed coordinator's call answers.
    spec = investigator_room("tools-takeover", queue, {
        "model": "scripted", "tools": ["counted"],
        "script": [{"tool_calls": [{"name": "counted", "arguments": {"label": "x"}}]},
                   {"content": "Counted once.", "sleep": 5}]})
    short_ttl = {"PARLEY_LEASE_TTL_S": "1.5"}
    processes.worker("-Q", queue, "-c", "4",
                     env={"PARLEY_WORKER_TOOLS": SAMPLE, "PARLEY_TEST_TOOL_RUNS": str(runs)})
    doomed = processes.coordinator("--id", "doomed", env=short_ttl)
    client = offering(settings, "counted")
    room_id = client.create_room(spec)
    posted = client.post(room_id, "Count once")
    wait_until(lambda: (client.store.lease_holder(room_id) or "").startswith("doomed:"), 30,
               "the doomed coordinator to take the room")
    # Running before the kill, the standby takes the room a lease ttl after it, not a
    # process start later as well (which, on a loaded machine, outlasted the slow step).
    processes.coordinator("--id", "standby", env=short_ttl)
    wait_until(lambda: "standby" in dict(client.store.coordinators()), 30, "the standby")
    wait_until(lambda: "tool_result" in [e.type for e in client.store.read_events(room_id)],
               60, "the tool's result")
    processes.kill(doomed)
    assert client.messages(room_id)[1:] == []  # the turn had not committed

    result = client.wait(room_id, posted, timeout_s=60)

    assert [m.content for m in result.messages][1:] == ["Counted once."]
    assert [m.content for m in client.messages(room_id)].count("Counted once.") == 1
    assert runs.read_text() == "counted\n"  # it ran once, before the kill
    (call,) = investigator_answer(client, room_id).tool_calls
    assert (call.status, call.result) == (ToolCallStatus.OK, "counted x")
    # The standby asked the call again; that answer replayed the journal's result (the
    # killed coordinator's worker answered too: whichever came first was posted).
    replies = wait_until(lambda: answers_of(client, room_id, "Investigator", 2), 30,
                         "both answers of the call")
    assert sorted(a.tool_calls[0].replayed for a in replies) == [False, True]
    assert {a.tool_calls[0].result for a in replies} == {"counted x"}
    events = [event.type for event in client.store.read_events(room_id)]
    assert events.count("tool_called") == events.count("tool_result") == 1
