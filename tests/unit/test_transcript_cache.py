"""The worker's transcript and spec caches: each task reads only what was committed since,
never a spec or transcript of another room that had the same id, and a room's spec once
however many of its tasks want it at the same time."""

from __future__ import annotations

import threading

import fakeredis
import pytest

from parley.shared.keys import Keys
from parley.shared.store import RoomStore
from parley.workers.tasks import SpecCache, TranscriptCache
from tests.support.polling import wait_until
from tests.support.rooms import scripted_spec

ROOM = "room-1"


class CountingStore(RoomStore):
    """A store that remembers which ranges of the log were read."""

    def __init__(self, client, keys) -> None:  # noqa: ANN001
        super().__init__(client, keys)
        self.reads: list[tuple[int, int | None]] = []

    def read_messages(self, room, after_seq=0, upto_seq=None):  # noqa: ANN001, ANN201
        self.reads.append((after_seq, upto_seq))
        return super().read_messages(room, after_seq, upto_seq)


@pytest.fixture
def store() -> CountingStore:
    return CountingStore(fakeredis.FakeRedis(server=fakeredis.FakeServer()), Keys("t"))


def append(store: RoomStore, seq: int, content: str, ts: float = 1.0) -> None:
    store.redis.xadd(store.keys.log(ROOM), {"seq": seq, "sender": "User", "content": content,
                                            "ts": repr(ts)}, id=f"{seq}-0")


def test_a_later_snapshot_reads_only_the_new_messages(store):
    cache = TranscriptCache()
    for seq in range(1, 4):
        append(store, seq, f"m{seq}")
    assert [m.content for m in cache.upto(store, "t", ROOM, 3)] == ["m1", "m2", "m3"]
    for seq in range(4, 6):
        append(store, seq, f"m{seq}")

    assert [m.content for m in cache.upto(store, "t", ROOM, 5)] == ["m1", "m2", "m3", "m4", "m5"]
    assert store.reads == [(0, 3), (2, 5)]


def test_an_earlier_snapshot_is_served_from_what_was_read(store):
    cache = TranscriptCache()
    for seq in range(1, 5):
        append(store, seq, f"m{seq}")
    cache.upto(store, "t", ROOM, 4)

    assert [m.seq for m in cache.upto(store, "t", ROOM, 2)] == [1, 2]
    assert len(store.reads) == 1


def test_a_room_created_again_under_the_same_id_is_read_whole(store):
    cache = TranscriptCache()
    append(store, 1, "old task")
    append(store, 2, "old reply")
    cache.upto(store, "t", ROOM, 2)
    store.redis.delete(store.keys.log(ROOM))
    append(store, 1, "new task", ts=2.0)
    append(store, 2, "new reply", ts=2.0)
    append(store, 3, "new answer", ts=2.0)

    assert [m.content for m in cache.upto(store, "t", ROOM, 3)] == [
        "new task", "new reply", "new answer"]


def test_a_capped_log_gives_warm_and_cold_workers_the_same_last_messages(store):
    warm, cold = TranscriptCache(), TranscriptCache()
    for seq in range(1, 6):
        append(store, seq, f"m{seq}")
    warm.upto(store, "t", ROOM, 5, keep=3)
    for seq in range(6, 9):
        append(store, seq, f"m{seq}")
    # The cap drops the oldest messages from Redis; a cold worker reads what is left.
    store.redis.xtrim(store.keys.log(ROOM), maxlen=5, approximate=False)  # 4..8 are left

    assert [m.seq for m in warm.upto(store, "t", ROOM, 8, keep=3)] == [6, 7, 8]
    assert [m.seq for m in cold.upto(store, "t", ROOM, 8, keep=3)] == [6, 7, 8]
    assert [m.seq for m in warm.upto(store, "t", ROOM, 7, keep=3)] == [5, 6, 7]


def test_an_earlier_snapshot_of_a_trimmed_log_is_sliced_by_seq(store):
    cache = TranscriptCache()
    for seq in range(1, 11):
        append(store, seq, f"m{seq}")
    store.redis.xtrim(store.keys.log(ROOM), maxlen=5, approximate=False)  # 6..10 are left

    assert [m.seq for m in cache.upto(store, "t", ROOM, 10)] == [6, 7, 8, 9, 10]
    assert [m.seq for m in cache.upto(store, "t", ROOM, 7)] == [6, 7]


def test_a_room_deleted_and_created_again_under_its_id_is_not_served_its_old_spec(store):
    specs = SpecCache()
    store.create_room(ROOM, scripted_spec({"Old": [], "Older": []}))
    old_version, _ = store.read_spec(ROOM)
    assert [a.name for a in specs.get(store, "t", ROOM, old_version).agents] == ["Old", "Older"]
    store.delete(ROOM)
    store.create_room(ROOM, scripted_spec({"New": [], "Newer": []}))
    new_version, _ = store.read_spec(ROOM)

    assert new_version != old_version
    assert [a.name for a in specs.get(store, "t", ROOM, new_version).agents] == ["New", "Newer"]


def test_a_big_rooms_chunks_arriving_together_read_its_spec_once(store):
    store.create_room(ROOM, scripted_spec({"A": [], "B": []}))
    version, _ = store.read_spec(ROOM)
    specs = SpecCache()
    reads, looked, release = [], [], threading.Event()
    read_spec, cached = store.read_spec, specs.cached

    def slow_read(room):
        reads.append(room)
        release.wait(10)
        return read_spec(room)

    def look(key, at):
        looked.append(key)
        return cached(key, at)

    store.read_spec = slow_read
    specs.cached = look
    chunks = [threading.Thread(target=specs.get, args=(store, "t", ROOM, version))
              for _ in range(8)]
    for chunk in chunks:
        chunk.start()
    # Every chunk has missed the cache (the first has also looked again, holding the read).
    wait_until(lambda: len(looked) >= len(chunks) + 1, 10, "every chunk looking for the spec")
    release.set()
    for chunk in chunks:
        chunk.join(10)

    assert reads == [ROOM]
