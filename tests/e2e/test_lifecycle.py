"""Room lifecycle with real processes: a worker and a coordinator on the real Redis, and
every lifecycle change made through the ``parley`` command as an operator would."""

from __future__ import annotations

import json
import threading
import time

import pytest
import redis
import yaml

from parley.client import Client, RunResult
from parley.processes import ProcessGroup
from parley.shared.events import AnswerArrived, RunEnded, TurnDecided
from parley.shared.keys import Keys
from parley.shared.models import StopReason
from tests.support.commands import run_parley
from tests.support.events import check_event_order
from tests.support.observe import log_events, tasks_unfinished, wait_for_scans
from tests.support.polling import wait_until
from tests.support.rooms import rotating_scripts, scripted_spec

pytestmark = [pytest.mark.e2e, pytest.mark.redis]

# Turn 2's slow call outlasts two `parley` commands: each starts a Python process, which
# takes 3-4 s on a loaded 2-core machine.
SLOW_S = 12
# Turn 1: agent1 speaks at once. Turn 2: agent0's call takes SLOW_S, holding the turn
# open, and would win it.
IN_FLIGHT = {
    "agent0": [{"score": 0.2, "message": "not yet"},
               {"score": 0.9, "message": "slow and too late", "sleep": SLOW_S}],
    "agent1": [{"score": 0.9, "message": "quick"}, {"score": 0.1, "message": "pass"}],
}
# rotating_scripts(3, 4): agent1, agent2, agent0, agent1 speak, then a lull.
ROTATION = ["agent1", "agent2", "agent0", "agent1"]


def parley_json(processes: ProcessGroup, *args: str) -> dict:
    """``parley <args> --json``, which must succeed, as its JSON object."""
    done = run_parley(processes.env, *args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def keys_left(client: redis.Redis, keys: Keys, room: str) -> list[bytes]:
    """Every key under the room's hash tag."""
    return list(client.scan_iter(match=f"{keys.prefix}:{{{room}}}:*", count=1000))


def turn_open(client: Client, room: str, turn: int) -> bool:
    state = client.state(room)
    return state.turn == turn and state.turn_open


def test_rooms_create_list_show_and_transcript_through_the_cli(processes, settings, queue,
                                                                tmp_path):
    processes.worker("-Q", queue)
    processes.coordinator("--id", "life-c")
    spec_path = tmp_path / "room.yaml"
    spec_path.write_text(yaml.safe_dump(
        scripted_spec(rotating_scripts(3, 4), queue=queue).model_dump(mode="json")))
    client = Client(settings)

    created = parley_json(processes, "rooms", "create", str(spec_path))
    room = created["room"]
    result = client.wait(room, client.post(room, "Launch?"), timeout_s=60)
    listed = parley_json(processes, "rooms", "list")["rooms"]
    shown = parley_json(processes, "rooms", "show", room)
    transcript = run_parley(processes.env, "transcript", room, "--output-type", "json")

    assert created == {"room": room, "name": "test-room", "policy": "bid",
                       "agents": ["agent0", "agent1", "agent2"], "organization": "default"}
    assert [m.sender for m in result.messages] == ["User", *ROTATION]
    assert [(r["room"], r["status"], r["policy"], r["messages"], r["holder"]) for r in listed] == [
        (room, "idle", "bid", 5, None)]
    assert listed[0]["last_activity"] > time.time() - 60
    assert (shown["stop_reason"], shown["run"], shown["streams"]["log"]["length"]) == (
        "lull", 1, 5)
    assert [row["role"] for row in json.loads(transcript.stdout.strip())] == ["User", *ROTATION]


def test_a_paused_room_keeps_posts_and_resume_runs_them(processes, settings, queue):
    processes.worker("-Q", queue)
    processes.coordinator()
    client = Client(settings)
    room = client.create_room(scripted_spec(rotating_scripts(3, 4), queue=queue))

    assert run_parley(processes.env, "rooms", "pause", room).returncode == 0
    inbox_id = client.post(room, "Launch?")
    wait_for_scans(client.redis, client.store.keys, 3)  # none of which may start the run
    state = client.state(room)
    assert (state.status, state.last_seq, state.paused) == ("idle", 0, True)
    assert client.store.stream_lengths(room)["inbox"] == 1
    assert run_parley(processes.env, "rooms", "resume", room).stdout == f"room {room} resumed\n"
    result = client.wait(room, inbox_id, timeout_s=60)

    assert [m.sender for m in result.messages] == ["User", *ROTATION]
    assert result.stop_reason is StopReason.LULL


def test_a_room_paused_while_running_stops_after_its_turn_and_resume_finishes_the_run(
        processes, settings, queue):
    processes.worker("-Q", queue, "-c", "4")
    processes.coordinator()
    client = Client(settings)
    room = client.create_room(scripted_spec(rotating_scripts(3, 4, sleep=0.5), queue=queue))
    inbox_id = client.post(room, "Launch?")
    wait_until(lambda: client.state(room).last_seq >= 2, 30, "the first agent message")

    # Paused in process: a CLI's start-up on a loaded machine can outlast the run's turns.
    assert client.pause(room)
    wait_until(lambda: client.store.lease_holder(room) is None, 30, "the coordinator to let go")
    paused_at = client.state(room).last_seq
    wait_for_scans(client.redis, client.store.keys, 3)  # none of which may take it again
    state = client.state(room)
    assert (state.status, state.paused, state.turn_open) == ("running", True, False)
    assert state.last_seq == paused_at < 5
    assert log_events(processes, "room_paused", room)

    assert run_parley(processes.env, "rooms", "resume", room).returncode == 0
    result = client.wait(room, inbox_id, timeout_s=60)
    assert [m.sender for m in result.messages] == ["User", *ROTATION]
    assert [m.seq for m in result.messages] == [1, 2, 3, 4, 5]


def test_a_cancel_while_a_turn_is_in_flight_writes_nothing_of_it_and_the_holder_stops(
        processes, settings, queue):
    processes.worker("-Q", queue, "-c", "4")
    processes.coordinator("--id", "life-c")
    client = Client(settings)
    room = client.create_room(scripted_spec(IN_FLIGHT, queue=queue))
    inbox_id = client.post(room, "Launch?")
    wait_until(lambda: turn_open(client, room, 2), 30, "turn 2 to open")
    waited: list[RunResult] = []
    waiter = threading.Thread(target=lambda: waited.append(
        Client(settings).wait(room, inbox_id, timeout_s=60)))
    waiter.start()

    done = run_parley(processes.env, "rooms", "cancel", room)

    assert done.returncode == 0 and done.stdout == f"room {room}: run 1 cancelled\n", done.stderr
    waiter.join(30)
    assert [(r.status, r.stop_reason, r.stop_detail) for r in waited] == [
        ("idle", StopReason.CANCELLED, "cancelled by request")]
    state = client.state(room)
    assert (state.status, state.stop_reason, state.turn_open) == (
        "idle", StopReason.CANCELLED, False)
    # The holder is fenced out and stops: its lease keeper drops the room.
    wait_until(lambda: log_events(processes, "room_dropped", room), 15, "the holder to stop")
    # The slow answer arrives, and nothing is made of it.
    wait_until(lambda: any(b"slow" in fields.get(b"message", b"") for _, fields in
                           client.redis.xrange(client.store.keys.bids(room))),
               SLOW_S + 15, "the slow answer")
    wait_for_scans(client.redis, client.store.keys, 2)  # none of which may take the room
    assert [(m.seq, m.sender) for m in client.messages(room)] == [(1, "User"), (2, "agent1")]
    assert [t.turn for t in client.turns(room)] == [1]
    assert client.state(room).stop_reason is StopReason.CANCELLED
    assert not log_events(processes, "turn_committed", room)[1:]

    # The room is as good as any idle room: a post starts its next run.
    again = client.wait(room, client.post(room, "Try again?"), timeout_s=60)
    assert [m.seq for m in again.messages] == [1, 2, 3, 4] and client.state(room).run == 2
    # The events tell it all in the log's order: turn 2 opened, then the cancel's end of
    # run 1 and no decision of turn 2; the slow answer arrived after the end.
    events = client.store.read_events(room)
    check_event_order(events, client.messages(room))
    ended = [e for e in events if isinstance(e, RunEnded)]
    assert [(e.run, e.stop_reason) for e in ended] == [(1, StopReason.CANCELLED),
                                                         (2, StopReason.LULL)]
    assert not [e for e in events if isinstance(e, TurnDecided) and e.turn == 2]
    slow = next(e for e in events if isinstance(e, AnswerArrived) and e.turn == 2
                and e.agent == "agent0")
    assert events.index(slow) > events.index(ended[0])


def test_a_delete_while_a_turn_is_in_flight_needs_force_and_leaves_no_key(
        processes, settings, queue, real_redis, keys):
    processes.worker("-Q", queue, "-c", "4")
    processes.coordinator("--id", "life-c")
    client = Client(settings)
    room = client.create_room(scripted_spec(IN_FLIGHT, queue=queue))
    client.post(room, "Launch?")
    wait_until(lambda: turn_open(client, room, 2), 30, "turn 2 to open")

    refused = run_parley(processes.env, "rooms", "delete", room)
    assert refused.returncode == 2
    assert refused.stderr.startswith(f"parley: room {room} is held by coordinator life-c")
    assert client.state(room).turn_open

    forced = run_parley(processes.env, "rooms", "delete", room, "--force")

    assert forced.returncode == 0, forced.stderr
    assert keys_left(real_redis, keys, room) == []
    wait_until(lambda: log_events(processes, "room_dropped", room), 15, "the holder to stop")
    # The slow call returns (its answer refused: the room is gone) and its task is acked.
    wait_until(lambda: tasks_unfinished(real_redis, queue) == 0, SLOW_S + 15,
               "the slow call to end")
    assert keys_left(real_redis, keys, room) == []
    assert real_redis.zscore(keys.rooms, room) is None
    # The coordinator serves other rooms as before.
    other = client.run(scripted_spec(rotating_scripts(2, 2), queue=queue), "next", timeout_s=60)
    assert other.stop_reason is StopReason.LULL


def test_archive_then_import_gives_back_the_same_room(processes, settings, queue, tmp_path,
                                                      real_redis, keys):
    processes.worker("-Q", queue)
    processes.coordinator()
    client = Client(settings)
    first = client.run(scripted_spec(rotating_scripts(3, 6), queue=queue, max_messages=4),
                       "Launch?", timeout_s=60)
    room = first.room
    turns_before = client.turns(room)
    path = tmp_path / "room.jsonl"

    archived = parley_json(processes, "rooms", "archive", room, "--out", str(path))

    assert archived["removed"] and archived["counts"]["log"] == 4
    assert keys_left(real_redis, keys, room) == []
    assert run_parley(processes.env, "rooms", "import", str(path)).stdout == f"{room}\n"
    assert client.messages(room) == first.messages
    assert client.turns(room) == turns_before
    # The imported room runs on from where it was: its next run continues the log.
    second = client.wait(room, client.post(room, "And now?", "Ann"), timeout_s=60)
    assert [m.seq for m in second.messages] == list(range(1, 9))
    assert second.messages[4].sender == "Ann" and client.state(room).run == 2


def test_idle_rooms_expire_and_a_room_with_a_run_in_progress_does_not(
        processes, settings, queue, real_redis, keys):
    processes.worker("-Q", queue, "-c", "4")
    processes.coordinator(env={"PARLEY_ROOM_IDLE_EXPIRY_S": "3"})
    client = Client(settings.model_copy(update={"room_idle_expiry_s": 3}))
    idle = client.run(scripted_spec(rotating_scripts(2, 1), queue=queue), "hi", timeout_s=60).room
    # Turn 1 takes 4 s: the run outlasts the expiry.
    busy = client.create_room(scripted_spec(
        {"agent0": [{"score": 0.9, "message": "thinking", "sleep": 4}],
         "agent1": [{"score": 0.1, "message": "pass"}]}, queue=queue))
    busy_post = client.post(busy, "Take your time")
    # A run's end is seen as it commits; its coordinator lets the room go a moment later,
    # and only a room nobody holds counts down to its expiry.
    shown = wait_until(lambda: (room := client.show(idle)).expires_at is not None and room, 15,
                       "the idle room to be let go")
    assert shown.last_activity is not None
    assert shown.expires_at == pytest.approx(shown.last_activity + 3)

    wait_until(lambda: not keys_left(real_redis, keys, idle), 15, "the idle room to expire")

    assert client.state(busy).status == "running"
    assert log_events(processes, "room_expired", idle)
    assert busy in [summary.room for summary in client.rooms()]
    assert idle not in [summary.room for summary in client.rooms()]
    result = client.wait(busy, busy_post, timeout_s=60)
    assert [m.content for m in result.messages] == ["Take your time", "thinking"]
    wait_until(lambda: not keys_left(real_redis, keys, busy), 15, "the finished room to expire")
