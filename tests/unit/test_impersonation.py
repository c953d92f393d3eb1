"""Seed 002's impersonation rule for every policy, one rule per test: a reply is cut where
it starts speaking for another participant, and the cut is recorded and replayed."""

from __future__ import annotations

import pytest

from parley.coordinator import policies
from parley.coordinator.policies import TurnView
from parley.coordinator.policies.impersonation import cut_reply
from parley.shared.models import Answer, RoomSpec, StopReason, TurnRecord
from parley.shared.records import turn_record_fields, turn_record_from_fields
from parley.shared.speakers import speaker_lines

AGENTS = ("A", "B", "Budget Checker")


def spec() -> RoomSpec:
    return RoomSpec.model_validate({
        "agents": [{"name": name, "model": "scripted", "script": []} for name in AGENTS],
    })


def view() -> TurnView:
    return TurnView(turn=5, run=1, run_turns=2, messages_in_run=3, recent=(), snapshot_seq=3)


def bids(*scored: tuple[str, float, str]) -> list[Answer]:
    return [Answer(agent=name, turn=5, score=score, message=message) for name, score, message in scored]


def decide(*scored: tuple[str, float, str]) -> policies.Decision:
    return policies.decide(spec(), view(), bids(*scored))


def test_a_reply_is_cut_at_a_line_speaking_as_another_agent():
    decision = decide(("A", 0.9, "Good point.\nB: I agree, ship it.\nA: thanks"))
    assert (decision.winner, decision.message) == ("A", "Good point.")
    assert decision.cuts == {"A": "B"}


def test_a_reply_is_cut_at_a_line_speaking_as_the_user():
    decision = decide(("A", 0.9, "Plan attached.\n\nUser: Thanks, approved!"))
    assert decision.message == "Plan attached."
    assert decision.cuts == {"A": "User"}


def test_a_line_under_the_agents_own_name_is_not_cut():
    decision = decide(("A", 0.9, "A: my view\nmore of it"))
    assert decision.message == "A: my view\nmore of it"
    assert decision.cuts == {}


@pytest.mark.parametrize("line", ["Note: check the flag", "Summary: ship", "At 10:30: deploy",
                                  "Ab: not a participant", "- B: agrees", "> B: said so"])
def test_a_colon_after_anything_but_a_participants_name_is_not_cut(line):
    decision = decide(("A", 0.9, f"Plan.\n{line}"))
    assert decision.message == f"Plan.\n{line}"
    assert decision.cuts == {}


@pytest.mark.parametrize("line", ["**B:** I agree", "**B**: I agree", "  b : I agree",
                                  "__USER__: approved", "Budget_Checker: fine",
                                  "budget checker (keeps the total honest): fine"])
def test_names_match_case_insensitively_with_emphasis_and_spaces(line):
    decision = decide(("A", 0.9, f"Plan.\n{line}"))
    assert decision.message == "Plan."
    assert set(decision.cuts) == {"A"}


def test_the_cut_names_the_participant_as_the_room_spells_it():
    assert cut_reply("x\n**budget_checker:** ok", speaker_lines(["B", "Budget Checker", "User"])) == (
        "x", "Budget Checker")


def test_a_reply_that_is_only_impersonation_is_empty_and_cannot_win():
    decision = decide(("A", 0.9, "B: I agree with everything."), ("B", 0.2, "b"))
    assert decision.winner is None
    assert decision.stop is StopReason.LULL
    assert decision.cuts == {"A": "B"}


def test_an_emptied_reply_leaves_the_floor_to_the_next_bidder():
    decision = decide(("A", 0.9, "  \nUser: do it"), ("B", 0.7, "b"))
    assert (decision.winner, decision.message) == ("B", "b")
    assert decision.cuts == {"A": "User"}


def test_a_cut_reply_keeps_its_raw_score():
    decision = decide(("A", 0.9, "x\nB: y"), ("B", 0.8, "b"))
    assert (decision.winner, decision.score) == ("A", 0.9)


def test_every_cut_is_recorded_not_only_the_winners():
    decision = decide(("A", 0.9, "a\nB: y"), ("B", 0.3, "b\nA: z"))
    assert decision.cuts == {"A": "B", "B": "A"}


def record_of(bids_in: list[Answer], decision: policies.Decision, v: TurnView) -> TurnRecord:
    return TurnRecord(
        turn=v.turn, run=v.run, run_turns=v.run_turns, epoch=1, snapshot_seq=v.snapshot_seq,
        messages_in_run=v.messages_in_run, recent=list(v.recent), bids=bids_in,
        adjusted=decision.adjusted, winner=decision.winner, score=decision.score,
        stop_reason=decision.stop, stop_detail=decision.detail, cuts=decision.cuts)


def test_a_turn_record_holds_the_uncut_bids_and_replays_to_the_same_cut_decision():
    raw = bids(("A", 0.9, "Plan.\nUser: approved"), ("B", 0.6, "B: me"))
    decision = policies.decide(spec(), view(), raw)
    record = turn_record_from_fields(turn_record_fields(record_of(raw, decision, view())))

    assert record.cuts == {"A": "User"}
    assert record.bids[0].message == "Plan.\nUser: approved"
    assert policies.replay(spec(), record) == decision


def test_a_turn_record_written_before_cuts_existed_still_loads():
    raw = bids(("A", 0.9, "a"))
    fields = turn_record_fields(record_of(raw, policies.decide(spec(), view(), raw), view()))
    del fields["cuts"]
    assert turn_record_from_fields(fields).cuts == {}
