"""The worker's transcript cache: each task reads only what was committed since."""

from __future__ import annotations

import fakeredis
import pytest

from shared.keys import Keys
from shared.store import RoomStore
from workers.tasks import TranscriptCache

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
