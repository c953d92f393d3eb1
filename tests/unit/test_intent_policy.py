"""The bid policy's intent mode: the same selection as full mode from the same scores, then
only the winner writes its reply (pure: no Redis)."""

from __future__ import annotations

import pytest

from parley.coordinator import policies
from parley.coordinator.policies import Calls, TurnView
from parley.shared.models import Answer, AnswerStatus, CallKind, ErrorKind, RoomSpec, StopReason

AGENTS = ("A", "B", "C")


def spec(mode: str = "intent", **policy: object) -> RoomSpec:
    return RoomSpec.model_validate({
        "policy": {"kind": "bid", "bid_mode": mode, **policy},
        "agents": [{"name": name, "model": "scripted", "script": []} for name in AGENTS],
    })


def view(recent: tuple[str, ...] = (), messages_in_run: int = 1, run_turns: int = 2) -> TurnView:
    return TurnView(turn=5, run=1, run_turns=run_turns, messages_in_run=messages_in_run,
                    recent=recent, snapshot_seq=messages_in_run)


def scored(kind: CallKind, *bids: tuple[str, float, str]) -> list[Answer]:
    return [Answer(agent=name, turn=5, kind=kind, score=score, message=text)
            for name, score, text in bids]


def reply(agent: str, text: str, phase: int = 1, **fields: object) -> Answer:
    return Answer(agent=agent, turn=5, kind=CallKind.REPLY, phase=phase, message=text, **fields)


# (policy settings, recent speakers, (agent, score, non-empty?) bids): threshold, recency,
# ties and the lull, as seed 000 defines them.
CASES = [
    ({}, (), [("A", 0.6, True), ("B", 0.9, True), ("C", 0.7, True)]),
    ({}, (), [("A", 1.0, False), ("B", 0.6, True)]),
    ({"threshold": 0.5}, (), [("A", 0.5, True), ("B", 0.5, True)]),
    ({}, (), [("C", 0.8, True), ("B", 0.8, True), ("A", 0.2, True)]),
    ({"recency_penalty": 0.3}, ("A",), [("A", 0.9, True), ("B", 0.7, True)]),
    ({"threshold": 0.5, "recency_penalty": 0.3}, ("A",), [("A", 0.81, True), ("B", 0.2, True)]),
    ({"recency_window": 2}, ("A", "B"), [("A", 0.9, True), ("B", 0.85, True), ("C", 0.55, True)]),
    ({}, (), [("A", 0.1, True), ("B", 0.2, True), ("C", 0.3, True)]),
]


@pytest.mark.parametrize(("settings", "recent", "bids"), CASES)
def test_intent_mode_picks_the_winner_full_mode_picks_from_the_same_scores(settings, recent, bids):
    full = policies.decide(spec("full", **settings), view(recent),
                           scored(CallKind.BID, *((n, s, f"{n} says" if t else "")
                                                  for n, s, t in bids)))
    intent = policies.decide(spec(**settings), view(recent),
                             scored(CallKind.INTENT, *((n, s, f"{n} would say" if t else "")
                                                       for n, s, t in bids)))
    if full.winner is None:
        assert (intent.next, intent.stop) == (None, StopReason.LULL)
    else:
        assert intent.next == Calls(CallKind.REPLY, (full.winner,),
                                    instructions=((full.winner, f"{full.winner} would say"),))
    assert intent.adjusted == full.adjusted


def test_every_agent_is_first_asked_for_its_intent():
    assert policies.first_calls(spec(), view()) == Calls(CallKind.INTENT, AGENTS)
    assert policies.first_calls(spec("full"), view()) == Calls(CallKind.BID, AGENTS)


def test_the_winners_reply_is_posted_with_its_raw_intent_score():
    answers = [*scored(CallKind.INTENT, ("A", 0.6, "a line"), ("B", 0.9, "b line")),
               reply("B", "B's whole message.")]
    decision = policies.decide(spec(), view(recent=("B",)), answers)
    assert (decision.winner, decision.message, decision.score) == ("B", "B's whole message.", 0.9)
    assert decision.answer == "B's whole message."
    assert decision.recent == ("B",)
    assert decision.adjusted == {"A": 0.6, "B": pytest.approx(0.6)}


def test_a_failed_reply_makes_its_agent_silent_and_the_next_bidder_is_asked():
    answers = [*scored(CallKind.INTENT, ("A", 0.7, "a line"), ("B", 0.9, "b line")),
               reply("B", "", status=AnswerStatus.ERROR, error="boom",
                     error_kind=ErrorKind.CONNECTION)]
    decision = policies.decide(spec(), view(), answers)
    assert decision.next == Calls(CallKind.REPLY, ("A",), instructions=(("A", "a line"),))

    answers.append(reply("A", "A's message.", phase=2))
    decision = policies.decide(spec(), view(), answers)
    assert (decision.winner, decision.message, decision.score) == ("A", "A's message.", 0.7)


def test_a_failed_reply_with_nobody_else_over_the_bar_is_a_lull():
    answers = [*scored(CallKind.INTENT, ("A", 0.2, "a line"), ("B", 0.9, "b line")),
               reply("B", "   ")]
    decision = policies.decide(spec(), view(), answers)
    assert (decision.winner, decision.next, decision.stop) == (None, None, StopReason.LULL)


def test_the_cap_still_counts_the_posted_reply():
    answers = [*scored(CallKind.INTENT, ("A", 0.9, "a line")), reply("A", "done")]
    decision = policies.decide(spec(max_messages=3), view(messages_in_run=2), answers)
    assert (decision.winner, decision.stop) == ("A", StopReason.MAX_MESSAGES)


def test_every_intent_failing_on_the_first_turn_fails_the_run():
    answers = [Answer(agent=name, turn=5, kind=CallKind.INTENT, status=AnswerStatus.ERROR,
                   error="no key", error_kind=ErrorKind.MISSING_KEY) for name in AGENTS]
    decision = policies.decide(spec(), view(run_turns=1), answers)
    assert decision.stop is StopReason.ALL_FAILED
