"""Background tasks through the front doors (seed 003's tasks), on fakeredis: the scripts'
rules (started once, taken once, finished once with its tokens in the room's totals,
the hand-back queued as the agent's hand_back says), `parley task` and the HTTP routes."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from parley import cli
from parley.coordinator.policies import FloorOp, mention
from parley.coordinator.room_io import RoomIO
from parley.coordinator.task_keeper import TaskKeeper
from parley.coordinator.transport import InMemoryTransport
from parley.shared.models import CallKind, CallRequest, RoomSpec
from parley.shared.scripts import Scripts
from parley.shared.tasks import Task, TaskNotFound, TaskRefused, celery_task_id, lapsed
from parley.workers.tasks import task_notes
from parley.workers.tools.base import ToolError
from parley.workers.tools.task_tools import TaskTools
from tests.support.fake_client import cli_on_fake_client


def room_spec(hand_back: str = "relay", policy: str = "mention", tools: tuple = ()) -> RoomSpec:
    return RoomSpec.model_validate({
        "policy": {"kind": policy},
        "agents": [{"name": "lead", "model": "scripted", "script": [], "tools": list(tools),
                    "background": {"hand_back": hand_back, "worker": "researcher"}},
                   {"name": "researcher", "model": "scripted", "script": []}]})


def test_a_worker_that_is_not_an_agent_is_refused_at_create():
    with pytest.raises(ValueError, match="background.worker 'nobody' is not an agent"):
        RoomSpec.model_validate({"policy": {"kind": "mention"}, "agents": [
            {"name": "a", "model": "scripted", "script": [], "background": {"worker": "nobody"}},
            {"name": "b", "model": "scripted", "script": []}]})


def test_a_task_is_taken_once_and_finished_once_with_its_tokens_in_the_room(client):
    client.create_room(room_spec(), "r1")
    task = client.start_task("r1", "lead", "count the tickets")
    assert (task.worker, task.hand_back, task.status) == ("researcher", "relay", "queued")
    book = client.task_book
    assert book.claim("r1", task.id) and not book.claim("r1", task.id)
    assert book.finish("r1", task, "done", "42", usage=(100, 20, 0.5))
    assert not book.finish("r1", task, "failed", error="late")
    state = client.state("r1")
    assert (state.usage.prompt_tokens, state.usage.completion_tokens) == (100, 20)
    assert state.agent_totals("prompt_tokens")["researcher"] == 100
    done = client.tasks("r1")[0]
    assert (done.status, done.result, done.prompt_tokens) == ("done", "42", 100)
    # relay in a discussion room: the agent is instructed, at the front of the queue
    ops = client.store.read_floor_ops("r1", "0-0")
    assert [(op.op, op.agent) for op in ops] == [("instruct", "lead")]
    assert "42" in ops[0].text
    assert state.status.value == "running"  # a run started to serve it


def test_a_posted_task_waits_in_the_handbacks_and_a_queued_cancel_ends_it(client):
    client.create_room(room_spec("post"), "r1")
    first = client.start_task("r1", "lead", "list them")
    second = client.start_task("r1", "lead", "and these", hand_back="relay")
    client.task_book.finish("r1", first, "done", "- one\n- two")
    assert client.redis.zrange(client.store.keys.handbacks("r1"), 0, -1) == [first.id.encode()]
    cancelled = client.cancel_task(second.short_id)
    assert cancelled.status == "cancelled"
    with pytest.raises(TaskNotFound):
        client.cancel_task("ffffff")
    with pytest.raises(TaskRefused, match="not an agent"):
        client.start_task("r1", "nobody", "x")


def test_parley_task_starts_lists_and_cancels(monkeypatch):
    client = cli_on_fake_client(monkeypatch)
    client.create_room(room_spec(), "r1")
    runner = CliRunner()
    started = runner.invoke(cli.app, ["task", "start", "r1", "lead", "read the logs",
                                      "--hand-back", "post", "--json"])
    assert started.exit_code == 0, started.output
    task = json.loads(started.stdout)
    assert (task["agent"], task["hand_back"], task["status"]) == ("lead", "post", "queued")
    listed = runner.invoke(cli.app, ["task", "list", "r1"])
    assert task["id"][:6] in listed.stdout and "queued" in listed.stdout
    done = runner.invoke(cli.app, ["task", "cancel", task["id"][:6]])
    assert done.exit_code == 0 and "cancelled" in done.stdout
    missing = runner.invoke(cli.app, ["task", "cancel", "abcdef"])
    assert missing.exit_code == 2 and "no task 'abcdef'" in missing.stderr


def test_the_tasks_routes_start_list_and_cancel(api):
    created = api.post("/rooms", json=room_spec().model_dump(mode="json"))
    room = created.json()["room"]
    started = api.post(f"/rooms/{room}/tasks", json={"agent": "lead", "what": "read"})
    assert started.status_code == 201
    task_id = started.json()["id"]
    assert [t["id"] for t in api.get(f"/rooms/{room}/tasks").json()["tasks"]] == [task_id]
    assert api.delete(f"/rooms/{room}/tasks/{task_id[:6]}").json()["status"] == "cancelled"
    assert api.delete(f"/rooms/{room}/tasks/abcdef").status_code == 404
    assert api.post(f"/rooms/{room}/tasks", json={"agent": "x", "what": "y"}).status_code == 400


def test_a_posted_turns_notes_list_the_rooms_tasks(client):
    client.create_room(room_spec(), "r1")
    client.start_task("r1", "lead", "count the tickets")
    request = CallRequest(prefix=client.store.keys.prefix, room="r1", turn=1, attempt=1,
                          agents=["lead"], kind=CallKind.DISCUSS, snapshot_seq=0,
                          deadline=0, spec_version=0)
    notes = task_notes(client.store, request)
    assert "count the tickets [queued]" in notes and "of lead (by researcher)" in notes
    bid = request.model_copy(update={"kind": CallKind.BID})
    assert task_notes(client.store, bid) == ""


class CountingRedis:
    """A Redis client that records the keys of every command it is given."""

    def __init__(self, client) -> None:
        self.client, self.keys_read = client, []

    def __getattr__(self, name):
        command = getattr(self.client, name)

        def counted(*args, **kwargs):
            self.keys_read.append((name, args[:1]))
            return command(*args, **kwargs)
        return counted


def test_a_room_that_never_had_a_task_reads_none_for_its_notes_and_one_that_had_lists_it(client):
    client.create_room(room_spec(), "r1")
    spy = SimpleNamespace(redis=CountingRedis(client.redis), keys=client.store.keys)
    request = CallRequest(prefix=client.store.keys.prefix, room="r1", turn=1, attempt=1,
                          agents=["lead"], kind=CallKind.DISCUSS, snapshot_seq=0,
                          deadline=0, spec_version=0, tasks_started=0)
    assert task_notes(spy, request) == "" and spy.redis.keys_read == []
    client.start_task("r1", "lead", "count the tickets")
    had_one = request.model_copy(update={"tasks_started": client.state("r1").tasks_started})
    assert had_one.tasks_started == 1
    assert "count the tickets [queued]" in task_notes(spy, had_one)
    assert ("hgetall", (client.store.keys.tasks("r1"),)) in spy.redis.keys_read


def test_the_dashboard_shows_each_agents_running_tasks_and_a_finished_result(api):
    room = api.post("/rooms", json=room_spec().model_dump(mode="json")).json()["room"]
    first = api.post(f"/rooms/{room}/tasks", json={"agent": "lead", "what": "count"}).json()
    api.post(f"/rooms/{room}/tasks", json={"agent": "lead", "what": "read the logs"})
    api.delete(f"/rooms/{room}/tasks/{first['id']}")
    stats = api.get(f"/dashboard/rooms/{room}/stats").json()
    lead = next(card for card in stats["agents"] if card["name"] == "lead")
    assert [task["instruction"] for task in lead["running"]] == ["read the logs"]
    assert [(task["id"], task["status"]) for task in stats["tasks"]] == [
        (first["id"][:6], "cancelled")]


def test_the_task_tools_read_and_cancel_the_rooms_tasks(client):
    # Named without any worker offering them in the catalog.
    client.create_room(room_spec(tools=("task_status", "cancel_task")), "r1")
    task = client.start_task("r1", "lead", "count the tickets")
    tools = TaskTools(client.task_book, "r1")
    assert "count the tickets [queued]" in tools.call("task_status", {}, 5)
    assert tools.call("cancel_task", {"task": task.short_id}, 5) == (
        f"task {task.short_id}: cancel asked (cancelled)")
    assert "[cancelled]" in tools.call("task_status", {"task": task.short_id}, 5)
    with pytest.raises(ToolError, match="no task 'abcdef'"):
        tools.call("cancel_task", {"task": "abcdef"}, 5)


def test_a_relay_after_the_discussion_is_over_is_refused_as_an_instruction_is(client):
    spec = room_spec()
    client.create_room(spec, "r1")
    task = client.start_task("r1", "lead", "count")
    client.task_book.finish("r1", task, "done", "42")
    ops = tuple(FloorOp(op.id, op.op, op.agent, op.text)
                for op in client.store.read_floor_ops("r1", "0-0"))
    open_floor = mention.apply_ops(spec, mention.Floor(), ops)
    assert open_floor.queue[:1] == ["lead"] and "42" in open_floor.instructions["lead"]
    over = mention.apply_ops(spec, mention.Floor(over=True), ops)
    assert over.queue == [] and over.instructions == {}


@pytest.mark.parametrize(("beat_ago", "deadline_in", "cancel", "ended"), [
    (0.5, 60, False, None), (10, 60, False, "failed"), (10, 60, True, "cancelled"),
    (0.5, -1, False, "timed_out")])
def test_a_running_task_is_swept_once_its_heartbeat_lapses_or_its_max_s_passes(
        beat_ago, deadline_in, cancel, ended):
    now = 1000.0
    task = Task(id="abcdef0123456789", room="r1", agent="lead", worker="lead",
                hand_back="relay", instruction="x", status="running", beat_at=now - beat_ago,
                deadline=now + deadline_in, cancel=cancel)
    assert lapsed(task, now, heartbeat_s=2.0) == ended
    assert lapsed(task.model_copy(update={"status": "done"}), now, 2.0) is None


@pytest.mark.parametrize(("deadline_in", "ended"), [(60, None), (-1, "timed_out")])
def test_a_queued_task_no_worker_took_by_its_max_s_is_swept_as_timed_out(deadline_in, ended):
    now = 1000.0
    # Its heartbeat never started: only the deadline (its message's expiry) ends it.
    task = Task(id="abcdef0123456789", room="r1", agent="lead", worker="lead",
                hand_back="relay", instruction="x", status="queued", beat_at=now - 600,
                deadline=now + deadline_in, sent=True)
    assert lapsed(task, now, heartbeat_s=2.0) == ended


def test_the_coordinator_revokes_a_sent_task_once_when_it_is_cancelled(client, async_redis):
    client.create_room(room_spec(), "r1")
    task = client.start_task("r1", "lead", "count the tickets")
    spec = client.store.read_spec("r1")[1]
    transport = InMemoryTransport()
    keeper = TaskKeeper(RoomIO(async_redis, client.store.keys, Scripts(async_redis)),
                        transport, "t", heartbeat_s=2.0, finished_max=200)
    lease = SimpleNamespace(room="r1", token="unused: nothing is posted")

    async def serve(times: int) -> None:
        for _ in range(times):
            await keeper.serve(lease, spec)

    asyncio.run(serve(1))
    assert transport.background == [(spec.agent("researcher").queue,
                                     {"prefix": "t", "room": "r1", "task": task.id})]
    assert transport.revoked == []
    client.cancel_task(task.short_id)
    asyncio.run(serve(3))
    assert transport.revoked == [celery_task_id(task)]
    assert client.tasks("r1")[0].revoked


def test_a_task_cancelled_before_it_was_sent_is_neither_sent_nor_revoked(client, async_redis):
    client.create_room(room_spec(), "r1")
    task = client.start_task("r1", "lead", "count the tickets")
    client.cancel_task(task.short_id)
    transport = InMemoryTransport()
    keeper = TaskKeeper(RoomIO(async_redis, client.store.keys, Scripts(async_redis)),
                        transport, "t", heartbeat_s=2.0, finished_max=200)
    asyncio.run(keeper.serve(SimpleNamespace(room="r1", token="-"),
                             client.store.read_spec("r1")[1]))
    assert (transport.background, transport.revoked) == ([], [])


def test_progress_is_an_event_only_when_it_changes(client):
    client.create_room(room_spec(), "r1")
    task = client.start_task("r1", "lead", "count the tickets")
    book = client.task_book
    book.claim("r1", task.id)
    for progress in ["ran lookup (tool call 1)", "ran lookup (tool call 1)", "",
                     "ran lookup (tool call 2)"]:
        assert book.beat("r1", task.id, progress) == (True, False)
    told = [event.text for event in client.store.read_events("r1")
            if event.type == "task_progress"]
    assert told == ["ran lookup (tool call 1)", "ran lookup (tool call 2)"]
    assert client.tasks("r1")[0].progress == "ran lookup (tool call 2)"
