"""``parley rooms ...`` and ``parley transcript``: what each prints, plain and ``--json``,
and the one line (exit 2) for what cannot be done; on fakeredis."""

from __future__ import annotations

import json

import pytest
import yaml
from typer.testing import CliRunner

from parley import cli
from parley.client import Client
from parley.shared.scripts import Scripts
from parley.shared.settings import Settings
from tests.support.fake_client import cli_on_fake_client
from tests.support.rooms import rotating_scripts, scripted_spec

ROOM = "room-1"


@pytest.fixture
def client(monkeypatch) -> Client:
    return cli_on_fake_client(monkeypatch, Settings(key_prefix="t", room_idle_expiry_s=3600))


@pytest.fixture
def room(client) -> str:
    """A room whose conversation is a task and two agents' messages."""
    client.store.create_room(ROOM, scripted_spec(rotating_scripts(2, 1)))
    log = client.store.keys.log(ROOM)
    for seq, (sender, content, score) in enumerate(
            [("User", "Launch?", None), ("agent1", "Yes.", "0.9"), ("agent0", "No.", "0.8")], 1):
        fields = {"seq": seq, "sender": sender, "content": content, "run": 1, "ts": "1.5"}
        client.redis.xadd(log, {**fields, **({"score": score} if score else {})}, id=f"{seq}-0")
    client.redis.hset(client.store.keys.state(ROOM),
                      mapping={"last_seq": 3, "run": 1, "cost_usd": "0.0125"})
    return ROOM


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli.app, list(args))
    return result.exit_code, result.output


def hold(client: Client, room: str, owner: str = "c1") -> None:
    keys = client.store.keys
    Scripts(client.redis).acquire(keys=[keys.lease(room), keys.state(room), keys.events(room)],
                                  args=[owner, 60000, 1000])


def test_rooms_create_prints_the_room_id_and_json_gives_the_room(client, tmp_path):
    spec = tmp_path / "room.yaml"
    spec.write_text(yaml.safe_dump(scripted_spec(rotating_scripts(2, 1)).model_dump(mode="json")))

    code, plain = invoke("rooms", "create", str(spec))
    code_json, as_json = invoke("rooms", "create", str(spec), "--id", "my-room", "--json")

    assert code == 0 and plain.startswith("test-room-") and len(plain.splitlines()) == 1
    assert client.state(plain.strip()).status == "idle"
    assert code_json == 0
    assert json.loads(as_json) == {"room": "my-room", "name": "test-room", "policy": "bid",
                                   "agents": ["agent0", "agent1"], "organization": "default"}
    assert invoke("rooms", "create", str(spec), "--id", "my-room") == (
        2, "parley: room 'my-room' already exists\n")


def test_rooms_create_with_org_makes_a_room_of_it_and_list_org_shows_only_its_rooms(
        client, tmp_path):
    spec = tmp_path / "room.yaml"
    spec.write_text(yaml.safe_dump(scripted_spec(rotating_scripts(2, 1)).model_dump(mode="json")))

    assert invoke("rooms", "create", str(spec), "--id", "a1", "--org", "acme")[0] == 0
    assert invoke("rooms", "create", str(spec), "--id", "d1")[0] == 0
    code, listed = invoke("rooms", "list", "--org", "acme", "--json")

    assert code == 0
    assert [(r["room"], r["organization"]) for r in json.loads(listed)["rooms"]] == [
        ("a1", "acme")]
    assert client.state("d1").organization == "default"
    assert invoke("rooms", "create", str(spec), "--org", "Not An Org")[1].startswith(
        "parley: invalid organization 'Not An Org'")


def test_rooms_list_shows_status_policy_activity_holder_messages_and_cost(client, room):
    hold(client, room)
    client.store.pause(room)

    code, table = invoke("rooms", "list")
    _, as_json = invoke("rooms", "list", "--json")

    assert code == 0
    for text in ("room-1", "idle, paused", "bid", "s ago", "c1", "3", "$0.0125"):
        assert text in table
    [listed] = json.loads(as_json)["rooms"]
    assert {k: listed[k] for k in ("room", "status", "paused", "policy", "holder", "messages",
                                   "cost_usd", "expires_at")} == {
        "room": "room-1", "status": "idle", "paused": True, "policy": "bid", "holder": "c1",
        "messages": 3, "cost_usd": 0.0125, "expires_at": None}
    assert listed["last_activity"] > 0


def test_rooms_show_gives_the_room_and_when_it_would_expire(client, room):
    code, as_json = invoke("rooms", "show", room, "--json")
    _, plain = invoke("rooms", "show", room)

    shown = json.loads(as_json)
    assert code == 0
    assert shown["agents"] == ["agent0", "agent1"] and shown["messages"] == 3
    assert shown["expires_at"] == pytest.approx(shown["last_activity"] + 3600)
    assert shown["streams"]["log"] == {"length": 3, "max_length": None, "first_seq": 1}
    assert "status: idle\n" in plain and "agents: agent0, agent1\n" in plain


def test_pause_and_resume_say_what_they_did(client, room):
    assert invoke("rooms", "pause", room) == (
        0, f"room {room} paused: posts wait and no turn starts until it is resumed\n")
    assert invoke("rooms", "pause", room, "--json") == (
        0, json.dumps({"room": room, "paused": True, "changed": False}) + "\n")
    assert client.state(room).paused
    assert invoke("rooms", "resume", room) == (0, f"room {room} resumed\n")
    assert invoke("rooms", "resume", room) == (0, f"room {room} was not paused\n")


def test_cancel_ends_a_run_in_progress_and_says_when_there_is_none(client, room):
    assert invoke("rooms", "cancel", room) == (0, f"room {room} has no run in progress\n")
    client.redis.hset(client.store.keys.state(room), "status", "running")
    hold(client, room)
    client.post(room, "and this?", "Ann")

    code, as_json = invoke("rooms", "cancel", room, "--reason", "operator stop", "--json")

    assert code == 0
    assert json.loads(as_json) == {"room": room, "cancelled": True, "run": 1, "posts_waiting": 1}
    state = client.state(room)
    assert (state.status, state.stop_reason, state.stop_detail) == (
        "idle", "cancelled", "operator stop")
    assert client.store.lease_holder(room) is None


def test_delete_is_refused_while_held_and_forced_fences_the_holder_out(client, room):
    hold(client, room)

    code, refused = invoke("rooms", "delete", room)

    assert code == 2 and len(refused.splitlines()) == 1
    assert refused.startswith(f"parley: room {room} is held by coordinator c1")
    assert "--force" in refused
    assert client.state(room)
    # lease, state, spec, log and events (the lease_taken of the hold)
    assert invoke("rooms", "delete", room, "--force", "--json") == (
        0, json.dumps({"room": room, "deleted": True, "keys": 5}) + "\n")
    assert not client.redis.exists(client.store.keys.events(room))
    assert invoke("rooms", "show", room) == (2, f"parley: no room {room!r}\n")


def test_archive_then_import_through_the_cli(client, room, tmp_path):
    path = tmp_path / "room.jsonl"
    before = client.transcript(room, "json")

    code, archived = invoke("rooms", "archive", room, str(path))

    assert code == 0
    assert archived == (f"room {room} archived to {path}: 3 messages, 0 turn records, 0 posts "
                        "waiting; removed from Redis\n")
    assert invoke("rooms", "show", room)[0] == 2
    assert invoke("rooms", "import", str(path)) == (0, f"{room}\n")
    assert client.transcript(room, "json") == before
    code, again = invoke("rooms", "archive", room, "--out", str(path), "--json")
    assert code == 2 and again == f"parley: {path} exists: archives are never overwritten; " \
                                  "choose another file\n"


def test_archive_still_takes_its_file_as_out(client, room, tmp_path):
    path = tmp_path / "room.jsonl"
    assert invoke("rooms", "archive", room, "--out", str(path), "--keep") == (
        0, f"room {room} archived to {path}: 3 messages, 0 turn records, 0 posts waiting; "
           "kept in Redis\n")


@pytest.mark.parametrize(("files", "line"), [
    ((), "rooms archive needs the file to write: parley rooms archive ROOM FILE"),
    (("a.jsonl", "--out", "b.jsonl"),
     "rooms archive was given two files (a.jsonl and --out b.jsonl): give one"),
])
def test_archive_given_no_file_or_two_is_one_line(client, room, files, line):
    assert invoke("rooms", "archive", room, *files) == (2, f"parley: {line}\n")


def test_importing_a_file_that_is_not_an_archive_is_one_line(client, tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("hello\n")
    code, output = invoke("rooms", "import", str(path))
    assert code == 2 and output == f"parley: {path} line 1: not JSON (Expecting value: line 1 " \
                                   "column 1 (char 0))\n"
    code, output = invoke("rooms", "import", str(tmp_path / "missing.jsonl"))
    assert code == 2 and output.startswith("parley: cannot read") and "No such file" in output


def test_importing_an_archive_with_a_total_past_any_number_is_one_line(client, room, tmp_path):
    path = tmp_path / "room.jsonl"
    assert invoke("rooms", "archive", room, "--out", str(path))[0] == 0
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    lines[2]["fields"]["prompt_tokens"] = "1e309"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))

    code, output = invoke("rooms", "import", str(path))

    assert (code, output) == (2, f"parley: {path} line 3: state prompt_tokens '1e309' is not a "
                                 "finite number from 0\n")


def test_transcript_prints_the_whole_conversation_one_message_a_line(client, room):
    assert invoke("transcript", room) == (0, "  1 User: Launch?\n  2 agent1 (score 0.90): "
                                             "Yes.\n  3 agent0 (score 0.80): No.\n")


@pytest.mark.parametrize(("output_type", "expected"), [
    ("str", "User: Launch?\n\nagent1: Yes.\n\nagent0: No.\n"),
    ("final", "No.\n"),
    ("list", json.dumps([{"role": "User", "content": "Launch?"},
                         {"role": "agent1", "content": "Yes."},
                         {"role": "agent0", "content": "No."}]) + "\n"),
])
def test_transcript_in_groupchats_output_types(client, room, output_type, expected):
    assert invoke("transcript", room, "--output-type", output_type) == (0, expected)


def test_transcript_json_and_its_one_line_errors(client, room):
    code, as_json = invoke("transcript", room, "--json")
    messages = json.loads(as_json)["messages"]
    assert code == 0 and [(m["seq"], m["sender"], m["score"]) for m in messages] == [
        (1, "User", None), (2, "agent1", 0.9), (3, "agent0", 0.8)]
    code, refused = invoke("transcript", room, "--output-type", "xml")
    assert code == 2 and refused.startswith("parley: output type 'xml' is not one of text, list")
    assert invoke("transcript", "nope") == (2, "parley: no room 'nope'\n")


@pytest.mark.parametrize("command", [["rooms", "pause"], ["rooms", "resume"],
                                     ["rooms", "cancel"], ["rooms", "delete"]])
def test_lifecycle_commands_on_a_missing_room_are_one_line(client, command):
    assert invoke(*command, "nope") == (2, "parley: no room 'nope'\n")


def test_status_shows_a_paused_room(client, room):
    client.store.pause(room)
    code, table = invoke("status")
    assert code == 0 and "idle, paused" in table


def test_status_leaves_out_a_room_deleted_while_it_was_listed(client, room, monkeypatch):
    client.store.create_room("other", scripted_spec(rotating_scripts(2, 1)))
    listed = client.store.list_rooms

    def list_then_delete(limit: int = 100) -> list[str]:
        rooms = listed(limit)
        client.store.delete(room)
        return rooms

    monkeypatch.setattr(client.store, "list_rooms", list_then_delete)
    code, table = invoke("status")
    assert code == 0 and "other" in table and room not in table
