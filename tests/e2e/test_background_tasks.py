"""Background tasks across real processes (seed 003, "Talking and working: tasks"): a task
runs off the floor while the room goes on, its result comes back by relay or post exactly
once, and a cancel or a worker killed mid-task is told to the room."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
import yaml

from parley.client import Client
from parley.shared.models import RoomSpec
from parley.shared.store import RoomNotFound, TaskRoomRefused
from parley.shared.tasks import TaskRefused
from tests.support.commands import run_parley
from tests.support.observe import log_events, tasks_unfinished
from tests.support.openai_stub import OpenAIStub, text
from tests.support.polling import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.redis]

EXAMPLE = Path(__file__).parents[2] / "examples" / "rooms" / "background.yaml"
SAMPLE = "tests.support.tool_modules.sample"


def room_spec(queue: str, hand_back: str, research: list[dict], lead: list[dict],
              researcher: dict | None = None, max_s: float = 3600.0) -> RoomSpec:
    """A discussion room: lead's tasks (of ``max_s`` each) are worked by researcher (on
    ``queue`` unless its fields say otherwise); helper answers quickly."""
    return RoomSpec.model_validate({
        "policy": {"kind": "mention", "call_timeout_s": 20},
        "agents": [
            {"name": "lead", "model": "scripted", "queue": queue, "script": lead,
             "background": {"hand_back": hand_back, "worker": "researcher", "max_s": max_s}},
            {"name": "helper", "model": "scripted", "queue": queue,
             "script": [{"content": "Refunds take 3 days."}]},
            {"name": "researcher", "model": "scripted", "queue": queue, "script": research,
             **(researcher or {})}]})


def said(client: Client, room: str) -> list[tuple[str, str]]:
    return [(m.sender, m.content) for m in client.messages(room)]


def test_a_relayed_task_runs_off_the_floor_and_its_agent_says_the_result(processes, settings,
                                                                         queue):
    processes.worker("-Q", queue, "-c", "4")
    processes.coordinator()
    client = Client(settings)
    room = client.create_room(room_spec(
        queue, "relay", [{"content": "42 tickets; 3 about refunds.", "sleep": 3.0}],
        [{"content": "Done: of 42 tickets, 3 are about refunds."}]))
    task = client.start_task(room, "lead", "Go through every support ticket")
    wait_until(lambda: client.tasks(room)[0].status == "running", 20, "the task to run")
    client.post(room, "@helper how long do refunds take?")
    wait_until(lambda: ("helper", "Refunds take 3 days.") in said(client, room), 20,
               "helper's answer")
    assert client.tasks(room)[0].status == "running"  # answered in its turn, not after
    wait_until(lambda: len(said(client, room)) == 3, 30, "lead's relay")
    assert said(client, room)[2] == ("lead", "Done: of 42 tickets, 3 are about refunds.")
    done = client.tasks(room)[0]
    assert (done.id, done.status, done.result) == (task.id, "done", "42 tickets; 3 about refunds.")
    types = [event.type for event in client.store.read_events(room)]
    assert types.count("task_started") == 1 and types.count("task_finished") == 1


def test_a_posted_result_names_its_worker_and_a_cancel_is_told(processes, settings, queue):
    processes.worker("-Q", queue, "-c", "4")
    processes.coordinator()
    client = Client(settings)
    room = client.create_room(room_spec(
        queue, "post", [{"content": "- @helper ticket 1\n- ticket 2"},
                        {"content": "never", "sleep": 60.0}], []))
    client.start_task(room, "lead", "List the tickets")
    wait_until(lambda: len(said(client, room)) == 1, 30, "the posted result")
    posted = client.messages(room)[0]
    assert (posted.sender, posted.content, posted.worker) == (
        "lead", "- @helper ticket 1\n- ticket 2", "researcher")
    # The names a posted result carries ask no one: helper is not called.
    assert client.state(room).status.value == "idle"
    slow = client.start_task(room, "lead", "Read every log")
    wait_until(lambda: client.tasks(room)[1].status == "running", 20, "the task to run")
    client.cancel_task(slow.short_id)
    wait_until(lambda: len(said(client, room)) == 2, 30, "the cancel's note")
    assert client.tasks(room)[1].status == "cancelled"
    assert said(client, room)[1] == ("lead", f"(task {slow.short_id} was cancelled)")


def test_a_worker_killed_mid_task_fails_it_and_the_agent_says_so(processes, settings, queue):
    env = {"PARLEY_TASK_HEARTBEAT_S": "0.5"}
    worker = processes.worker("-Q", queue, "-c", "4", env=env)
    processes.coordinator(env=env)
    client = Client(settings)
    room = client.create_room(room_spec(
        queue, "relay", [{"content": "never", "sleep": 60.0}],
        [{"content": "The ticket review failed: its worker stopped."}]))
    posting = client.create_room(room_spec(queue, "post", [{"content": "never", "sleep": 60.0}],
                                           []))
    client.start_task(room, "lead", "Go through every support ticket")
    posted = client.start_task(posting, "lead", "List every ticket")
    wait_until(lambda: [client.tasks(r)[0].status for r in (room, posting)] == ["running"] * 2,
               20, "the tasks to run")
    processes.kill(worker, signal.SIGKILL)
    wait_until(lambda: client.tasks(room)[0].status == "failed", 20, "the task to fail")
    assert "heartbeat" in client.tasks(room)[0].error
    # post: a short note, with no worker needed
    wait_until(lambda: said(client, posting), 20, "the failure's note")
    assert said(client, posting) == [
        ("lead", f"(task {posted.short_id} failed: its worker stopped answering (its "
                 "heartbeat lapsed))")]
    processes.worker("-Q", queue, "-c", "4", env=env)
    wait_until(lambda: said(client, room), 30, "lead to say so")
    assert said(client, room) == [("lead", "The ticket review failed: its worker stopped.")]


def test_the_agents_tool_starts_a_task_and_a_worker_starts_none_of_its_own(processes,
                                                                           settings, queue):
    processes.worker("-Q", queue, "-c", "4")
    processes.coordinator()
    client = Client(settings)
    research = [{"tool_calls": [{"name": "work_in_background",
                                 "arguments": {"what": "and more"}}]},
                {"content": "Checkout fails on the CA tax rule.", "sleep": 1.0}]
    lead = [{"tool_calls": [{"name": "work_in_background",
                             "arguments": {"what": "Why do Canadian checkouts fail?"}}]},
            {"content": "On it."},
            {"content": "Found it: the CA tax rule breaks checkout."}]
    room = client.create_room(room_spec(queue, "relay", research, lead))
    client.post(room, "@lead why do Canadian checkouts fail?")
    wait_until(lambda: len(said(client, room)) >= 3, 40, "lead's relay")
    assert [sender for sender, _ in said(client, room)] == ["User", "lead", "lead"]
    assert said(client, room)[2][1] == "Found it: the CA tax rule breaks checkout."
    tasks = client.tasks(room)
    assert [(task.agent, task.by, task.status) for task in tasks] == [("lead", "lead", "done")]
    assert tasks[0].instruction == "Why do Canadian checkouts fail?"
    # The turn tells it started the task (`parley turns`, `parley run`).
    started = client.messages(room)[1].tool_calls
    assert [(call.tool, call.result) for call in started] == [
        ("work_in_background", f"task {tasks[0].short_id} started")]


def test_a_coordinator_killed_while_a_task_runs_and_as_it_comes_back_loses_nothing(
        processes, settings, queue):
    processes.worker("-Q", queue, "-c", "4")
    doomed = processes.coordinator()
    client = Client(settings)
    room = client.create_room(room_spec(
        queue, "post", [{"content": "first result", "sleep": 2.0},
                        {"content": "second result", "sleep": 2.0}], []))
    client.start_task(room, "lead", "first")
    wait_until(lambda: client.tasks(room)[0].status == "running", 20, "the task to run")
    processes.kill(doomed, signal.SIGKILL)
    client.start_task(room, "lead", "second")  # queued while no coordinator runs
    successor = processes.coordinator()
    wait_until(lambda: [t.status for t in client.tasks(room)] == ["done", "running"], 30,
               "the first done, the second running")
    processes.kill(successor, signal.SIGKILL)
    processes.coordinator()
    wait_until(lambda: len(said(client, room)) == 2, 30, "both results posted")
    assert sorted(content for _, content in said(client, room)) == [
        "first result", "second result"]
    assert [m.seq for m in client.messages(room)] == [1, 2]


def test_the_background_example_room_answers_billing_before_the_relay(processes, settings,
                                                                       queue):
    processes.worker("-Q", queue, "-c", "4")
    processes.coordinator()
    data = yaml.safe_load(EXAMPLE.read_text())
    for agent in data["agents"]:
        agent["queue"] = queue
    client = Client(settings)
    room = client.create_room(RoomSpec.model_validate(data))
    client.post(room, "@support go through today's tickets. @billing how long do refunds take?")
    wait_until(lambda: len(said(client, room)) == 4, 40, "support's relay")
    assert [sender for sender, _ in said(client, room)] == ["User", "support", "billing",
                                                             "support"]
    assert said(client, room)[3][1].startswith("Done with today's tickets")
    assert [task.worker for task in client.tasks(room)] == ["ticket-reader"]


def test_a_task_works_a_journalled_tool_in_its_own_room_listed_and_deleted_with_its_parent(
        processes, settings, queue, tmp_path):
    runs = tmp_path / "runs"
    processes.worker("-Q", queue, "-c", "4",
                     env={"PARLEY_WORKER_TOOLS": SAMPLE, "PARLEY_TEST_TOOL_RUNS": str(runs)})
    processes.coordinator()
    client = Client(settings)
    wait_until(lambda: "counted" in client.tool_catalog(), 60, "the offer of counted")
    spec = room_spec(queue, "post", [
        {"tool_calls": [{"name": "counted", "arguments": {"label": "tickets"}}]},
        {"content": "Counted the tickets: 42."}], [])
    spec = spec.model_copy(update={"agents": [
        agent.model_copy(update={"tools": ["counted"]}) if agent.name == "researcher" else agent
        for agent in spec.agents]})
    room = client.create_room(spec)
    task = client.start_task(room, "lead", "Count the tickets")
    wait_until(lambda: said(client, room), 30, "the posted result")
    assert said(client, room) == [("lead", "Counted the tickets: 42.")]
    assert runs.read_text() == "counted\n"
    child = f"{room}.task-{task.short_id}"
    # The task's room: its conversation is the instruction and the answer, its tool calls
    # journalled there and not in the parent.
    assert [(m.sender, m.content) for m in client.messages(child)] == [
        ("User", "Count the tickets"), ("researcher", "Counted the tickets: 42.")]
    journal = client.store.redis.hgetall(client.store.keys.tools(child))
    assert any(b"counted tickets" in value for value in journal.values())
    assert not client.store.redis.exists(client.store.keys.tools(room))
    # Listed with its parent, by the Client and by `parley rooms`.
    by_room = {summary.room: summary for summary in client.rooms()}
    assert by_room[child].parent == room and by_room[room].children == [child]
    shown = run_parley(processes.env, "rooms", "show", room)
    assert f"task rooms: {child}" in shown.stdout, shown.stderr
    listed = run_parley(processes.env, "rooms", "list")
    assert f"(task of {room})" in listed.stdout.replace("\n", ""), listed.stderr
    # It runs no turns: a post is refused, naming the parent; no coordinator ever took it.
    with pytest.raises(TaskRoomRefused, match=f"post into {room}"):
        client.post(child, "hello")
    assert client.store.lease_holder(child) is None and client.state(child).run == 0
    posted = run_parley(processes.env, "post", child, "hello")
    assert posted.returncode != 0 and f"post into {room}" in posted.stderr
    # Deleted with its parent.
    client.delete(room)
    with pytest.raises(RoomNotFound):
        client.state(child)
    assert child not in {summary.room for summary in client.rooms()}


def test_a_task_room_starts_no_task_of_its_own(processes, settings, queue):
    processes.worker("-Q", queue, "-c", "4")
    processes.coordinator()
    client = Client(settings)
    room = client.create_room(room_spec(queue, "post", [{"content": "done"}], []))
    task = client.start_task(room, "lead", "Do it")
    wait_until(lambda: said(client, room), 30, "the posted result")
    child = f"{room}.task-{task.short_id}"
    with pytest.raises(TaskRefused, match="a task starts no task of its own"):
        client.start_task(child, "researcher", "and more")
    started = run_parley(processes.env, "task", "start", child, "researcher", "and more")
    assert started.returncode != 0 and "starts no task of its own" in started.stderr
    assert client.tasks(child) == []


def test_a_task_cancelled_while_no_worker_runs_is_revoked_never_run_and_told(
        processes, settings, queue, real_redis):
    processes.coordinator()
    client = Client(settings)
    room = client.create_room(room_spec(queue, "relay", [{"content": "never"}],
                                        [{"content": "The ticket review was cancelled."}]))
    task = client.start_task(room, "lead", "Go through every support ticket")
    wait_until(lambda: client.tasks(room)[0].sent, 20, "the task sent to its queue")
    assert client.cancel_task(task.short_id).status == "cancelled"
    wait_until(lambda: client.tasks(room)[0].revoked, 20, "the coordinator's revoke")
    processes.worker("-Q", queue, "-c", "4")
    wait_until(lambda: said(client, room), 30, "lead to say so")
    assert said(client, room) == [("lead", "The ticket review was cancelled.")]
    # The worker took the message off the queue and never ran it: a worker that heard the
    # revoke drops it, one started after it finds the cancel flag at its claim.
    wait_until(lambda: tasks_unfinished(real_redis, queue) == 0, 30, "the message consumed")
    cancelled = client.tasks(room)[0]
    assert (cancelled.status, cancelled.result) == ("cancelled", "")
    assert not real_redis.hexists(client.store.keys.tasks(room), f"{task.id}:running_at")
    assert log_events(processes, "task_running", room) == []
    assert len(log_events(processes, "task_revoked", room)) == 1


def test_a_task_no_worker_takes_within_its_max_s_times_out_and_is_told(
        processes, settings, queue, real_redis):
    tasks_queue = f"{queue}-tasks"  # no worker serves it until the task has timed out
    processes.coordinator()
    client = Client(settings)
    room = client.create_room(room_spec(
        queue, "relay", [{"content": "never"}], [{"content": "Nobody got to the review."}],
        {"queue": tasks_queue}, max_s=2.0))
    client.start_task(room, "lead", "Go through every support ticket")
    wait_until(lambda: client.tasks(room)[0].status == "timed_out", 30, "the task swept")
    swept = client.tasks(room)[0]
    assert swept.error == "no worker took it within its max_s"
    processes.worker("-Q", f"{queue},{tasks_queue}", "-c", "4")
    wait_until(lambda: said(client, room), 30, "lead to say so")
    assert said(client, room) == [("lead", "Nobody got to the review.")]
    # The message expired with the task: the worker that reads it later runs nothing.
    wait_until(lambda: tasks_unfinished(real_redis, tasks_queue) == 0, 30, "the message read")
    assert log_events(processes, "task_running", room) == []
    assert client.tasks(room)[0].status == "timed_out"


def test_a_revoked_task_waiting_behind_a_busy_worker_is_dropped_unstarted(
        processes, settings, queue, real_redis):
    env = {"PARLEY_TASK_HEARTBEAT_S": "0.5"}
    tasks_queue = f"{queue}-tasks"
    processes.worker("-Q", queue, "-c", "2", env=env)
    processes.worker("-Q", tasks_queue, "-c", "1", env=env)  # one task at a time
    processes.coordinator(env=env)
    client = Client(settings)
    room = client.create_room(room_spec(
        queue, "post", [{"content": "never", "sleep": 60.0}, {"content": "never either"}], [],
        {"queue": tasks_queue}))
    busy = client.start_task(room, "lead", "Read every log")
    wait_until(lambda: client.tasks(room)[0].status == "running", 20, "the first task to run")
    waiting = client.start_task(room, "lead", "Then read the metrics")
    wait_until(lambda: client.tasks(room)[1].sent, 20, "the second sent")
    assert real_redis.llen(tasks_queue) == 1  # in the broker, behind the busy worker
    client.cancel_task(waiting.short_id)
    wait_until(lambda: client.tasks(room)[1].revoked, 20, "the coordinator's revoke")
    client.cancel_task(busy.short_id)  # the worker's slot frees, and it reads the queue
    wait_until(lambda: len(said(client, room)) == 2, 30, "both cancels told")
    wait_until(lambda: tasks_unfinished(real_redis, tasks_queue) == 0, 30, "the queue read")
    # The revoked message never reached the task's code: not even its claim was tried.
    assert [entry["task"] for entry in log_events(processes, "task_running", room)] == [busy.id]
    assert log_events(processes, "task_not_taken", room) == []
    assert [task.status for task in client.tasks(room)] == ["cancelled", "cancelled"]


def test_a_tasks_tool_calls_are_told_as_its_progress(processes, settings, queue, tmp_path):
    env = {"PARLEY_WORKER_TOOLS": SAMPLE,
           "PARLEY_TEST_TOOL_RUNS": str(tmp_path / "runs")}
    processes.worker("-Q", queue, "-c", "4", env=env)
    processes.coordinator()
    client = Client(settings)
    wait_until(lambda: "lookup" in client.tool_catalog(), 60, "the worker's offer")
    research = [{"tool_calls": [{"name": "lookup", "arguments": {"service": "checkout"}}]},
                {"tool_calls": [{"name": "lookup", "arguments": {"service": "tax"}}]},
                {"content": "Both services are fine."}]
    room = client.create_room(room_spec(queue, "post", research, [], {"tools": ["lookup"]}))
    task = client.start_task(room, "lead", "Check the checkout and tax services")
    wait_until(lambda: said(client, room), 30, "the posted result")
    assert said(client, room) == [("lead", "Both services are fine.")]
    progress = [(event.type, event.text) for event in client.store.read_events(room)
                if event.type == "task_progress"]
    assert progress == [("task_progress", "ran lookup (tool call 1)"),
                        ("task_progress", "ran lookup (tool call 2)")]
    assert client.tasks(room)[0].progress == "ran lookup (tool call 2)"
    listed = run_parley(processes.env, "task", "list", room)
    assert listed.returncode == 0, listed.stderr
    assert f"{task.short_id}  lead (by researcher, post)  done (ran lookup (tool call 2))" \
        in listed.stdout


KEY_ENV, KEY = "PARLEY_E2E_STUB_KEY", "sk-e2e-stub"
# 100 prompt tokens at $0.0001 and 10 completion tokens at $0.001: $0.02.
PRICES = {"input_cost_per_token": 1e-4, "output_cost_per_token": 1e-3}


def test_a_tasks_tokens_and_cost_count_in_its_parent_room(processes, settings, queue):
    with OpenAIStub(api_key=KEY) as stub:
        stub.script("researcher", text("Three tickets are about refunds.", prompt_tokens=100,
                                       completion_tokens=10))
        processes.worker("-Q", queue, "-c", "4", env={
            KEY_ENV: KEY, "PARLEY_WORKER_KEY_ENVS": KEY_ENV,
            "PARLEY_WORKER_ALLOWED_API_BASES": stub.url})
        processes.coordinator()
        client = Client(settings)
        room = client.create_room(room_spec(
            queue, "post", [], [], {"model": "openai/researcher", "api_base": stub.url,
                                   "api_key_env": KEY_ENV, "litellm_kwargs": PRICES,
                                   "script": None}))
        before = client.show(room)
        client.start_task(room, "lead", "Go through every support ticket")
        wait_until(lambda: said(client, room), 30, "the posted result")
    task = client.tasks(room)[0]
    assert (task.status, task.prompt_tokens, task.completion_tokens) == ("done", 100, 10)
    assert task.cost_usd == pytest.approx(0.02)
    after = client.show(room)  # what `parley rooms show` and GET /rooms/{room} tell
    assert (after.prompt_tokens - before.prompt_tokens,
            after.completion_tokens - before.completion_tokens) == (100, 10)
    assert after.cost_usd - before.cost_usd == pytest.approx(0.02)
    shown = run_parley(processes.env, "rooms", "show", room, "--json")
    assert shown.returncode == 0, shown.stderr
    told = json.loads(shown.stdout)
    assert (told["prompt_tokens"], told["completion_tokens"]) == (100, 10)
    assert told["cost_usd"] == pytest.approx(0.02)
