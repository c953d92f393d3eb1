"""``parley listen/talk/instruct/regenerate/queue`` and ``parley post --as/--wait`` on a
mention room, on fakeredis: what each prints, and the one line (exit 2) for bad input."""

from __future__ import annotations

import asyncio
import json

import fakeredis
import pytest
from typer.testing import CliRunner

from parley import cli
from parley.client import Client
from parley.shared.keys import Keys
from parley.shared.models import RoomSpec
from parley.shared.settings import Settings
from parley.shared.store import RoomStore
from tests.support.local_worker import LocalWorkerTransport
from tests.unit.test_mention_room import serve_once

ROOM = "room-1"


@pytest.fixture
def client(monkeypatch, server) -> Client:
    fake = fakeredis.FakeRedis(server=server)
    client = Client(Settings(key_prefix="t", room_idle_expiry_s=3600))
    client.redis = fake
    client.store = RoomStore(fake, Keys("t"))
    monkeypatch.setattr(cli.common, "Client", lambda: client)
    spec = RoomSpec.model_validate({
        "policy": {"kind": "mention", "everyone": ["dev", "sre"], "people": ["oncall"]},
        "agents": [{"name": "dev", "model": "scripted",
                    "script": [{"content": "@oncall roll back?"}]},
                   {"name": "sre", "model": "scripted", "script": [{"content": "ok"}]}]})
    client.store.create_room(ROOM, spec)
    return client


def serving(client: Client, server: fakeredis.FakeServer, monkeypatch) -> None:
    """Each post is served to the end of its run before the command waits for it."""
    post = client.post
    transport = LocalWorkerTransport(client.redis, Keys("t"))

    def post_and_serve(room: str, content: str, sender: str = "User") -> str:
        inbox_id = post(room, content, sender)
        asyncio.run(serve_once(fakeredis.FakeAsyncRedis(server=server), Keys("t"), transport,
                               room=room))
        return inbox_id

    monkeypatch.setattr(client, "post", post_and_serve)


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli.app, list(args))
    return result.exit_code, result.output


def test_post_wait_prints_the_run_with_its_stop_reason(client, server, monkeypatch):
    serving(client, server, monkeypatch)
    code, out = invoke("post", ROOM, "@dev deploy broke?", "--as", "oncall", "--wait", "--json")
    assert code == 0, out
    result = json.loads(out)
    assert result["stop_reason"] == "waiting_for_person"
    assert [m["sender"] for m in result["messages"]] == ["oncall", "dev"]
    assert result["next"] == ['answer: parley post room-1 --as oncall "..."']


def test_a_waiting_rooms_end_line_names_who_was_asked(client, server, monkeypatch):
    serving(client, server, monkeypatch)
    code, out = invoke("post", ROOM, "@dev deploy broke?", "--as", "oncall", "--wait")
    assert code == 0, out
    assert out.splitlines()[-1] == (
        "room room-1 · idle · stopped by waiting_for_person: waiting for a person's answer: "
        'dev asked oncall · next: answer: parley post room-1 --as oncall "..."')


def test_queue_json_and_text(client, server, monkeypatch):
    serving(client, server, monkeypatch)
    invoke("listen", ROOM, "sre")
    client.post(ROOM, "@dev hi", "oncall")
    code, out = invoke("queue", ROOM, "--json")
    assert code == 0
    assert json.loads(out) == {"speaking": None, "queue": [], "listening": ["sre"],
                               "asked": [["dev", "oncall"]], "waiting": True, "over": False}
    code, out = invoke("queue", ROOM)
    assert "asked: dev asked oncall" in out and "waiting: True" in out


@pytest.mark.parametrize(("args", "line"), [
    (("post", ROOM, "hi", "--as", "mallory"), "'mallory' is not one of room room-1's people"),
    (("post", ROOM, "hi", "--as", "dev"), "'dev' is an agent in room room-1"),
    (("listen", ROOM, "ops"), "room room-1 has no agent 'ops'"),
    (("instruct", ROOM, "dev", ""), "an instruction needs text"),
    (("queue", "nope"), "no room 'nope'"),
])
def test_bad_input_is_one_line(client, args, line):
    code, out = invoke(*args)
    assert code == 2
    assert out.startswith(f"parley: {line}") and out.count("\n") == 1


def test_instruct_talk_regenerate_queue_floor_changes(client):
    for args in (("instruct", ROOM, "dev", "summarise"), ("talk", ROOM, "dev"),
                 ("regenerate", ROOM)):
        assert invoke(*args)[0] == 0
    ops = [c.op for c in client.store.read_floor_ops(ROOM, "0-0")]
    assert ops == ["instruct", "talk", "regenerate"]
    assert client.state(ROOM).status == "running"  # a change starts a run to serve it


def test_a_room_of_another_policy_is_refused(client):
    from tests.support.rooms import rotating_scripts, scripted_spec
    client.store.create_room("bid-room", scripted_spec(rotating_scripts(2, 1)))
    code, out = invoke("queue", "bid-room")
    assert code == 2 and "has the bid policy" in out


def test_run_as_posts_the_task_as_that_person(client, server, monkeypatch, tmp_path):
    serving(client, server, monkeypatch)
    spec = tmp_path / "room.yaml"
    spec.write_text(json.dumps(client.store.read_spec(ROOM)[1].model_dump(mode="json")))
    code, out = invoke("run", str(spec), "--task", "@sre status", "--as", "oncall", "--json")
    assert code == 0, out
    result = json.loads(out)
    assert [(m["sender"], m["content"]) for m in result["messages"]] == [
        ("oncall", "@sre status"), ("sre", "ok")]
    assert result["stop_reason"] == "queue_empty"


@pytest.mark.parametrize(("policy", "line"), [
    ("{kind: mention, everyone: [ops]}", "policy.everyone names 'ops', which is not an agent"),
    ("{kind: mention, people: [dev]}", "policy.people names 'dev', which is an agent"),
    ("{kind: mention, addressed_only: true, dispatch: {model: scripted, script: []}}",
     "addressed_only and dispatch are exclusive"),
    ("{kind: mention, max_depth: 0}", "policy.max_depth: Input should be greater than"),
    ("{kind: mention, dispatch: {threshold: 2, model: x}}", "policy.dispatch.threshold"),
])
def test_a_bad_mention_spec_is_one_line(tmp_path, policy, line):
    path = tmp_path / "room.yaml"
    path.write_text(f"policy: {policy}\nagents:\n  - {{name: dev, model: scripted, script: []}}"
                    "\n  - {name: sre, model: scripted, script: []}\n")
    code, out = invoke("run", str(path), "--task", "x")
    assert code == 2 and out.count("\n") == 1
    assert line in out, out


def test_each_speak_queue_change_says_what_it_queued_in_one_line(client):
    outputs = [invoke(*args) for args in (
        ("listen", ROOM, "sre"), ("talk", ROOM, "sre"), ("instruct", ROOM, "dev", "summarise"),
        ("regenerate", ROOM))]
    ids = [c.id for c in client.store.read_floor_ops(ROOM, "0-0")]
    assert outputs == [
        (0, f"room room-1: sre only listens from its next turn (a person naming it gives it "
            f"one) (change {ids[0]})\n"),
        (0, f"room room-1: sre talks again (change {ids[1]})\n"),
        (0, f"room room-1: dev queued at the front for a turn on the instruction "
            f"(change {ids[2]})\n"),
        (0, f"room room-1: each agent that answered the last person's message queued at the "
            f"front (change {ids[3]})\n")]


def test_a_speak_queue_change_with_json_is_one_object(client):
    code, out = invoke("instruct", ROOM, "dev", "summarise", "--json")
    [change] = client.store.read_floor_ops(ROOM, "0-0")
    assert (code, json.loads(out)) == (
        0, {"room": ROOM, "op": "instruct", "agent": "dev", "change": change.id})


def test_post_without_wait_says_where_it_posted(client):
    code, out = invoke("post", ROOM, "@dev hi", "--as", "oncall")
    [(inbox_id, _)] = client.redis.xrange(Keys("t").inbox(ROOM))
    assert (code, out) == (0, f"posted to room room-1 as oncall (inbox entry "
                              f"{inbox_id.decode()})\n")
    code, out = invoke("post", ROOM, "@sre hi", "--as", "oncall", "--json")
    assert code == 0 and json.loads(out)["sender"] == "oncall"
    assert set(json.loads(out)) == {"room", "sender", "inbox_id"}
