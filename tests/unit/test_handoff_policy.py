"""The handoff policy, one rule per test."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from pydantic import ValidationError

from parley.coordinator import policies
from parley.coordinator.policies import Calls, TurnView, handoff
from parley.shared.models import (
    Answer,
    AnswerStatus,
    CallKind,
    PolicyCall,
    RoomSpec,
    StopReason,
    TurnRecord,
)
from parley.workers.prompts import CALL_PROMPTS

NAMES = ("triage", "billing", "tech")


def spec(**policy: Any) -> RoomSpec:
    return RoomSpec.model_validate({
        "policy": {"kind": "handoff", "start": "triage", **policy},
        "agents": [{"name": name, "role": f"the {name}", "model": "scripted", "script": []}
                   for name in NAMES],
    })


def view(active: str | None = None, turns: int = 0, handoffs: int = 0,
         run_turns: int = 2) -> TurnView:
    state = {"turns": str(turns), "handoffs": str(handoffs)}
    return TurnView(turn=3, run=1, run_turns=run_turns, messages_in_run=1, recent=(),
                    snapshot_seq=1, policy_state=state,
                    floor_state={"to": active} if active else {})


def reply(agent: str, text: str = "", to: str | None = None, reason: str = "",
          phase: int = 0, status: AnswerStatus = AnswerStatus.OK, error: str = "") -> Answer:
    call = PolicyCall(name=f"transfer_to_{to}", arguments={"reason": reason}) if to else None
    return Answer(agent=agent, turn=3, kind=CallKind.HANDOFF, phase=phase, message=text,
                  status=status, error=error, policy_call=call)


def test_the_first_turn_asks_the_start_agent():
    assert policies.first_calls(spec(), view()) == Calls(CallKind.HANDOFF, ("triage",))


def test_a_turn_asks_the_agent_last_handed_to():
    assert policies.first_calls(spec(), view("billing")) == Calls(CallKind.HANDOFF, ("billing",))


def test_an_allowed_transfer_posts_the_text_and_hands_the_floor_on():
    decision = policies.decide(spec(), view(), [reply("triage", "Passing you on.", "billing",
                                                      "a billing question")])
    assert (decision.winner, decision.message, decision.stop, decision.next) == (
        "triage", "Passing you on.", None, None)
    assert decision.floor_state["to"] == "billing"
    assert (decision.floor_state["from"], decision.floor_state["reason"]) == (
        "triage", "a billing question")
    assert orjson.loads(decision.floor_state["chain"]) == [
        [1, "triage", "billing", "a billing question"]]
    assert decision.policy_state == {"turns": "1", "handoffs": "1"}


def test_a_transfer_without_text_posts_nothing_and_still_hands_on():
    decision = policies.decide(spec(), view(), [reply("triage", "", "billing", "billing")])
    assert (decision.winner, decision.message) == (None, "")
    assert decision.floor_state["to"] == "billing"


def test_a_transfer_to_an_agent_not_allowed_is_refused_back_to_the_model_once():
    room = spec(handoffs={"triage": ["billing"]})
    decision = policies.decide(room, view(), [reply("triage", "", "tech", "setup")])
    assert decision.next is not None
    assert decision.next.kind is CallKind.HANDOFF and decision.next.agents == ("triage",)
    (agent, told), = decision.next.instructions
    assert agent == "triage"
    assert "transfer to tech was refused" in told and "billing only" in told


def test_a_second_refused_transfer_posts_its_text_without_the_transfer():
    room = spec(handoffs={"triage": ["billing"]})
    decision = policies.decide(room, view(), [
        reply("triage", "", "tech"), reply("triage", "I will look myself.", "tech", phase=1)])
    assert (decision.winner, decision.message, decision.next) == (
        "triage", "I will look myself.", None)
    assert decision.floor_state == {}


def test_after_a_refusal_an_allowed_transfer_is_made():
    room = spec(handoffs={"triage": ["billing"]})
    decision = policies.decide(room, view(), [
        reply("triage", "", "tech"), reply("triage", "", "billing", "money", phase=1)])
    assert decision.floor_state["to"] == "billing"


def test_an_agent_not_listed_in_handoffs_may_hand_to_nobody():
    room = spec(handoffs={"triage": ["billing"]})
    decision = policies.decide(room, view("billing"), [reply("billing", "", "triage")])
    assert decision.next is not None
    assert "hand the conversation to nobody" in decision.next.instructions[0][1]


def test_a_transfer_naming_no_agent_is_refused():
    decision = policies.decide(spec(), view(), [reply("triage", "", "refunds")])
    assert decision.next is not None and "names no agent" in decision.next.instructions[0][1]


def test_a_transfer_past_max_handoffs_per_run_is_refused():
    decision = policies.decide(spec(max_handoffs_per_run=2), view(handoffs=2),
                               [reply("triage", "", "billing")])
    assert decision.next is not None and "max_handoffs_per_run" in decision.next.instructions[0][1]


def test_a_reply_without_a_transfer_keeps_the_floor_and_goes_on():
    decision = policies.decide(spec(), view(), [reply("triage", "Let me check that.")])
    assert (decision.winner, decision.stop, decision.floor_state) == ("triage", None, {})
    assert policies.first_calls(spec(), view()) == Calls(CallKind.HANDOFF, ("triage",))


def test_a_reply_that_asks_a_question_waits_for_a_person():
    for text in ("Which invoice do you mean?", "Which invoice? **", "Can you say 'when?'"):
        decision = policies.decide(spec(), view(), [reply("triage", text)])
        assert decision.stop is StopReason.WAITING_FOR_PERSON, text
        assert decision.status == "idle"


def test_a_transfer_with_a_question_hands_on_rather_than_waits():
    decision = policies.decide(spec(), view(), [reply("triage", "Billing, can you help?",
                                                      "billing")])
    assert decision.stop is None and decision.floor_state["to"] == "billing"


def test_the_run_ends_after_max_turns_agent_turns():
    decision = policies.decide(spec(max_turns=3), view(turns=2), [reply("triage", "More.")])
    assert decision.stop is StopReason.MAX_TURNS
    stop = policies.first_calls(spec(max_turns=3), view(turns=3))
    assert not isinstance(stop, Calls) and stop.stop is StopReason.MAX_TURNS


def test_a_failed_reply_is_posted_as_could_not_respond():
    decision = policies.decide(spec(), view(), [reply("triage", status=AnswerStatus.ERROR,
                                                      error="boom")])
    assert decision.message == "(triage could not respond: boom)"
    assert decision.stop is None


def test_a_long_reason_is_cut_to_one_short_line():
    decision = policies.decide(spec(), view(), [reply("triage", "", "billing",
                                                      "a\nb " + "x" * 500)])
    reason = decision.floor_state["reason"]
    assert "\n" not in reason and len(reason) == handoff.REASON_CHARS


def test_the_chain_keeps_the_newest_handoffs():
    long = [[1, "a", "b", ""]] * handoff.CHAIN_KEPT
    seen = TurnView(turn=3, run=2, run_turns=1, messages_in_run=1, recent=(), snapshot_seq=1,
                    floor_state={"to": "billing", "chain": orjson.dumps(long).decode()})
    decision = policies.decide(spec(), seen, [reply("billing", "", "triage")])
    chain = orjson.loads(decision.floor_state["chain"])
    assert len(chain) == handoff.CHAIN_KEPT and chain[-1] == [2, "billing", "triage", ""]


def test_the_active_agent_is_offered_one_transfer_tool_per_allowed_target():
    room = spec(handoffs={"triage": ["billing", "tech"], "billing": ["triage"]})
    tools = CALL_PROMPTS[CallKind.HANDOFF].policy_tools(room, room.agent("triage"))
    names = [tool["function"]["name"] for tool in tools.offered]
    assert names == ["transfer_to_billing", "transfer_to_tech"]
    assert tools.offered[0]["function"]["parameters"]["required"] == ["reason"]
    assert tools.ends_call("transfer_to_refunds") and not tools.ends_call("search_logs")
    assert CALL_PROMPTS[CallKind.HANDOFF].policy_tools(room, room.agent("tech")).offered == ()


@pytest.mark.parametrize(("policy", "wrong"), [
    ({"start": "sales"}, "policy.start 'sales' is not one of the agents"),
    ({"handoffs": {"triage": ["refunds"]}}, "policy.handoffs names 'refunds'"),
    ({"handoffs": {"sales": ["triage"]}}, "policy.handoffs names 'sales'"),
])
def test_bad_input_is_one_line_naming_what_is_wrong(policy, wrong):
    with pytest.raises(ValidationError, match=wrong):
        spec(**policy)


def test_a_cycle_of_handoffs_is_fine():
    assert spec(handoffs={"triage": ["billing"], "billing": ["tech"], "tech": ["triage"]})


def test_a_turn_replays_to_its_decision_and_tells_the_handoff():
    room = spec(handoffs={"triage": ["billing"]})
    answers = [reply("triage", "", "tech"), reply("triage", "Over to billing.", "billing",
                                                  "a charge", phase=1)]
    decision = policies.decide(room, view(), answers)
    assert policies.decide(room, view(), answers) == decision
    record = _record(view(), answers, decision)
    line = handoff.explain(room, record)
    assert line.notes == ("triage tried to hand to tech: refused (triage may hand the "
                          "conversation to billing only)", "triage handed to billing: a charge")
    assert line.decision["handoff"] == {"from": "triage", "to": "billing", "reason": "a charge"}


def test_the_dashboard_shows_the_active_agent_and_the_chain():
    chain = orjson.dumps([[1, "triage", "billing", "a charge"], [1, "billing", "triage", ""]])
    shown = handoff.handoff_chain(spec(), {"floor:to": "triage", "floor:chain": chain.decode()})
    assert shown["active"] == "triage"
    assert shown["note"] == "active: triage · handoffs: triage → billing (a charge) → triage"
    assert handoff.handoff_chain(spec(), {})["note"] == "active: triage"


def _record(seen: TurnView, answers: list[Answer], decision: Any) -> TurnRecord:
    return TurnRecord(turn=seen.turn, run=seen.run, run_turns=seen.run_turns, epoch=1,
                      snapshot_seq=seen.snapshot_seq, messages_in_run=seen.messages_in_run,
                      recent=list(seen.recent), policy_state=dict(seen.policy_state),
                      floor_state=dict(seen.floor_state), bids=answers,
                      winner=decision.winner, stop_reason=decision.stop)
