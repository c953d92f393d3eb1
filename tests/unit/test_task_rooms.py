"""A background task's own room (seed 003's tasks), on fakeredis: created once as its task
is taken, linked to its parent both ways, holding the handed messages, the instruction and
the answer with its totals; listed, deleted, expired and archived with its parent; refusing
posts and tasks of its own."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import fakeredis
import pytest

from parley.coordinator.retention import IdleRooms
from parley.shared.keys import Keys
from parley.shared.scripts import Scripts
from parley.shared.store import RoomNotFound, RoomStore, TaskRoomRefused, now_ms
from parley.shared.tasks import TaskBook, TaskRefused
from tests.support.api import PREFIX
from tests.unit.test_task_commands import room_spec


def taken(client, room: str = "r1"):
    """A room with one task, taken by its worker: the task and its room's id."""
    client.create_room(room_spec(), room)
    task = client.start_task(room, "lead", "count the tickets")
    assert client.task_book.claim(room, task.id)
    spec = client.store.read_spec(room)[1]
    client.task_book.open_room(task, spec, "default", [("Ann", "how do refunds go?")])
    return task, task.room_id


def test_a_taken_task_has_a_room_of_its_own_linked_to_its_parent(client):
    task, child = taken(client)
    assert child == f"r1.task-{task.short_id}"
    state = client.store.read_state(child)
    assert (state.raw["parent"], state.raw["task"]) == ("r1", task.id)
    assert client.store.children("r1") == [child]
    # The worker agent is there, as it is, with no background of its own.
    _, spec = client.store.read_spec(child)
    assert spec.agent("researcher").model == "scripted"
    assert all(agent.background is None for agent in spec.agents)
    assert [(m.sender, m.content) for m in client.store.read_messages(child)] == [
        ("Ann", "how do refunds go?"), ("User", "count the tickets")]  # by its starter
    # Never runnable: no coordinator takes it for a run.
    assert client.store.redis.zscore(client.store.keys.runnable, child) is None


def test_opening_a_task_room_again_creates_and_writes_nothing_more(client):
    task, child = taken(client)
    spec = client.store.read_spec("r1")[1]
    client.task_book.open_room(task, spec, "default", [("Ann", "something else")])
    assert len(client.store.read_messages(child)) == 2
    assert client.store.children("r1") == [child]


def test_the_answer_and_its_cost_are_the_task_rooms_own(client):
    task, child = taken(client)
    client.task_book.close_room(task, "42 tickets", (100, 20, 0.5))
    assert client.store.read_messages(child)[-1].content == "42 tickets"
    state = client.store.read_state(child)
    assert (state.usage.prompt_tokens, state.usage.completion_tokens) == (100, 20)
    assert state.usage.cost_usd == pytest.approx(0.5)
    assert state.agent_totals("prompt_tokens")["researcher"] == 100


def test_a_task_room_is_not_one_more_room_of_its_organization(client, store):
    taken(client)
    assert store.redis.smembers(store.keys.org_rooms("default")) == {b"r1"}


def test_a_post_into_a_task_room_is_refused_naming_its_parent(client):
    _, child = taken(client)
    with pytest.raises(TaskRoomRefused, match=f"room {child} is a background task's room "
                                              "of room r1: it takes no posts; post into r1"):
        client.post(child, "hello")


def test_a_task_room_starts_no_task_of_its_own(client):
    _, child = taken(client)
    with pytest.raises(TaskRefused, match="a task starts no task of its own"):
        client.start_task(child, "researcher", "and more")


def test_the_log_of_a_room_with_turns_is_not_written_as_a_tasks(client, store):
    client.create_room(room_spec(), "plain")
    with pytest.raises(Exception, match="not a task's room"):
        store.write_task_log("plain", 0, "lead", [("lead", "hi")])


def test_a_task_room_is_listed_with_its_parent(client):
    task, child = taken(client)
    by_room = {summary.room: summary for summary in client.rooms()}
    assert by_room[child].parent == "r1" and by_room["r1"].children == [child]
    assert by_room["r1"].parent is None
    assert client.show("r1").children == [child]


def test_deleting_the_parent_deletes_its_task_rooms(client, store):
    _, child = taken(client)
    client.delete("r1")
    with pytest.raises(RoomNotFound):
        store.read_state(child)
    assert [key for key in store.keys.room_keys(child) if store.redis.exists(key)] == []
    assert store.list_rooms() == []


def test_a_task_room_deleted_on_its_own_leaves_its_parents_list(client, store):
    _, child = taken(client)
    client.delete(child)
    assert store.children("r1") == [] and client.show("r1").children == []


def test_a_task_room_expires_with_its_parent_and_never_alone(client, store, async_redis):
    _, child = taken(client)
    sweeper = IdleRooms(async_redis, store.keys, Scripts(async_redis), 60.0)
    store.redis.zadd(store.keys.rooms, {child: now_ms() - 120_000})
    assert asyncio.run(sweeper.sweep()) == []
    store.redis.zadd(store.keys.rooms, {"r1": now_ms() - 120_000})
    assert asyncio.run(sweeper.sweep()) == ["r1"]
    assert [key for key in store.keys.room_keys(child) if store.redis.exists(key)] == []
    assert store.list_rooms() == []


def test_archiving_the_parent_archives_its_task_rooms_beside_it(client, store, tmp_path):
    task, child = taken(client)
    client.task_book.close_room(task, "42 tickets", (1, 1, 0.0))
    result = client.archive("r1", tmp_path / "r1.jsonl")
    assert result.children == [str(tmp_path / f"r1.task-{task.short_id}.jsonl")]
    lines = [json.loads(line) for line in Path(result.children[0]).read_text().splitlines()]
    assert lines[0]["room"] == child
    assert [line["fields"]["content"] for line in lines if line["kind"] == "log"] == [
        "how do refunds go?", "count the tickets", "42 tickets"]
    assert store.list_rooms() == []


def test_the_http_api_lists_task_rooms_with_their_parent_and_refuses_posts(api, server):
    room = api.post("/rooms", json=room_spec().model_dump(mode="json")).json()["room"]
    task_id = api.post(f"/rooms/{room}/tasks", json={"agent": "lead", "what": "read"}).json()["id"]
    store = RoomStore(fakeredis.FakeRedis(server=server), Keys(PREFIX))
    book = TaskBook(store.redis, store.keys, 100, finished_max=200)
    task = book.get(room, task_id)
    book.open_room(task, store.read_spec(room)[1], "default", [])
    listed = {r["room"]: r for r in api.get("/rooms").json()["rooms"]}
    assert listed[task.room_id]["parent"] == room and listed[room]["children"] == [task.room_id]
    assert api.get(f"/rooms/{room}").json()["children"] == [task.room_id]
    refused = api.post(f"/rooms/{task.room_id}/messages", json={"content": "hi"})
    assert refused.status_code == 400 and f"post into {room}" in refused.text
    assert api.post(f"/rooms/{task.room_id}/tasks",
                    json={"agent": "lead", "what": "y"}).status_code == 400
    assert api.delete(f"/rooms/{room}").status_code == 200
    assert task.room_id not in {r["room"] for r in api.get("/rooms").json()["rooms"]}
