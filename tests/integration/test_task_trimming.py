"""A room's tasks hash is bounded (task_finish.lua): past ``task_finished_max`` finished
tasks the oldest handed back go, every field and their ids with them, in the same write that
finishes a task; open tasks and results still waiting to be posted are never dropped."""

from __future__ import annotations

import itertools
import types

import pytest
import redis

from parley.shared.keys import Keys
from parley.shared.models import RoomSpec
from parley.shared.store import RoomStore
from parley.shared.tasks import TaskBook

pytestmark = pytest.mark.redis

SPEC = RoomSpec.model_validate({
    "policy": {"kind": "mention"},
    "agents": [{"name": "lead", "model": "scripted", "script": [],
                "background": {"hand_back": "post", "worker": "researcher"}},
               {"name": "researcher", "model": "scripted", "script": []}]})


@pytest.fixture
def book(real_redis: redis.Redis, keys: Keys) -> TaskBook:
    RoomStore(real_redis, keys).create_room("r1", SPEC)
    return TaskBook(real_redis, keys, events_maxlen=1000, finished_max=3)


def finished(book: TaskBook, what: str, handed_back: bool = True) -> str:
    """A task started, run with progress, cancelled and finished; handed back unless told."""
    task = book.start("r1", SPEC, "lead", what)
    assert book.claim("r1", task.id)
    book.beat("r1", task.id, "ran lookup")
    book.redis.hset(book.keys.tasks("r1"), mapping={f"{task.id}:cancel": 1,
                                                   f"{task.id}:revoked": 1})
    assert book.finish("r1", task, "done", f"result of {what}", usage=(1, 1, 0.0))
    if handed_back:  # as post_handback.lua marks it
        book.redis.zrem(book.keys.handbacks("r1"), task.id)
        book.redis.hset(book.keys.tasks("r1"), f"{task.id}:handed_back", 1)
    return task.id


def fields_of(book: TaskBook, task_id: str) -> list[str]:
    return [key for key in book.redis.hkeys(book.keys.tasks("r1"))
            if key.decode().startswith(f"{task_id}:")]


def test_past_its_cap_the_oldest_finished_task_goes_with_every_field_and_its_ids(book):
    open_task = book.start("r1", SPEC, "lead", "still running")
    book.claim("r1", open_task.id)
    ids = [finished(book, f"task {n}") for n in range(4)]
    assert fields_of(book, ids[0]) == []
    assert [task.id for task in book.list("r1")] == [open_task.id, *ids[1:]]
    assert book.redis.zscore(book.keys.task_ids("r1"), ids[0]) is None
    assert set(book.redis.zrange(book.keys.task_ids("r1"), 0, -1)) == {
        task_id.encode() for task_id in [open_task.id, *ids[1:]]}
    assert book.redis.zcard(book.keys.tasks_done("r1")) == 3
    # The open task never goes, however many finish after it.
    for n in range(4, 8):
        finished(book, f"task {n}")
    assert book.get("r1", open_task.id).status == "running"
    assert len(book.list("r1")) == 4


def test_a_result_waiting_to_be_posted_stays_until_handed_back(book):
    waiting = finished(book, "not posted yet", handed_back=False)
    later = [finished(book, f"task {n}") for n in range(3)]
    # Four finished, cap three: the oldest waits for its hand-back, so the next one goes.
    assert [task.id for task in book.list("r1")] == [waiting, *later[1:]]
    assert book.get("r1", waiting).result == "result of not posted yet"


def test_tasks_finished_within_one_millisecond_still_go_oldest_first(real_redis, keys,
                                                                    monkeypatch):
    # 10 microseconds apart: the same millisecond for the first two of each room.
    ticks = itertools.count()
    clock = types.SimpleNamespace(time=lambda: 1_800_000_000.0 + next(ticks) * 1e-5)
    monkeypatch.setattr("parley.shared.tasks.time", clock)
    book = TaskBook(real_redis, keys, events_maxlen=1000, finished_max=2)
    # Ids are random: with the two tied by their id instead, eight rooms would all keep
    # the older one with a chance of 1 in 256.
    for room in (f"r{n}" for n in range(8)):
        RoomStore(real_redis, keys).create_room(room, SPEC)
        first, second, third = (finished_in(book, room, what) for what in "abc")
        assert [task.id for task in book.list(room)] == [second, third], room


def finished_in(book: TaskBook, room: str, what: str) -> str:
    """A task of ``room`` started, finished and handed back."""
    task = book.start(room, SPEC, "lead", what)
    assert book.claim(room, task.id)
    assert book.finish(room, task, "done", f"result of {what}")
    book.redis.zrem(book.keys.handbacks(room), task.id)
    book.redis.hset(book.keys.tasks(room), f"{task.id}:handed_back", 1)
    return task.id


def test_a_cap_below_one_is_refused_and_nothing_is_written(book):
    task = book.start("r1", SPEC, "lead", "work")
    book.finished_max = 0
    with pytest.raises(redis.ResponseError, match="BADARG the finished tasks kept"):
        book.finish("r1", task, "done", "x")
    assert book.get("r1", task.id).status == "queued"
