"""The bid policy, one rule per test (swarms GroupChat semantics, seeds 000 and 001)."""

from __future__ import annotations

import pytest

from parley.coordinator import policies
from parley.coordinator.policies import Calls, TurnView, bid
from parley.shared.models import Answer, AnswerStatus, CallKind, ErrorKind, RoomSpec, StopReason

AGENTS = ("A", "B", "C")


def spec(**policy: object) -> RoomSpec:
    return RoomSpec.model_validate({
        "policy": {"kind": "bid", **policy},
        "agents": [{"name": name, "model": "scripted", "script": []} for name in AGENTS],
    })


def view(recent: tuple[str, ...] = (), messages_in_run: int = 1, run_turns: int = 2) -> TurnView:
    return TurnView(turn=5, run=1, run_turns=run_turns, messages_in_run=messages_in_run,
                    recent=recent, snapshot_seq=messages_in_run)


def bids(*scored: tuple[str, float, str]) -> list[Answer]:
    return [Answer(agent=name, turn=5, score=score, message=message) for name, score, message in scored]


def test_highest_bid_above_threshold_wins():
    decision = policies.decide(spec(), view(), bids(("A", 0.6, "a"), ("B", 0.9, "b"), ("C", 0.7, "c")))
    assert (decision.winner, decision.message, decision.stop) == ("B", "b", None)


def test_empty_message_never_wins_whatever_its_score():
    decision = policies.decide(spec(), view(), bids(("A", 1.0, ""), ("B", 0.6, "b")))
    assert decision.winner == "B"


def test_score_exactly_at_threshold_does_not_win():
    decision = policies.decide(spec(threshold=0.5), view(), bids(("A", 0.5, "a"), ("B", 0.5, "b")))
    assert decision.winner is None
    assert decision.stop is StopReason.LULL


def test_tie_keeps_the_agent_listed_first():
    decision = policies.decide(spec(), view(), bids(("C", 0.8, "c"), ("B", 0.8, "b"), ("A", 0.2, "a")))
    assert decision.winner == "B"


def test_recent_speaker_pays_the_penalty():
    decision = policies.decide(spec(recency_penalty=0.3), view(recent=("A",)),
                               bids(("A", 0.9, "a"), ("B", 0.7, "b")))
    assert decision.winner == "B"
    assert decision.adjusted["A"] == 0.9 - 0.3


def test_recent_speaker_wins_again_only_above_threshold_plus_penalty():
    decision = policies.decide(spec(threshold=0.5, recency_penalty=0.3), view(recent=("A",)),
                               bids(("A", 0.81, "a"), ("B", 0.2, "b")))
    assert decision.winner == "A"


@pytest.mark.parametrize("window", [0, -1, -(2**63 - 1)])
def test_a_recency_window_of_zero_or_below_behaves_as_one(window):
    decision = policies.decide(spec(recency_window=window), view(recent=("B", "A")),
                               bids(("A", 0.7, "a"), ("B", 0.6, "b")))
    assert decision.winner == "B"  # only A, the last speaker, is penalised
    assert decision.recent == ("B",)
    assert bid.recent_window(spec(recency_window=window).policy) == 1


def test_recency_window_penalises_only_the_last_speakers():
    s = spec(recency_window=2)
    decision = policies.decide(s, view(recent=("A", "B", "C")), bids(("A", 0.7, "a"), ("B", 0.7, "b")))
    assert decision.winner == "A"


def test_penalty_can_turn_the_only_bidder_into_a_lull():
    decision = policies.decide(spec(), view(recent=("A",)), bids(("A", 0.8, "a"), ("B", 0.1, "")))
    assert decision.winner is None
    assert decision.stop is StopReason.LULL


def test_penalty_zero_disables_rotation():
    decision = policies.decide(spec(recency_penalty=0.0), view(recent=("A",)),
                               bids(("A", 0.8, "a"), ("B", 0.7, "b")))
    assert decision.winner == "A"


def test_posted_score_is_the_raw_score():
    decision = policies.decide(spec(), view(recent=("A",)), bids(("A", 0.95, "a"), ("B", 0.6, "b")))
    assert decision.winner == "A"
    assert decision.score == 0.95


def test_recent_speakers_keep_a_window_of_at_least_one():
    decision = policies.decide(spec(recency_window=2), view(recent=("A", "B")),
                               bids(("C", 0.9, "c")))
    assert decision.recent == ("B", "C")
    decision = policies.decide(spec(recency_window=0), view(recent=("A",)), bids(("C", 0.9, "c")))
    assert decision.recent == ("C",)


def test_run_stops_when_the_post_reaches_max_messages():
    decision = policies.decide(spec(max_messages=3), view(messages_in_run=2),
                               bids(("A", 0.9, "a")))
    assert decision.winner == "A"
    assert decision.stop is StopReason.MAX_MESSAGES


def test_no_turn_once_max_messages_are_posted_seed_included():
    assert policies.first_calls(spec(max_messages=1), view(messages_in_run=1)).stop is (
        StopReason.MAX_MESSAGES)
    assert policies.first_calls(spec(max_messages=2), view(messages_in_run=1)) == Calls(
        CallKind.BID, AGENTS)


def test_failed_agent_is_silent():
    failed = Answer(agent="A", turn=5, status=AnswerStatus.ERROR, error="RuntimeError: down")
    decision = policies.decide(spec(), view(), [failed, *bids(("B", 0.6, "b"))])
    assert decision.winner == "B"


def test_every_agent_timing_out_stops_the_run_naming_the_queue():
    missing = [Answer(agent=name, turn=5, status=AnswerStatus.TIMEOUT) for name in AGENTS]
    decision = policies.decide(spec(bid_timeout_s=2), view(), missing)
    assert decision.stop is StopReason.NO_BIDS
    assert decision.status == "failed"
    assert "2s" in decision.detail and "parley.agents" in decision.detail


def test_every_agent_failing_on_the_first_turn_fails_the_run_with_each_error():
    failed = [Answer(agent=name, turn=1, status=AnswerStatus.ERROR, error="AuthenticationError: no key",
                  error_kind=ErrorKind.AUTH) for name in AGENTS]
    decision = policies.decide(spec(), view(run_turns=1), failed)
    assert decision.stop is StopReason.ALL_FAILED
    # One error and one fix, said once for the three agents.
    assert decision.detail.startswith(f"{', '.join(AGENTS)}: AuthenticationError: no key "
                                      "(likely fix: the provider refused the API key")
    assert decision.detail.count("AuthenticationError") == 1


def test_every_agent_failing_after_the_first_turn_is_a_lull():
    failed = [Answer(agent=name, turn=3, status=AnswerStatus.ERROR, error="x") for name in AGENTS]
    assert policies.decide(spec(), view(run_turns=3), failed).stop is StopReason.LULL


def test_silence_by_choice_on_the_first_turn_is_a_lull_not_a_failure():
    decision = policies.decide(spec(), view(run_turns=1), bids(("A", 0.0, ""), ("B", 0.1, "")))
    assert decision.stop is StopReason.LULL
