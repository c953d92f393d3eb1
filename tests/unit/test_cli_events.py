"""``parley events`` and ``parley turns`` on fakeredis: a room's events as lines or JSON
lines, each turn's answers, and the open turn's answered and pending calls."""

from __future__ import annotations

import asyncio
import json
import threading

import fakeredis
import pytest
from typer.testing import CliRunner

from parley import cli
from parley.client import Client
from parley.client.turn_report import open_turn_progress, read_turn_report
from parley.coordinator.lease import Leases
from parley.coordinator.room_io import RoomIO
from parley.shared.events import Event, MessageCommitted, RunStarted
from parley.shared.models import Answer, AnswerStatus, CallKind, ErrorKind
from parley.shared.scripts import Scripts
from tests.support.fake_turns import serve_until_idle
from tests.support.reads import BlockingReads
from tests.support.rooms import rotating_scripts, scripted_spec
from tests.unit.test_selector_room import selector_spec

ROOM = "room-1"


@pytest.fixture
def client(client, monkeypatch) -> Client:
    """The test's Client, as the CLI's."""
    monkeypatch.setattr(cli.common, "Client", lambda: client)
    return client


def open_a_turn(server, keys) -> None:
    """A coordinator that takes the room, drains it and opens its next turn, then dies."""

    async def take() -> None:
        async_redis = fakeredis.FakeAsyncRedis(server=server)
        scripts = Scripts(async_redis)
        lease = await Leases(async_redis, keys, scripts, "c1", 5.0).acquire(ROOM)
        assert lease is not None
        io = RoomIO(async_redis, keys, scripts)
        await io.drain_inbox(lease)
        await io.open_turn(lease, 30)

    asyncio.run(take())


def ran_room(client, store, server, keys) -> None:
    store.create_room(ROOM, scripted_spec({
        "agent0": [{"score": 0.9, "message": "first"}, {"score": 0.8, "message": "again"}],
        "agent1": [{"score": 0.7, "message": "me too"}, {"error": "provider down"}],
    }))
    client.post(ROOM, "go")
    serve_until_idle(server, keys)


def invoke(*args: str):
    return CliRunner().invoke(cli.app, list(args))


# --- parley events


def test_events_json_is_one_object_per_event_in_the_streams_order(client, store, server, keys):
    ran_room(client, store, server, keys)

    result = invoke("events", ROOM, "--json", "--no-follow")

    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.output.splitlines()]
    assert [line["type"] for line in lines] == [e.type for e in store.read_events(ROOM)]
    assert lines[1] == {"id": lines[1]["id"], "type": "run_started", "run": 1,
                        "ts": lines[1]["ts"]}
    committed = [line for line in lines if line["type"] == "message_committed"]
    assert [(c["seq"], c["sender"], c.get("turn")) for c in committed] == [
        (1, "User", None), (2, "agent0", 1)]
    failed = [line for line in lines if line["type"] == "answer_arrived"
              and line["status"] == "error"]
    assert [(f["agent"], f["turn"], f["error_kind"]) for f in failed] == [
        ("agent1", 2, "scripted")]
    answered = [line for line in lines if line["type"] == "answer_arrived"]
    assert all("error_kind" not in line for line in answered if line["status"] == "ok")


def test_events_lines_name_each_type_and_its_fields(client, store, server, keys):
    ran_room(client, store, server, keys)

    result = invoke("events", ROOM, "--no-follow")

    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert len(lines) == len(store.read_events(ROOM))
    decided = [line for line in lines if " turn_decided " in line]
    assert decided[0].endswith("turn=1 run=1 winner=agent0 score=0.9")
    assert decided[1].endswith("turn=2 run=1 stop_reason=lull")
    assert any(" run_ended " in line and "answer=first" in line for line in lines)


def test_events_after_an_id_starts_past_it(client, store, server, keys):
    ran_room(client, store, server, keys)
    events = store.read_events(ROOM)

    result = invoke("events", ROOM, "--json", "--no-follow", "--after", events[-3].id)

    assert [json.loads(line)["id"] for line in result.output.splitlines()] == [
        e.id for e in events[-2:]]


@pytest.mark.parametrize("after", ["latest", "12-x", "-1", "1-2-3"])
def test_events_after_something_that_is_not_an_id_is_one_line(client, store, after):
    store.create_room(ROOM, scripted_spec(rotating_scripts(2, 1)))
    result = invoke("events", ROOM, "--after", after)
    assert result.exit_code == 2
    assert result.output == f"parley: --after {after!r} is not an event id (like 1764500000123-0)\n"


def test_events_until_a_type_stops_after_the_first_event_of_it(client, store, server, keys):
    ran_room(client, store, server, keys)
    events = [e.type for e in store.read_events(ROOM)]

    result = invoke("events", ROOM, "--json", "--until", "run_ended")

    assert result.exit_code == 0, result.output
    assert [json.loads(line)["type"] for line in result.output.splitlines()] == events[
        :events.index("run_ended") + 1]


def test_events_until_something_that_is_not_an_event_type_is_one_line(client, store):
    store.create_room(ROOM, scripted_spec(rotating_scripts(2, 1)))
    result = invoke("events", ROOM, "--until", "run_end")
    assert result.exit_code == 2
    assert result.output.startswith("parley: --until 'run_end' is not an event type (one of: "
                                    "lease_taken, run_started, ")
    assert result.output.count("\n") == 1


def test_events_of_an_unknown_room_is_one_line(client):
    result = invoke("events", "nowhere", "--no-follow")
    assert (result.exit_code, result.output) == (2, "parley: no room 'nowhere'\n")


def test_events_follows_until_ctrl_c(client, store, monkeypatch):
    def two_then_ctrl_c(room, after, follow):
        assert (room, after, follow) == (ROOM, "0-0", True)
        yield RunStarted(id="1-0", type="run_started", ts=1.0, run=1)
        yield MessageCommitted(id="2-0", type="message_committed", ts=1.0, seq=1,
                               sender="User", run=1)
        raise KeyboardInterrupt

    monkeypatch.setattr(client, "events", two_then_ctrl_c)
    result = invoke("events", ROOM, "--json")
    assert result.exit_code == 0, result.output
    assert [json.loads(line)["id"] for line in result.output.splitlines()] == ["1-0", "2-0"]


def test_following_events_gives_each_new_one_as_it_is_written(client, store, server, keys):
    store.create_room(ROOM, scripted_spec(rotating_scripts(2, 2)))
    followed = client.events(ROOM)

    reads = BlockingReads(store)

    def post_later() -> None:
        reads.wait_until_reading()
        client.post(ROOM, "go")
        serve_until_idle(server, keys)

    thread = threading.Thread(target=post_later)
    thread.start()
    try:
        first: list[Event] = [next(followed) for _ in range(3)]
    finally:
        thread.join()
    assert [e.type for e in first] == ["lease_taken", "run_started", "message_committed"]


# --- parley turns


def test_turns_json_gives_every_answer_of_every_turn(client, store, server, keys):
    ran_room(client, store, server, keys)

    result = invoke("turns", ROOM, "--json")

    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["open_turn"] is None
    assert [(t["turn"], t["winner"], t["stop_reason"]) for t in report["turns"]] == [
        (1, "agent0", None), (2, None, "lull")]
    first = {a["agent"]: a for a in report["turns"][0]["answers"]}
    assert (first["agent0"]["score"], first["agent0"]["adjusted"], first["agent0"]["status"]) == (
        0.9, 0.9, "ok")
    second = {a["agent"]: a for a in report["turns"][1]["answers"]}
    # agent0 spoke last turn: its 0.8 is penalised by the recency penalty.
    assert second["agent0"]["adjusted"] == pytest.approx(0.5)
    assert (second["agent1"]["status"], second["agent1"]["error_kind"]) == ("error", "scripted")
    assert set(first["agent0"]) >= {"kind", "phase", "latency_ms", "prompt_tokens",
                                    "completion_tokens"}


def test_turns_shows_each_turns_outcome_and_answers(client, store, server, keys):
    ran_room(client, store, server, keys)

    result = invoke("turns", ROOM)

    assert result.exit_code == 0, result.output
    assert "turn 1 · run 1 · agent0 spoke (0.90) · " in result.output
    assert "turn 2 · run 1 · nobody spoke · run ended: lull" in result.output
    assert "scripted" in result.output and "0.50" in result.output


def test_turns_marks_a_silent_bid_as_run_does(client, store, server, keys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    store.create_room(ROOM, scripted_spec({
        "agent0": [{"score": 0.9, "message": "first"}],
        "agent1": [{"score": 0.3, "message": ""}]}))
    client.post(ROOM, "go")
    serve_until_idle(server, keys)

    rows = [line.split() for line in invoke("turns", ROOM).output.splitlines()]

    first_turn = [row for row in rows if row[:1] in (["agent0"], ["agent1"])][:2]
    assert [(row[0], row[5]) for row in first_turn] == [("agent0", "ok"), ("agent1", "silent")]


def test_turns_last_keeps_the_newest(client, store, server, keys):
    ran_room(client, store, server, keys)
    report = json.loads(invoke("turns", ROOM, "--json", "--last", "1").output)
    assert [t["turn"] for t in report["turns"]] == [2]


def test_the_open_turn_shows_who_answered_and_who_is_pending(client, store, server, keys):
    store.create_room(ROOM, scripted_spec(rotating_scripts(4, 2)))
    client.post(ROOM, "go")
    open_a_turn(server, keys)
    store.write_answers(ROOM, [Answer(agent="agent2", turn=1, score=0.4, message="hm"),
                            Answer(agent="agent0", turn=1, status=AnswerStatus.ERROR,
                                error_kind=ErrorKind.AUTH)], 1000)

    report = json.loads(invoke("turns", ROOM, "--json").output)
    human = invoke("turns", ROOM).output

    in_flight = report["open_turn"]
    assert (in_flight["turn"], in_flight["phase"], in_flight["kind"]) == (1, 0, "bid")
    assert in_flight["answered"] == ["agent0", "agent2"]
    assert in_flight["pending"] == ["agent1", "agent3"]
    assert [a["agent"] for a in in_flight["answers"]] == ["agent2", "agent0"]
    assert "turn 1 · run 1 · open · phase 0 (bid) · answered 2 of 4 · pending: agent1, agent3" in human


def test_a_late_answer_of_an_earlier_turn_does_not_count_for_the_open_one(store, server, keys):
    store.create_room(ROOM, scripted_spec(rotating_scripts(2, 3)))
    store.post(ROOM, "User", "go")
    open_a_turn(server, keys)
    store.write_answers(ROOM, [Answer(agent="agent0", turn=0), Answer(agent="agent1", turn=1)], 1000)

    in_flight = read_turn_report(store, ROOM).open_turn

    assert in_flight is not None
    assert (in_flight.answered, in_flight.pending) == (["agent1"], ["agent0"])


def test_a_selector_turn_past_its_pick_waits_on_the_chosen_participant(store, server, keys):
    spec = selector_spec(["budget"])
    store.create_room(ROOM, spec)
    store.post(ROOM, "User", "Plan a trip")
    open_a_turn(server, keys)
    state = store.read_state(ROOM)
    picked = Answer(agent="selector", turn=1, kind=CallKind.SELECT, message="budget")

    before = open_turn_progress(spec, state, [])
    after = open_turn_progress(spec, state, [("1-0", picked)])

    assert (before.phase, before.kind, before.pending) == (0, CallKind.SELECT, ["selector"])
    assert (after.phase, after.kind, after.answered, after.pending) == (
        1, CallKind.SPEAK, [], ["budget"])
    assert [a.agent for a in after.answers] == ["selector"]


def test_a_selector_asked_again_is_pending_in_the_next_phase(store, server, keys):
    spec = selector_spec(["nobody", "planner"])
    store.create_room(ROOM, spec)
    store.post(ROOM, "User", "Plan a trip")
    open_a_turn(server, keys)
    state = store.read_state(ROOM)
    no_pick = Answer(agent="selector", turn=1, kind=CallKind.SELECT, message="nobody")

    progress = open_turn_progress(spec, state, [("1-0", no_pick)])

    assert (progress.phase, progress.kind, progress.pending) == (1, CallKind.SELECT, ["selector"])


def test_pause_resume_and_cancel_through_the_cli_are_events(client, store, server, keys):
    store.create_room(ROOM, scripted_spec(rotating_scripts(2, 4)))
    client.post(ROOM, "go")
    open_a_turn(server, keys)  # run 1 is in its first turn
    client.post(ROOM, "wait")
    for command in (["pause"], ["resume"], ["cancel", "--reason", "wrong room"]):
        assert invoke("rooms", *command, ROOM).exit_code == 0

    result = invoke("events", ROOM, "--json", "--no-follow")
    lines = [json.loads(line) for line in result.output.splitlines()][-3:]
    human = invoke("events", ROOM, "--no-follow").output.splitlines()[-3:]

    assert [{k: v for k, v in line.items() if k not in ("id", "ts")} for line in lines] == [
        {"type": "room_paused", "run": 1, "status": "running", "turn_open": True},
        {"type": "room_resumed", "run": 1, "status": "running", "waiting": 1},
        {"type": "run_ended", "run": 1, "status": "idle", "stop_reason": "cancelled",
         "stop_detail": "wrong room"}]
    assert human[0].endswith("room_paused       run=1 status=running turn_open=true")
    assert human[2].endswith('stop_reason=cancelled stop_detail="wrong room"')


# --- parley follow


def test_follow_prints_each_runs_end_between_the_messages(client, store, server, keys):
    store.create_room(ROOM, scripted_spec(rotating_scripts(2, 2), max_messages=2))
    client.post(ROOM, "go")
    serve_until_idle(server, keys)
    timeline = client.timeline

    def until_ctrl_c(room, after_seq):
        items = timeline(room, after_seq)
        # What the room said before following began, then (as if live) its run's end.
        yield next(items)
        yield next(items)
        yield from (e for e in store.read_events(ROOM) if e.type == "run_ended")
        raise KeyboardInterrupt

    client.timeline = until_ctrl_c  # type: ignore[method-assign]
    result = invoke("follow", ROOM)

    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [
        "  1 User: go", "  2 agent1 (score 0.90): agent1 on turn 1",
        "run 1 ended · idle · stopped by max_messages"]


def test_turns_of_an_unknown_room_is_one_line(client):
    result = invoke("turns", "nowhere")
    assert (result.exit_code, result.output) == (2, "parley: no room 'nowhere'\n")


def test_turns_of_a_room_without_turns_says_so(client, store):
    store.create_room(ROOM, scripted_spec(rotating_scripts(2, 1)))
    assert invoke("turns", ROOM).output == f"room {ROOM} has no turns yet\n"
    assert json.loads(invoke("turns", ROOM, "--json").output) == {
        "room": ROOM, "turns": [], "open_turn": None}
