"""The line under each posted message, rendered from turns recorded by the real turn loop
(fakeredis, the in-process worker twin) for every policy, and the run's end in words."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from parley.client import load_spec
from parley.shared.models import RoomSpec, StopReason, TurnRecord
from parley.shared.store import RoomStore
from parley.views.explain import (
    DETAIL_SAYS_ALL,
    STOP_WORDS,
    legend,
    next_steps,
    stop_line,
    turn_line,
)
from tests.support.fake_turns import serve_once
from tests.support.local_worker import LocalWorkerTransport
from tests.support.rooms import scripted_spec
from tests.unit.test_mention_room import ListensMidTurn, Room, dispatch_room_spec, mention_spec
from tests.unit.test_roundtable_room import roundtable_spec
from tests.unit.test_selector_room import selector_spec

ROOM = "room-1"
DEMO = Path(__file__).parents[2] / "examples" / "rooms" / "demo.yaml"


def recorded(sync_redis, async_redis, keys, spec: RoomSpec, task: str = "go",
             answering: set[str] | None = None) -> list[TurnRecord]:
    """The turn records of one run of ``task`` in a room of ``spec``."""
    store = RoomStore(sync_redis, keys)
    store.create_room(ROOM, spec)
    store.post(ROOM, "User", task)
    transport = LocalWorkerTransport(sync_redis, keys, answering)
    asyncio.run(serve_once(async_redis, keys, transport))
    return store.read_turns(ROOM)


def lines(spec: RoomSpec, records: list[TurnRecord]) -> list[str]:
    return [turn_line(spec, record, records[:i]).text() for i, record in enumerate(records)]


# -- bid ------------------------------------------------------------------------------

@pytest.fixture
def demo_turns(sync_redis, async_redis, keys) -> tuple[RoomSpec, list[TurnRecord]]:
    spec = load_spec(DEMO)
    return spec, recorded(sync_redis, async_redis, keys, spec)


def test_a_bid_line_shows_raw_scores_in_spec_order_and_who_failed_or_stayed_silent(demo_turns):
    spec, records = demo_turns
    assert lines(spec, records)[0] == (
        "bids: Optimist 0.60, Skeptic 0.80, Economist silent, Ethicist failed (scripted)")


def test_a_penalty_that_changed_the_order_is_shown_and_said(demo_turns):
    spec, records = demo_turns
    line = turn_line(spec, records[1])
    assert line.text() == (
        "bids: Optimist 0.70, Skeptic 0.75→0.45 (recency), Economist 0.50, Ethicist silent"
        " · the recency penalty put Optimist ahead of Skeptic")
    assert line.as_json()["leader_without_penalty"] == "Skeptic"


def test_a_penalty_that_changed_nothing_is_shown_but_not_explained(demo_turns):
    spec, records = demo_turns
    assert lines(spec, records)[2] == (
        "bids: Optimist 0.85→0.55 (recency), Skeptic 0.40, Economist 0.90, Ethicist silent")


def test_a_tie_says_the_agent_listed_first_won_it(demo_turns):
    spec, records = demo_turns
    line = turn_line(spec, records[3])
    assert line.text().endswith(" · tie at 0.80: Skeptic is listed before Ethicist")
    assert line.as_json()["tie_with"] == ["Ethicist"]


def test_a_reply_in_prose_is_an_unparsed_bid_with_its_kind(demo_turns):
    spec, records = demo_turns
    assert records[-1].stop_reason is StopReason.LULL and records[-1].winner is None
    assert lines(spec, records)[-1] == ("bids: Optimist silent, Skeptic silent, "
                                        "Economist silent, Ethicist unparsed (no_tool_call)")


def test_the_json_facts_carry_each_answer(demo_turns):
    spec, records = demo_turns
    facts = turn_line(spec, records[1]).as_json()
    assert facts["answers"][1] == {"agent": "Skeptic", "kind": "bid", "outcome": "bid",
                                   "score": 0.75, "adjusted": pytest.approx(0.45),
                                   "error_kind": None}
    assert facts["winner"] == "Optimist" and facts["line"] == turn_line(spec, records[1]).text()


def test_an_agent_that_never_answered_is_timed_out_with_its_kind(sync_redis, async_redis, keys):
    spec = scripted_spec({"A": [{"score": 0.9, "message": "a"}], "Slow": []},
                         bid_timeout_s=0.3)
    records = recorded(sync_redis, async_redis, keys, spec, answering={"A"})
    assert lines(spec, records)[0] == "bids: A 0.90, Slow timed out (no_answer)"


def test_a_penalty_that_left_nobody_above_the_threshold_is_said(sync_redis, async_redis, keys):
    spec = scripted_spec({"A": [{"score": 0.9, "message": "a"}, {"score": 0.7, "message": "b"}],
                          "B": [{"score": 0.1, "message": "c"}] * 2})
    records = recorded(sync_redis, async_redis, keys, spec)
    assert records[1].stop_reason is StopReason.LULL
    assert lines(spec, records)[1] == (
        "bids: A 0.70→0.40 (recency), B 0.10 · the recency penalty took A to 0.40, "
        "not above 0.5")


# -- selector, roundtable -------------------------------------------------------------

def test_the_selector_line_shows_its_pick_a_refused_pick_the_retry_and_the_rotation(
        sync_redis, async_redis, keys):
    spec = selector_spec(["nobody", "planner", "planner", "accountant", "budget"],
                         {"budget": ["done TERMINATE"]})
    records = recorded(sync_redis, async_redis, keys, spec)
    assert lines(spec, records) == [
        "selector picked 'nobody' (not a participant) · asked again: picked planner",
        "selector picked 'planner' (spoke last, and allow_repeat is off) · asked again: "
        "picked 'accountant' (not a participant) · no allowed pick: the rotation gave local "
        "the turn",
        "selector picked budget · budget ended with TERMINATE"]
    facts = turn_line(spec, records[1]).as_json()
    assert facts["rotation"] is True
    assert [pick["allowed"] for pick in facts["picks"]] == [False, False]


def test_the_roundtable_line_shows_the_panel_position_and_a_contained_failure(
        sync_redis, async_redis, keys):
    spec = roundtable_spec({"quality": [{"content": "q1"}, {"error": "boom"}]}, rounds=2)
    records = recorded(sync_redis, async_redis, keys, spec)
    assert lines(spec, records) == [
        "panelist 1 of 2, round 1 of 2", "panelist 2 of 2, round 1 of 2",
        "panelist 1 of 2, round 2 of 2",
        "panelist 2 of 2, round 2 of 2 · quality could not respond (scripted): the debate "
        "goes on",
        "the moderator's verdict, after 2 round(s) of 2 panelists"]
    assert turn_line(spec, records[1]).as_json()["position"] == 2


# -- mention --------------------------------------------------------------------------

def mention_lines(room: Room, spec: RoomSpec) -> list[str]:
    return lines(spec, room.store.read_turns(ROOM))


def test_the_mention_line_says_why_the_agent_was_queued_and_whom_it_queued_or_asked(
        sync_redis, async_redis, keys):
    spec = mention_spec({"investigator": ["5xx since 14:02"],
                         "dev": ["@sre check the pods", "rolling back now"],
                         "sre": ["@oncall may I restart them?"]}, addressed_only=True)
    room = Room(sync_redis, async_redis, keys, spec)
    room.post("@investigator @dev what broke?")
    room.post("yes")
    assert mention_lines(room, spec) == [
        "investigator's turn: named by oncall · queue: dev",
        "dev's turn: named by oncall · queued sre (named by dev) · queue: sre",
        "sre's turn: named by dev · sre asked oncall · queue: empty",
        "sre's turn: oncall answered its question · sre could not respond (empty reply)"
        " · queue: empty"]
    records = room.store.read_turns(ROOM)
    facts = turn_line(spec, records[1], records[:1]).as_json()
    assert (facts["speaker"], facts["because"], facts["queued"]) == (
        "dev", "named by oncall", ["sre"])


def test_a_silent_turn_and_everyone_taking_an_unaddressed_message(sync_redis, async_redis, keys):
    spec = mention_spec({"investigator": ["5xx since 14:02"], "dev": ["(silent)"],
                         "sre": ["(silent)"]})
    room = Room(sync_redis, async_redis, keys, spec)
    room.post("checkout is failing")
    assert mention_lines(room, spec)[1] == (
        "dev's turn: oncall named nobody, so everyone takes it in turn · dev stayed silent"
        " · queue: sre")
    assert turn_line(spec, room.store.read_turns(ROOM)[1]).as_json()["silent"] is True


def test_an_agent_named_by_the_last_speaker_is_said_named_by_it_though_already_queued(
        sync_redis, async_redis, keys):
    spec = mention_spec({"investigator": ["5xx since 14:02 @dev"],
                         "dev": ["flag flipped. @oncall may I roll back?"], "sre": ["(silent)"]})
    room = Room(sync_redis, async_redis, keys, spec)
    room.post("checkout is failing")
    assert mention_lines(room, spec)[:2] == [
        "investigator's turn: oncall named nobody, so everyone takes it in turn · queue: dev, sre",
        "dev's turn: named by investigator · dev asked oncall · queue: sre"]


def test_a_turn_cut_by_listening_says_so(sync_redis, async_redis, keys):
    spec = mention_spec({"dev": ["never said"], "sre": ["sre here"]})
    room = Room(sync_redis, async_redis, keys, spec)
    room.transport = ListensMidTurn(room.store, sync_redis, keys)
    room.post("@dev @sre look")
    assert mention_lines(room, spec)[0] == (
        "dev's turn: named by oncall · dev was cut: it was set to only listen · "
        "queue: dev, sre")


def test_the_classifier_pick_and_its_fallback(sync_redis, async_redis, keys):
    spec = dispatch_room_spec([{"content": '{"sre": 0.9, "dev": 0.2}'}, {"error": "down"}])
    room = Room(sync_redis, async_redis, keys, spec)
    room.post("is the load normal?")
    room.post("and now?")
    first, second = mention_lines(room, spec)[:2]
    assert first == ("the classifier chose sre · sre's turn: the classifier's pick for "
                     "oncall's message · queue: empty")
    assert second.startswith("the classifier failed: the rule gave investigator, dev, sre · "
                             "investigator's turn: oncall named nobody")


# -- the run's end --------------------------------------------------------------------

def test_every_stop_reason_has_its_words():
    assert set(STOP_WORDS) == set(StopReason)
    assert all(STOP_WORDS[reason] for reason in StopReason)


@pytest.mark.parametrize(("spec", "reason", "detail", "line"), [
    (scripted_spec({"A": [], "B": []}, threshold=0.6), StopReason.LULL, "",
     "lull: no bid cleared the 0.6 threshold"),
    (scripted_spec({"A": [], "B": []}, max_messages=7), StopReason.MAX_MESSAGES, "",
     "max_messages: 7 messages posted (the cap, the task included)"),
    (selector_spec([], max_turns=4), StopReason.MAX_TURNS, "",
     "max_turns: 4 participant messages posted (max_turns)"),
    (selector_spec([]), StopReason.TERMINATE, "", "terminate: the selector said TERMINATE"),
    (roundtable_spec(), StopReason.VERDICT, "", "verdict: Moderator gave the verdict"),
    (mention_spec({}, max_turns=9), StopReason.MAX_TURNS, "",
     "max_turns: the discussion is over: 9 agent turns were given (max_turns)"),
    (mention_spec({}), StopReason.WAITING_FOR_PERSON, "dev asked oncall",
     "waiting_for_person: waiting for a person's answer: dev asked oncall"),
    (mention_spec({}), StopReason.QUEUE_EMPTY, "", "queue_empty: nobody is queued to speak"),
    (scripted_spec({"A": [], "B": []}), StopReason.NO_BIDS, "",
     "no_bids: no agent answered in time: is a parley worker running?"),
    (scripted_spec({"A": [], "B": []}), StopReason.NO_BIDS, "no agent answered within 2s",
     "no_bids: no agent answered within 2s"),
    (scripted_spec({"A": [], "B": []}), StopReason.ALL_FAILED, "A: boom; B: boom",
     "all_agents_failed: every agent's call failed on the run's first turn: A: boom; B: boom"),
    (scripted_spec({"A": [], "B": []}), StopReason.CANCELLED, "by Ann",
     "cancelled: the run was cancelled: by Ann"),
])
def test_the_stop_line_keeps_the_code_and_says_why_with_the_specs_numbers(
        spec, reason, detail, line):
    assert stop_line(spec, reason, detail) == line


def test_a_participant_that_said_terminate_is_named():
    spec = selector_spec([])
    record = TurnRecord(turn=3, run=1, run_turns=3, epoch=1, snapshot_seq=3,
                        messages_in_run=3, recent=[], bids=[], winner="budget",
                        stop_reason=StopReason.TERMINATE)
    assert stop_line(spec, StopReason.TERMINATE, "", record) == (
        "terminate: budget ended its message with TERMINATE")


@pytest.mark.parametrize("reason", sorted(DETAIL_SAYS_ALL))
def test_a_stop_whose_detail_is_a_sentence_shows_it_alone(reason):
    spec = scripted_spec({"A": [], "B": []})
    assert stop_line(spec, reason, "the whole story") == f"{reason.value}: the whole story"


def test_what_to_do_next_names_the_room():
    spec = scripted_spec({"A": [], "B": []})
    assert next_steps(spec, StopReason.LULL, "r1") == [
        'post again to start a new run (parley post r1 "...")',
        "see every turn with parley turns r1"]
    assert next_steps(spec, StopReason.CANCELLED, "r1") == []
    assert next_steps(mention_spec({}), StopReason.WAITING_FOR_PERSON, "r1") == [
        'answer: parley post r1 --as NAME "..."']
    assert next_steps(mention_spec({}), StopReason.WAITING_FOR_PERSON, "r1",
                      ["oncall", "Ann Lee"]) == [
        'answer: parley post r1 --as oncall "..." (also asked: Ann Lee)']
    assert all(next_steps(spec, reason, "r1") is not None for reason in StopReason)


def test_the_legend_gives_the_bid_rules_with_the_specs_numbers():
    spec = scripted_spec({"A": [], "B": []}, threshold=0.6, recency_window=2)
    assert "above 0.6" in legend(spec) and "the last 2 speakers' score counts 0.3 less" in (
        legend(spec))


def test_an_intent_rooms_legend_says_only_the_winner_writes_its_message():
    full = scripted_spec({"A": [], "B": []})
    intent = scripted_spec({"A": [], "B": []}, bid_mode="intent")
    assert "a score from 0 to 1 and a message. The highest score above 0.5 is posted" in (
        legend(full))
    assert "and a one-line intent. The highest score above 0.5 takes the floor and only " \
        "then writes its message" in legend(intent)
