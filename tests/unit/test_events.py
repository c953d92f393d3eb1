"""A room's events stream, written by the fenced scripts and the workers, read back typed:
its order against the log, through the turn loop on fakeredis with the in-process worker
twin."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from parley.coordinator.lease import LeaseLost
from parley.coordinator.policies import POLICIES
from parley.shared.events import (
    EVENT_MODELS,
    AnswerArrived,
    Event,
    EventType,
    LeaseTaken,
    MessageCommitted,
    QueueChanged,
    RoomPaused,
    RoomResumed,
    RunEnded,
    RunStarted,
    TurnDecided,
    TurnOpened,
    answer_event_fields,
    event_from_entry,
    tool_called_fields,
    tool_result_fields,
)
from parley.shared.models import (
    Answer,
    AnswerStatus,
    CallKind,
    ErrorKind,
    RoomStatus,
    StopReason,
    ToolCallRecord,
)
from parley.shared.scripts import Scripts
from parley.shared.store import RoomStore
from parley.views.terminal import event_line
from tests.support.events import check_event_order
from tests.support.fake_turns import serve_once
from tests.support.local_worker import LocalWorkerTransport
from tests.support.rooms import rotating_scripts, scripted_spec
from tests.unit.test_selector_room import selector_spec

ROOM = "room-1"
LUA = Path(__file__).parents[2] / "shared" / "lua"


def kinds(events: list[Event]) -> list[str]:
    return [event.type for event in events]


def test_a_bid_rooms_events_tell_its_two_runs_in_the_logs_order(sync_redis, async_redis, keys):
    store = RoomStore(sync_redis, keys)
    store.create_room(ROOM, scripted_spec(rotating_scripts(3, 6), max_messages=3))
    transport = LocalWorkerTransport(sync_redis, keys)
    store.post(ROOM, "User", "go")
    asyncio.run(serve_once(async_redis, keys, transport))
    store.post(ROOM, "Ann", "again")
    asyncio.run(serve_once(async_redis, keys, transport, owner="c2"))

    events = store.read_events(ROOM)
    check_event_order(events, store.read_messages(ROOM))
    answers = [EventType.ANSWER_ARRIVED] * 3
    assert kinds(events) == [
        "lease_taken", "run_started", "message_committed",
        "turn_opened", *answers, "message_committed", "turn_decided",
        "turn_opened", *answers, "message_committed", "turn_decided", "run_ended",
        "lease_taken", "run_started", "message_committed",
        "turn_opened", *answers, "message_committed", "turn_decided",
        "turn_opened", *answers, "message_committed", "turn_decided", "run_ended",
    ]
    taken = [e for e in events if isinstance(e, LeaseTaken)]
    assert [(e.coordinator, e.epoch) for e in taken] == [("c1", 1), ("c2", 2)]
    ends = [e for e in events if isinstance(e, RunEnded)]
    assert [(e.run, e.status, e.stop_reason, e.answer) for e in ends] == [
        (1, RoomStatus.IDLE, StopReason.MAX_MESSAGES, "agent2 on turn 2"),
        (2, RoomStatus.IDLE, StopReason.MAX_MESSAGES, "agent1 on turn 4")]
    posts = [e for e in events if isinstance(e, MessageCommitted) and e.turn is None]
    assert [(e.sender, e.inbox_id is not None) for e in posts] == [("User", True), ("Ann", True)]
    decided = [e for e in events if isinstance(e, TurnDecided)]
    assert [(e.turn, e.winner, e.score, e.stop_reason) for e in decided] == [
        (1, "agent1", 0.9, None), (2, "agent2", 0.9, StopReason.MAX_MESSAGES),
        (3, "agent0", 0.9, None), (4, "agent1", 0.9, StopReason.MAX_MESSAGES)]
    assert all(e.ts > 1e9 for e in events)


def test_a_turn_without_a_winner_is_decided_with_its_stop(sync_redis, async_redis, keys):
    store = RoomStore(sync_redis, keys)
    store.create_room(ROOM, scripted_spec({"A": [{"score": 0.1, "message": "meh"}],
                                           "B": [{"error": "provider down"}]}))
    store.post(ROOM, "User", "go")
    asyncio.run(serve_once(async_redis, keys, LocalWorkerTransport(sync_redis, keys)))

    events = store.read_events(ROOM)
    check_event_order(events, store.read_messages(ROOM))
    decided = next(e for e in events if isinstance(e, TurnDecided))
    assert (decided.winner, decided.score, decided.stop_reason) == (None, None, StopReason.LULL)
    answers = {e.agent: e for e in events if isinstance(e, AnswerArrived)}
    assert (answers["A"].score, answers["A"].status, answers["A"].error_kind) == (
        0.1, AnswerStatus.OK, ErrorKind.NONE)
    assert (answers["B"].status, answers["B"].kind, answers["B"].phase) == (
        AnswerStatus.ERROR, CallKind.BID, 0)
    assert kinds(events)[-2:] == ["turn_decided", "run_ended"]


def test_a_selector_rooms_answers_of_both_phases_arrive_inside_their_turn(
        sync_redis, async_redis, keys):
    store = RoomStore(sync_redis, keys)
    store.create_room(ROOM, selector_spec(["planner", "budget", "TERMINATE"]))
    store.post(ROOM, "User", "Plan a trip")
    asyncio.run(serve_once(async_redis, keys, LocalWorkerTransport(sync_redis, keys)))

    events = store.read_events(ROOM)
    check_event_order(events, store.read_messages(ROOM))
    first_turn = [(e.kind, e.phase, e.agent) for e in events
                  if isinstance(e, AnswerArrived) and e.turn == 1]
    assert first_turn == [(CallKind.SELECT, 0, "selector"), (CallKind.SPEAK, 1, "planner")]
    assert [e.stop_reason for e in events if isinstance(e, RunEnded)] == [StopReason.TERMINATE]


def test_a_run_ended_outside_a_turn_is_an_event(sync_redis, async_redis, keys):
    store = RoomStore(sync_redis, keys)
    store.create_room(ROOM, scripted_spec(rotating_scripts(2, 1), max_messages=1))
    store.post(ROOM, "User", "go")
    asyncio.run(serve_once(async_redis, keys, LocalWorkerTransport(sync_redis, keys)))

    events = store.read_events(ROOM)
    assert kinds(events) == ["lease_taken", "run_started", "message_committed", "run_ended"]
    ended = events[-1]
    assert isinstance(ended, RunEnded)
    assert (ended.run, ended.status, ended.stop_reason, ended.answer) == (
        1, RoomStatus.IDLE, StopReason.MAX_MESSAGES, None)


def test_a_stale_coordinators_refused_commit_writes_no_event(sync_redis, async_redis, keys):
    store = RoomStore(sync_redis, keys)
    store.create_room(ROOM, scripted_spec(rotating_scripts(2, 3)))
    store.post(ROOM, "User", "go")

    class StealingTransport(LocalWorkerTransport):
        def send(self, requests):
            super().send(requests)
            sync_redis.set(keys.lease(ROOM), "thief:9")

    with pytest.raises(LeaseLost):
        asyncio.run(serve_once(async_redis, keys, StealingTransport(sync_redis, keys)))

    events = store.read_events(ROOM)
    # The workers' answers are in; nothing the refused commit would have written is.
    assert kinds(events) == ["lease_taken", "run_started", "message_committed", "turn_opened",
                             "answer_arrived", "answer_arrived"]


def test_a_failed_take_that_fails_the_room_ends_its_run(sync_redis, keys):
    store = RoomStore(sync_redis, keys)
    store.create_room(ROOM, scripted_spec(rotating_scripts(2, 1)))
    scripts = Scripts(sync_redis)
    scripts.acquire(keys=[keys.lease(ROOM), keys.state(ROOM), keys.events(ROOM)],
                    args=["c1", 5000, 1000])
    failing = dict(keys=[keys.lease(ROOM), keys.state(ROOM), keys.inbox(ROOM), keys.events(ROOM)])
    scripts.count_failed_take(**failing, args=["c1:1", 2, "ValueError: bad", 1000])
    assert kinds(store.read_events(ROOM)) == ["lease_taken"]

    scripts.count_failed_take(**failing, args=["c1:1", 2, "ValueError: bad", 1000])

    ended = store.read_events(ROOM)[-1]
    assert isinstance(ended, RunEnded)
    assert (ended.run, ended.status, ended.stop_reason, ended.stop_detail) == (
        0, RoomStatus.FAILED, StopReason.ROOM_ERROR, "ValueError: bad")


def test_the_events_stream_is_capped_by_the_scripts_and_the_workers(sync_redis, async_redis, keys):
    store = RoomStore(sync_redis, keys, events_maxlen=100)
    store.create_room(ROOM, scripted_spec(rotating_scripts(4, 200), max_messages=1000))
    store.post(ROOM, "User", "go")
    asyncio.run(serve_once(async_redis, keys, LocalWorkerTransport(sync_redis, keys),
                           events_maxlen=100))

    # 200 turns of 7 events; approximate trimming keeps whole nodes of up to 100 entries.
    assert len(store.read_messages(ROOM)) == 201
    assert 100 <= sync_redis.xlen(keys.events(ROOM)) <= 200


def test_every_event_type_has_a_model_and_a_script_that_writes_it():
    # A policy's watched fields' event is written by commit.lua and end_run.lua, which
    # take its type from the policy's record.
    watched = [f"'{policy.watched.event}'" for policy in POLICIES.values() if policy.watched]
    # tool_journal.lua writes the tool event its caller builds with the record.
    record = ToolCallRecord(id="1.0.1.0.0", agent="A", tool="t")
    journaled = [f"'{fields['type']}'" for fields in (tool_called_fields(record, 1, 0),
                                                       tool_result_fields(record))]
    writers = "\n".join([*(path.read_text() for path in LUA.rglob("*.lua")), *watched,
                         *journaled])
    for kind in EventType:
        assert EVENT_MODELS[kind].__doc__
        assert f"'{kind.value}'" in writers, kind


def test_an_answer_event_reads_back_as_it_was_written(sync_redis, keys):
    store = RoomStore(sync_redis, keys)
    store.create_room(ROOM, scripted_spec(rotating_scripts(2, 1)))
    bid = Answer(agent="B", turn=4, kind=CallKind.SPEAK, phase=1, score=0.25,
              status=AnswerStatus.ERROR, error_kind=ErrorKind.AUTH, latency_ms=12.5)

    assert store.write_answers(ROOM, [bid, Answer(agent="A", turn=4)], 1000) == 2

    event, quiet = store.read_events(ROOM)
    assert isinstance(event, AnswerArrived)
    assert (event.turn, event.agent, event.kind, event.phase, event.score, event.status,
            event.error_kind, event.latency_ms) == (
        4, "B", CallKind.SPEAK, 1, 0.25, AnswerStatus.ERROR, ErrorKind.AUTH, 12.5)
    assert event.ts > 1e9
    assert "error_kind" not in answer_event_fields(Answer(agent="A", turn=4))
    assert (quiet.agent, quiet.error_kind) == ("A", ErrorKind.NONE)
    assert sync_redis.xlen(keys.bids(ROOM)) == 2


def test_answers_for_a_room_that_is_gone_write_no_event(sync_redis, keys):
    store = RoomStore(sync_redis, keys)
    store.create_room(ROOM, scripted_spec(rotating_scripts(2, 1)))
    store.delete(ROOM)

    assert store.write_answers(ROOM, [Answer(agent="A", turn=1)], 1000) == 0

    assert not sync_redis.exists(keys.events(ROOM))


def test_a_cancelled_run_ends_with_a_run_ended_event_and_its_open_turn_undecided(
        sync_redis, async_redis, keys):
    store = RoomStore(sync_redis, keys)
    store.create_room(ROOM, scripted_spec(rotating_scripts(2, 4)))
    store.post(ROOM, "User", "go")

    class CancelOnTurnTwo(LocalWorkerTransport):
        def send(self, requests):
            if requests[0][1].turn == 2:
                store.cancel(ROOM, "enough")  # turn 2's calls are out: answered after
            super().send(requests)

    with pytest.raises(LeaseLost):  # the commit of turn 2 is refused
        asyncio.run(serve_once(async_redis, keys, CancelOnTurnTwo(sync_redis, keys)))

    events = store.read_events(ROOM)
    check_event_order(events, store.read_messages(ROOM))
    assert kinds(events)[-6:] == ["message_committed", "turn_decided", "turn_opened",
                                  "run_ended", "answer_arrived", "answer_arrived"]
    ended = events[-3]
    assert isinstance(ended, RunEnded)
    assert (ended.run, ended.status, ended.stop_reason, ended.stop_detail, ended.answer) == (
        1, RoomStatus.IDLE, StopReason.CANCELLED, "enough", "agent1 on turn 1")
    assert not any(isinstance(e, TurnDecided) and e.turn == 2 for e in events)


def test_a_cancel_with_no_run_in_progress_writes_no_event(sync_redis, keys):
    store = RoomStore(sync_redis, keys)
    store.create_room(ROOM, scripted_spec(rotating_scripts(2, 1)))

    assert store.cancel(ROOM).cancelled is False

    assert store.read_events(ROOM) == []


def test_pause_and_resume_are_events_and_a_second_one_writes_none(
        sync_redis, async_redis, keys):
    store = RoomStore(sync_redis, keys)
    store.create_room(ROOM, scripted_spec(rotating_scripts(2, 4), max_messages=3))
    store.post(ROOM, "User", "go")

    class PauseOnTurnOne(LocalWorkerTransport):
        def send(self, requests):
            if requests[0][1].turn == 1:
                assert store.pause(ROOM) is True
                assert store.pause(ROOM) is False
                store.post(ROOM, "Ann", "still there?")
            super().send(requests)

    asyncio.run(serve_once(async_redis, keys, PauseOnTurnOne(sync_redis, keys)))
    paused_at = len(store.read_events(ROOM))
    assert store.resume(ROOM) is True
    assert store.resume(ROOM) is False
    asyncio.run(serve_once(async_redis, keys, LocalWorkerTransport(sync_redis, keys),
                           owner="c2"))

    events = store.read_events(ROOM)
    check_event_order(events, store.read_messages(ROOM))
    paused = [e for e in events if isinstance(e, RoomPaused)]
    resumed = [e for e in events if isinstance(e, RoomResumed)]
    assert [(e.run, e.status, e.turn_open) for e in paused] == [(1, RoomStatus.RUNNING, True)]
    assert [(e.run, e.status, e.waiting) for e in resumed] == [(1, RoomStatus.RUNNING, 1)]
    # The turn open at the pause is decided; nothing opens or is committed until the resume.
    between = kinds(events[events.index(paused[0]) + 1:events.index(resumed[0])])
    assert "turn_opened" not in between and between.count("message_committed") == 1
    assert kinds(events)[paused_at - 1:paused_at + 1] == ["turn_decided", "room_resumed"]
    ann = next(e for e in events if isinstance(e, MessageCommitted) and e.sender == "Ann")
    assert events.index(ann) > events.index(resumed[0])


def test_a_budget_stop_ends_its_run_with_a_run_ended_event(sync_redis, async_redis, keys):
    store = RoomStore(sync_redis, keys)
    spec = scripted_spec(rotating_scripts(3, 20))
    store.create_room(ROOM, spec.model_copy(update={
        "limits": spec.limits.model_copy(update={"max_tokens_per_run": 330})}))
    store.post(ROOM, "User", "go")
    transport = LocalWorkerTransport(sync_redis, keys,
                                     usage={"prompt_tokens": 100, "completion_tokens": 10})

    asyncio.run(serve_once(async_redis, keys, transport))

    events = store.read_events(ROOM)
    check_event_order(events, store.read_messages(ROOM))
    assert kinds(events)[-3:] == ["message_committed", "turn_decided", "run_ended"]
    ended = events[-1]
    assert isinstance(ended, RunEnded)
    assert (ended.run, ended.status, ended.stop_reason) == (1, RoomStatus.IDLE,
                                                            StopReason.BUDGET)
    assert ended.stop_detail and ended.stop_detail.startswith("limits.max_tokens_per_run")


def test_an_event_of_a_type_this_version_does_not_know_keeps_its_fields():
    event = event_from_entry(b"5-0", {b"type": b"agent_joined", b"agent": b"A",
                                      b"ts": b"1700000000.5"})
    assert type(event) is Event
    assert (event.type, event.ts, event.model_extra) == (
        "agent_joined", 1700000000.5, {"agent": "A"})


def test_empty_fields_read_as_absent():
    event = event_from_entry("3-0", {"type": "run_ended", "run": "2", "status": "idle",
                                     "stop_reason": "", "stop_detail": "", "ts": "1.0"})
    assert isinstance(event, RunEnded)
    assert (event.stop_reason, event.stop_detail, event.answer) == (None, None, None)
    opened = event_from_entry("4-0", {"type": "turn_opened", "turn": "3", "run": "1",
                                      "phase": "0", "deadline": "12.5"})
    assert isinstance(opened, TurnOpened) and opened.deadline == 12.5
    started = event_from_entry("5-0", {"type": "run_started", "run": "7"})
    assert isinstance(started, RunStarted) and started.run == 7


def test_a_queue_change_reads_typed_and_prints_its_lists_as_json():
    event = event_from_entry(b"7-0", {b"type": b"queue_changed", b"run": b"2",
                                      b"queue": b'["dev"]', b"listening": b"[]",
                                      b"asked": b'[["sre","oncall"]]', b"waiting": b"1",
                                      b"over": b"0", b"ts": b"1700000000.5"})
    assert isinstance(event, QueueChanged)
    assert (event.run, event.queue, event.listening, event.asked, event.waiting,
            event.over) == (2, ["dev"], [], [("sre", "oncall")], True, False)
    assert event_line(event).endswith(
        'queue_changed     run=2 queue=["dev"] listening=[] asked=[["sre","oncall"]] '
        "waiting=true over=false")
