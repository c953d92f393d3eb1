"""Archiving a room to JSON lines and importing it back, on fakeredis: the same room comes
back, a file that is not a whole archive writes nothing, and a room that moved on or is
held is not removed."""

from __future__ import annotations

import asyncio
import json
import re

import fakeredis
import pytest

from parley.shared.archive import ArchiveError, archive_room, check_archive, import_room
from parley.shared.models import ToolCallStatus
from parley.shared.scripts import Scripts
from parley.shared.store import RoomExists, RoomHeld, RoomStore
from tests.support.local_worker import LocalWorkerTransport
from tests.support.rooms import rotating_scripts, scripted_spec
from tests.support.tool_messages import commit_tool_message_now, tool_call
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


# --- an archive's values are checked as posts and specs are on their way in


def edited(ran: RoomStore, tmp_path, edit) -> object:
    """The room archived, then its lines edited by ``edit(lines)`` (JSON objects)."""
    path = tmp_path / "room.jsonl"
    archive_room(ran, ROOM, path)
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    edit(lines)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


def first(lines: list[dict], kind: str) -> dict:
    return next(line for line in lines if line["kind"] == kind)


@pytest.mark.parametrize(("field", "value", "says"), [
    ("prompt_tokens", "1e309", "line 3: state prompt_tokens '1e309' is not a finite number "
                               "from 0"),
    ("epoch", str(2**63 - 1), f"line 3: state epoch is {2**63 - 1}: an import takes counts "
                              "and totals below 10^12"),
    ("last_seq", "100000000000000", "line 3: state last_seq is 100000000000000: an import "
                                    "takes"),
    ("turn", "7.5", "line 3: state turn '7.5' is not a whole number from 0"),
    ("run", "-1", "line 3: state run '-1' is not a whole number from 0"),
    ("cost_usd", "-0.5", "line 3: state cost_usd '-0.5' is not a finite number from 0"),
    ("run_completion_tokens", "nan", "line 3: state run_completion_tokens 'nan' is not"),
    ("agent:agent0:cost_usd", "inf", "line 3: state agent:agent0:cost_usd 'inf' is not"),
    ("agent:agent1:calls", "2e12", "line 3: state agent:agent1:calls is 2e12: an import"),
    ("turn_deadline", "-inf", "line 3: state turn_deadline '-inf' is not a finite number"),
    ("spec_version", "soon", "line 3: state spec_version 'soon' is not a whole number"),
])
def test_a_state_value_the_room_cannot_go_on_with_is_refused_in_one_line(
        ran, tmp_path, field, value, says):
    path = edited(ran, tmp_path, lambda lines: lines[2]["fields"].update({field: value}))

    with pytest.raises(ArchiveError, match=re.escape(f"{path} {says}")) as refused:
        import_room(ran, path)
    assert "\n" not in str(refused.value)
    assert [key for key in ran.keys.room_keys(ROOM) if ran.redis.exists(key)] == []


@pytest.mark.parametrize(("fields", "says"), [
    ({"sender": "agent1"}, "'agent1' is an agent in room room-1: people post under their own"),
    ({"sender": "AGENT0"}, "is an agent in room room-1"),
    ({"sender": "Ann\nagent0"}, "sender 'Ann\\nagent0' must be 1-64 letters"),
    ({"content": "x" * 2049}, "the message is 2049 bytes; the most is 2048"),
    ({"content": " \n"}, "a message needs some content"),
    ({"ts": "inf"}, "ts 'inf' is not a finite number from 0"),
])
def test_a_post_waiting_that_would_be_refused_as_a_post_is_refused(ran, tmp_path, fields,
                                                                    says):
    path = edited(ran, tmp_path, lambda lines: first(lines, "inbox")["fields"].update(fields))

    with pytest.raises(ArchiveError, match=re.escape(says)):
        import_room(RoomStore(ran.redis, ran.keys, message_max_bytes=2048), path)
    assert [key for key in ran.keys.room_keys(ROOM) if ran.redis.exists(key)] == []


@pytest.mark.parametrize(("fields", "says"), [
    ({"content": "x" * 2049}, "line 4: the message is 2049 bytes; the most is 2048"),
    ({"sender": "Us\ter"}, "line 4: the sender 'Us\\ter' has control characters"),
    ({"ts": "1e309"}, "line 4: log entry 1-0 ts '1e309' is not a finite number from 0"),
    ({"run": str(10**13)}, f"line 4: log entry 1-0 run is {10**13}: an import takes"),
])
def test_a_logged_message_the_room_could_not_have_written_is_refused(ran, tmp_path, fields,
                                                                     says):
    path = edited(ran, tmp_path, lambda lines: first(lines, "log")["fields"].update(fields))

    with pytest.raises(ArchiveError, match=re.escape(says)):
        import_room(RoomStore(ran.redis, ran.keys, message_max_bytes=2048), path)


def test_a_turn_record_whose_answer_costs_a_negative_amount_is_refused(ran, tmp_path):
    def cost_less_than_nothing(lines: list[dict]) -> None:
        record = first(lines, "turn")["fields"]
        answers = json.loads(record["bids"])
        answers[0]["cost_usd"] = -2.0
        record["bids"] = json.dumps(answers)

    path = edited(ran, tmp_path, cost_less_than_nothing)

    with pytest.raises(ArchiveError, match=r"line 9: turn record \S+ answer of agent\d "
                                           r"cost_usd '-2.0' is not a finite number from 0"):
        import_room(ran, path)


@pytest.fixture
def used_tools(store, server) -> RoomStore:
    """A room whose second message was written from tool calls, in a private room."""
    store.create_room(ROOM, scripted_spec({"Selector": [], "Investigator": []}))
    store.post(ROOM, "User", "Why does checkout fail?")
    calls = [tool_call(0), tool_call(1, tool="grafana/query", status=ToolCallStatus.DENIED,
                                     result="denied by Ann: not now")]
    commit_tool_message_now(lambda: fakeredis.FakeAsyncRedis(server=server), store.keys, ROOM,
                            "Investigator", "Timeouts since 10:02.", calls, shared=False)
    return store


def test_a_messages_tool_calls_come_back_with_the_imported_room(used_tools, tmp_path):
    before = everything(used_tools)
    told = used_tools.read_messages(ROOM)[1]
    path = tmp_path / "room.jsonl"
    archive_room(used_tools, ROOM, path)
    assert import_room(used_tools, path) == ROOM
    assert everything(used_tools) == before
    message = used_tools.read_messages(ROOM)[1]
    assert message == told and message.tool_results == "private"
    assert [call.tool for call in message.tool_calls or []] == ["search_logs", "grafana/query"]


@pytest.mark.parametrize(("fields", "says"), [
    ({"tools": "{not json"}, "line 5: log entry 2-0 tools is not a JSON list of tool calls"),
    ({"tools": "{}"}, "line 5: log entry 2-0 tools is not a JSON list of tool calls"),
    ({"tools": "[" + ",".join(['"x"'] * 20_000) + "]"}, "line 5: log entry 2-0 tools is over "
                                                       "65536 bytes"),
    ({"tool_results": "everyone"}, "line 5: log entry 2-0 tool_results 'everyone' is neither "
                                   "shared nor private"),
    ({"tools": '[{"tool": "search_logs"}]'}, "line 5: tool_calls.0.id: Field required"),
])
def test_a_logged_messages_tool_calls_that_a_commit_could_not_have_written_are_refused(
        used_tools, tmp_path, fields, says):
    path = edited(used_tools, tmp_path,
                  lambda lines: [line for line in lines if line["kind"] == "log"][1]["fields"]
                  .update(fields))

    with pytest.raises(ArchiveError, match=re.escape(says)):
        import_room(used_tools, path)
    assert [key for key in used_tools.keys.room_keys(ROOM)
            if used_tools.redis.exists(key)] == []
