"""A task's room through its scripts, on fakeredis and on the real Redis: created once and
linked both ways, its log written once after the seq expected and only in a task's room,
and refusing posts and tasks with TASKROOM, naming the parent."""

from __future__ import annotations

import pytest

from parley.shared.store import RoomStore, TaskRoomRefused
from parley.shared.tasks import TaskBook, TaskRefused
from tests.support.rooms import scripted_spec
from tests.support.script_calls import ROOM

CHILD = f"{ROOM}.task-ab12cd"


@pytest.fixture
def child(store: RoomStore) -> str:
    """The room of a task of r1."""
    assert store.create_task_room(CHILD, scripted_spec({"A": [], "B": []}), ROOM, "ab12cd00")
    return CHILD


def test_a_task_room_is_created_once_and_linked_both_ways(store, child):
    assert not store.create_task_room(child, scripted_spec({"A": [], "B": []}), ROOM, "ab12cd00")
    state = store.read_state(child).raw
    assert (state["parent"], state["task"]) == (ROOM, "ab12cd00")
    assert store.children(ROOM) == [child]
    assert store.redis.zscore(store.keys.runnable, child) is None


def test_its_log_is_written_once_after_the_seq_expected(store, child):
    assert store.write_task_log(child, 0, "A", [("User", "go"), ("A", "hi")], (3, 2, 0.25)) == 2
    assert store.write_task_log(child, 0, "A", [("User", "again")], (3, 2, 0.25)) == 0
    assert [m.content for m in store.read_messages(child)] == ["go", "hi"]
    state = store.read_state(child)
    assert (state.last_seq, state.usage.prompt_tokens, state.usage.cost_usd) == (2, 3, 0.25)
    assert state.agent_totals("completion_tokens")["A"] == 2


@pytest.mark.parametrize("args", [["x", "1", "A", 0, 0, "0"], [0, "1", "A", 0, 0, "nan"],
                                  [0, "1", "A", 0, 0, "0", "only a sender"]])
def test_malformed_arguments_write_nothing(store, child, args):
    with pytest.raises(Exception, match="BADARG"):
        store.scripts.task_room_log(keys=[store.keys.state(child), store.keys.log(child)],
                                    args=args)
    assert store.read_state(child).last_seq == 0


def test_a_post_and_a_task_in_a_task_room_are_refused_naming_the_parent(store, child):
    with pytest.raises(TaskRoomRefused, match=f"post into {ROOM}$"):
        store.post(child, "User", "hello")
    book = TaskBook(store.redis, store.keys, 100, finished_max=200)
    with pytest.raises(TaskRefused, match=f"of room {ROOM}\\): a task starts no task"):
        book.start(child, scripted_spec({"A": [], "B": []}), "A", "more")
    assert store.redis.xlen(store.keys.inbox(child)) == 0
    assert not store.redis.exists(store.keys.tasks(child))
