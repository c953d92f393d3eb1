"""A bid room across real processes: a Celery worker and a coordinator, on the real Redis."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest
import yaml

from parley.client import Client
from parley.coordinator import policies
from parley.shared.models import StopReason
from tests.support.commands import run_parley
from tests.support.rooms import rotating_scripts, scripted_spec

pytestmark = [pytest.mark.e2e, pytest.mark.redis]

SCRIPTS = {
    "Optimist": [
        {"score": 0.6, "message": "Ship it.", "sleep": 0.05},
        {"score": 0.7, "message": "  Rollback is one flag.\n**User:** Thanks!  ", "sleep": 0.1},
        {"score": 0.85, "message": "Small cohort first."},
    ],
    "Skeptic": [
        {"score": 0.8, "message": "What fails first?", "sleep": 0.1},
        {"score": 0.75, "message": "Flags do not roll back schemas."},
        {"arguments": '{"score": "0.95", "message": "Rehearse the migration."}'},
    ],
    "Economist": [
        {"score": 3, "message": ""},
        {"content": "prose, no tool call"},
        {"score": 0.9, "message": "Delay is cheap."},
    ],
    "Ethicist": [
        {"error": "provider down"},
        {"score": 0.2, "message": "no"},
    ],
}
# Turn 1: Skeptic 0.8 beats Optimist 0.6 (Economist's 3 clamps to 1 but says nothing).
# Turn 2: Skeptic is recent (0.75 - 0.3), so Optimist's 0.7 wins, cut where it speaks as User.
# Turn 3: Skeptic's string score 0.95 beats Economist 0.9; Optimist is recent (0.55).
# Turn 4: everyone past their script is silent: a lull.
EXPECTED = [
    (1, "User", "Launch next week?", None),
    (2, "Skeptic", "What fails first?", 0.8),
    (3, "Optimist", "Rollback is one flag.", 0.7),
    (4, "Skeptic", "Rehearse the migration.", 0.95),
]


def test_a_scripted_room_produces_the_exact_transcript(processes, settings, queue):
    processes.worker("-Q", queue, "-c", "8")
    processes.coordinator()
    client = Client(settings)

    result = client.run(scripted_spec(SCRIPTS, queue=queue), "Launch next week?", timeout_s=60)

    assert [(m.seq, m.sender, m.content, m.score) for m in result.messages] == EXPECTED
    assert (result.status, result.stop_reason) == ("idle", StopReason.LULL)


def test_every_committed_turn_replays_to_its_winner(processes, settings, queue):
    processes.worker("-Q", queue, "-c", "8")
    processes.coordinator()
    client = Client(settings)
    spec = scripted_spec(SCRIPTS, queue=queue)

    result = client.run(spec, "Launch next week?", timeout_s=60)
    turns = client.turns(result.room)

    assert [t.winner for t in turns] == ["Skeptic", "Optimist", "Skeptic", None]
    assert [t.cuts for t in turns] == [{}, {"Optimist": "User"}, {}, {}]
    posted = {m.turn: m.content for m in result.messages if m.turn is not None}
    for record in turns:
        replayed = policies.replay(spec, record)
        assert (replayed.winner, replayed.cuts) == (record.winner, record.cuts)
        assert replayed.message == posted.get(record.turn, "")
    first = {bid.agent: bid for bid in turns[0].bids}
    assert first["Ethicist"].status == "error" and "provider down" in first["Ethicist"].error
    assert first["Economist"].score == 1.0
    assert {bid.agent: bid.status for bid in turns[1].bids}["Economist"] == "unparsed"


def test_the_run_stops_at_max_messages_counting_the_seed(processes, settings, queue):
    processes.worker("-Q", queue)
    processes.coordinator()
    spec = scripted_spec(rotating_scripts(3, 10), queue=queue, max_messages=4)

    result = Client(settings).run(spec, "go", timeout_s=60)

    assert [m.sender for m in result.messages] == ["User", "agent1", "agent2", "agent0"]
    assert result.stop_reason is StopReason.MAX_MESSAGES


def test_without_workers_the_run_ends_saying_no_bid_arrived(processes, settings, queue):
    processes.coordinator()
    spec = scripted_spec(rotating_scripts(2, 3), queue=queue, bid_timeout_s=0.5)

    result = Client(settings).run(spec, "anyone?", timeout_s=30)

    assert (result.status, result.stop_reason) == ("failed", StopReason.NO_BIDS)
    assert queue in result.stop_detail
    assert [m.sender for m in result.messages] == ["User"]


def test_rooms_run_side_by_side_on_one_coordinator(processes, settings, queue):
    processes.worker("-Q", queue, "-c", "32")
    processes.coordinator()
    client = Client(settings)
    spec = scripted_spec(rotating_scripts(4, 6, sleep=0.05), queue=queue)

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda i: client.run(spec, f"task {i}", timeout_s=60), range(8)))

    assert len({r.room for r in results}) == 8
    for i, result in enumerate(results):
        assert [m.sender for m in result.messages] == [
            "User", "agent1", "agent2", "agent3", "agent0", "agent1", "agent2"]
        assert result.messages[0].content == f"task {i}"
        assert result.stop_reason is StopReason.LULL


def test_a_person_posting_into_an_idle_room_starts_a_new_run(processes, settings, queue):
    processes.worker("-Q", queue)
    processes.coordinator()
    client = Client(settings)
    spec = scripted_spec(rotating_scripts(2, 4), queue=queue, max_messages=3)

    first = client.run(spec, "first task", timeout_s=60)
    inbox_id = client.post(first.room, "and now?", sender="Ann")
    second = client.wait(first.room, inbox_id, timeout_s=60)

    assert [(m.sender, m.content) for m in second.messages[3:]] == [
        ("Ann", "and now?"), ("agent1", "agent1 on turn 3"), ("agent0", "agent0 on turn 4")]
    assert client.state(first.room).run == 2


def test_cli_run_prints_one_json_object(processes, settings, queue, tmp_path, prefix):
    processes.worker("-Q", queue)
    processes.coordinator()
    spec_path = tmp_path / "room.yaml"
    spec_path.write_text(yaml.safe_dump(
        scripted_spec(rotating_scripts(2, 2), queue=queue).model_dump(mode="json")))

    done = run_parley(processes.env, "run", str(spec_path), "--task", "hi", "--json")

    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["status"] == "idle" and result["stop_reason"] == "lull"
    assert result["room"].startswith("test-room-")
    assert result["messages"] == [
        {"seq": 1, "sender": "User", "content": "hi", "score": None},
        {"seq": 2, "sender": "agent1", "content": "agent1 on turn 1", "score": 0.9},
        {"seq": 3, "sender": "agent0", "content": "agent0 on turn 2", "score": 0.9},
    ]
