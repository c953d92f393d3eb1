"""Archiving a room to JSON lines and importing it back, on fakeredis: the same room comes
back, a file that is not a whole archive writes nothing, and a room that moved on or is
held is not removed."""

from __future__ import annotations

import asyncio
import json

import fakeredis
import pytest

from parley.shared.archive import ArchiveError, archive_room, check_archive, import_room
from parley.shared.scripts import Scripts
from parley.shared.store import RoomExists, RoomHeld, RoomStore
from tests.support.local_worker import LocalWorkerTransport
from tests.support.rooms import rotating_scripts, scripted_spec
from tests.unit.test_lifecycle_rooms import serve_once

ROOM = "room-1"


@pytest.fixture
def ran(store, server) -> RoomStore:
    """A room that ran to a lull, then got a dead letter of raw bytes and, paused, a post
    that waits."""
    store.create_room(ROOM, scripted_spec(rotating_scripts(3, 4)))
    store.post(ROOM, "User", "Should we launch? 🚀")
    asyncio.run(serve_once(fakeredis.FakeAsyncRedis(server=server), store.keys,
                           LocalWorkerTransport(store.redis, store.keys)))
    store.redis.xadd(store.keys.dead_letters(ROOM),
                     {b"sender": b"\xff\xfe", b"inbox_id": b"1-0", b"reason": b"not UTF-8"})
    store.pause(ROOM)
    store.post(ROOM, "Ann", "one more thing")
    return store


def everything(store: RoomStore, room: str = ROOM) -> dict[str, object]:
    """Every key of the room as Redis holds it (lease aside)."""
    keys, client = store.keys, store.redis
    return {
        "spec": client.hgetall(keys.spec(room)), "state": client.hgetall(keys.state(room)),
        **{name: client.xrange(getattr(keys, name)(room))
           for name in ("log", "turns", "inbox", "dead_letters")},
    }


def test_archive_then_import_gives_back_the_same_room(ran, tmp_path):
    before = everything(ran)
    path = tmp_path / "room.jsonl"
    assert ran.read_events(ROOM)

    result = archive_room(ran, ROOM, path)

    assert result.removed and result.counts == {"log": 5, "turn": 5, "inbox": 1, "dead": 1}
    assert [key for key in ran.keys.room_keys(ROOM) if ran.redis.exists(key)] == []
    assert ran.redis.zscore(ran.keys.rooms, ROOM) is None
    assert import_room(ran, path) == ROOM
    assert everything(ran) == before
    # The events are not archived: the imported room's start empty.
    assert ran.read_events(ROOM) == []
    assert ran.redis.zscore(ran.keys.rooms, ROOM) is not None
    # Paused, with a post waiting: it stays off the runnable set until resumed.
    assert ran.redis.zscore(ran.keys.runnable, ROOM) is None
    assert ran.resume(ROOM) and ran.redis.zscore(ran.keys.runnable, ROOM) is not None


def test_an_archive_is_json_lines_in_the_documented_order(ran, tmp_path):
    path = tmp_path / "room.jsonl"
    archive_room(ran, ROOM, path, keep=True)
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]

    assert [line["kind"] for line in lines] == (
        ["room", "spec", "state"] + ["log"] * 5 + ["turn"] * 5 + ["inbox", "dead", "end"])
    assert lines[0]["room"] == ROOM and lines[0]["format"] == 1
    assert lines[3] == {"kind": "log", "id": "1-0", "fields": {
        "seq": "1", "sender": "User", "content": "Should we launch? 🚀", "run": "1",
        "epoch": "1", "ts": lines[3]["fields"]["ts"]}}
    assert "raw" in lines[-2] and "fields" not in lines[-2]
    assert ran.read_state(ROOM)  # --keep: still there


def test_an_import_under_another_id_leaves_the_original(ran, tmp_path):
    path = tmp_path / "room.jsonl"
    archive_room(ran, ROOM, path, keep=True)
    assert import_room(ran, path, "copy") == "copy"
    assert everything(ran, "copy") == everything(ran)


def test_an_import_into_a_taken_id_is_refused_and_writes_nothing(ran, tmp_path):
    path = tmp_path / "room.jsonl"
    archive_room(ran, ROOM, path, keep=True)
    before = everything(ran)
    with pytest.raises(RoomExists):
        import_room(ran, path)
    assert everything(ran) == before


@pytest.mark.parametrize(("cut", "says"), [
    (lambda lines: lines[:-1], "cut short (no end line)"),
    (lambda lines: lines[:5] + lines[6:], "line 6: log entry 4-0 does not follow seq 2"),
    (lambda lines: [*lines[:5], lines[5].replace('"seq":"3"', '"seq":"7"'), *lines[6:]],
     "line 6: log entry 3-0 holds seq 7"),
    (lambda lines: [lines[1], *lines[1:]], "line 1: expected the room line, found 'spec'"),
    (lambda lines: [*lines[:-1], lines[-1].replace('"log":5', '"log":4')], "end line counts"),
    (lambda lines: [lines[0].replace('"format":1', '"format":2'), *lines[1:]],
     "archive format 2; this parley reads format 1"),
    (lambda lines: [*lines[:4], "{not json", *lines[4:]], "line 5: not JSON"),
])
def test_a_file_that_is_not_a_whole_archive_is_refused_naming_the_line(ran, tmp_path, cut, says):
    path = tmp_path / "room.jsonl"
    archive_room(ran, ROOM, path)
    lines = path.read_text(encoding="utf-8").splitlines()
    broken = tmp_path / "broken.jsonl"
    broken.write_text("\n".join(cut(lines)) + "\n", encoding="utf-8")

    with pytest.raises(ArchiveError, match=says.replace("(", r"\(").replace(")", r"\)")):
        import_room(ran, broken)
    assert [key for key in ran.keys.room_keys(ROOM) if ran.redis.exists(key)] == []


def test_an_archived_spec_that_no_longer_validates_is_refused(ran, tmp_path):
    path = tmp_path / "room.jsonl"
    archive_room(ran, ROOM, path)
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    spec = json.loads(lines[1]["fields"]["json"])
    spec["agents"] = spec["agents"][:1]
    lines[1]["fields"]["json"] = json.dumps(spec)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")

    with pytest.raises(ArchiveError, match="line 2: agents: a room needs at least 2"):
        check_archive(path)


def test_a_held_room_is_not_archived_and_no_file_is_left(ran, tmp_path):
    Scripts(ran.redis).acquire(keys=[ran.keys.lease(ROOM), ran.keys.state(ROOM),
                                     ran.keys.events(ROOM)], args=["c1", 5000, 1000])
    path = tmp_path / "room.jsonl"
    with pytest.raises(RoomHeld, match="held by coordinator c1"):
        archive_room(ran, ROOM, path)
    assert not path.exists() and list(tmp_path.iterdir()) == []
    assert archive_room(ran, ROOM, path, keep=True).removed is False


def test_a_room_that_moves_on_while_archived_is_kept_and_the_file_removed(ran, tmp_path,
                                                                          monkeypatch):
    path = tmp_path / "room.jsonl"
    original = RoomStore.iter_entries

    def post_meanwhile(self, key, page=1000, end="+"):  # noqa: ANN001, ANN202
        if key == ran.keys.turns(ROOM):
            ran.post(ROOM, "Bob", "while it was written")
        return original(self, key, page, end)

    monkeypatch.setattr(RoomStore, "iter_entries", post_meanwhile)
    with pytest.raises(ValueError, match="changed meanwhile .*no archive was written"):
        archive_room(ran, ROOM, path)
    assert not path.exists()
    assert ran.redis.xlen(ran.keys.inbox(ROOM)) == 2


def test_an_archive_never_overwrites_a_file(ran, tmp_path):
    path = tmp_path / "room.jsonl"
    path.write_text("precious")
    with pytest.raises(FileExistsError):
        archive_room(ran, ROOM, path)
    assert path.read_text() == "precious" and ran.read_state(ROOM)


def test_a_long_log_is_archived_and_restored_in_pages(store, tmp_path):
    store.create_room(ROOM, scripted_spec(rotating_scripts(2, 1)))
    for seq in range(1, 2502):
        store.redis.xadd(store.keys.log(ROOM), {"seq": seq, "sender": "User",
                                                "content": f"m{seq}", "ts": "1.0"}, id=f"{seq}-0")
    store.redis.hset(store.keys.state(ROOM), "last_seq", 2501)
    path = tmp_path / "room.jsonl"

    archive_room(store, ROOM, path)
    import_room(store, path)

    assert [m.seq for m in store.read_messages(ROOM)] == list(range(1, 2502))


def test_a_room_that_goes_on_while_archived_with_keep_is_written_as_it_was(ran, tmp_path,
                                                                           monkeypatch):
    """A turn committed after the archive read the room's state is left out whole: its
    message and its turn record."""
    ran.resume(ROOM)
    keys, path = ran.keys, tmp_path / "room.jsonl"
    original = RoomStore.iter_entries

    def commit_meanwhile(self, key, page=1000, end="+"):  # noqa: ANN001, ANN202
        if key == keys.log(ROOM):
            ran.redis.xadd(keys.log(ROOM), {"seq": 6, "sender": "agent0", "content": "late",
                                            "ts": "1.0"}, id="6-0")
            ran.redis.xadd(keys.turns(ROOM), {"seq": 6, "turn": 6, "winner": "agent0"})
            ran.redis.hset(keys.state(ROOM), mapping={"last_seq": 6, "turn": 6})
        return original(self, key, page, end)

    monkeypatch.setattr(RoomStore, "iter_entries", commit_meanwhile)
    result = archive_room(ran, ROOM, path, keep=True)

    assert result.counts["log"] == 5 and result.counts["turn"] == 5
    assert check_archive(path).counts["log"] == 5
