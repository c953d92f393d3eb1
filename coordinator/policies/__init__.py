"""Floor policies: pure functions from (spec, turn view, answers) to a decision.

Each policy module offers two functions:

- ``first_calls(spec, view)``: the calls a new turn starts with (``Calls``), or a
  ``Decision`` that stops the run before any call;
- ``decide(spec, view, answers)``: given every answer of the turn so far (all phases),
  either ``Decision(next=Calls(...))`` for another phase of the same turn, or the turn's
  outcome. It is a function of all the answers, so a coordinator taking over a turn
  replays the phases that already have their answers, and a recorded turn replays.

This module picks the room's policy and adds the rules every policy shares: the spending
limits (coordinator.policies.budget) before a turn starts, the impersonation cut
(coordinator.policies.impersonation) before any policy sees a reply, and the stops when
nobody could answer (save for policies with their own rules for failed calls,
OWN_FAILURE_RULES).
"""

from __future__ import annotations

from dataclasses import replace
from types import ModuleType

from parley.coordinator.policies import bid, mention, roundtable, selector
from parley.coordinator.policies.base import Calls, Decision, FloorOp, LogLine, Posted, TurnView
from parley.coordinator.policies.budget import budget_stop
from parley.coordinator.policies.common import failure_stop, nobody_answered
from parley.coordinator.policies.impersonation import cut_answers
from parley.shared.models import Answer, RoomSpec, TurnRecord

POLICIES: dict[str, ModuleType] = {"bid": bid, "selector": selector, "roundtable": roundtable,
                                   "mention": mention}
# Policies that rule on failed calls themselves: the shared no_bids and all_agents_failed
# stops do not apply (a round-table posts a panelist's failure and debates on; a mention
# room posts an agent's failure and falls back from a failed classifier).
OWN_FAILURE_RULES = frozenset({"roundtable", "mention"})
# Policies that read what others than the agents posted (TurnView.unread).
READS_POSTED = frozenset({"mention"})


def reads_posted(spec: RoomSpec) -> bool:
    """True when the room's policy reads posted messages (``TurnView.unread``)."""
    return spec.policy.kind in READS_POSTED


def first_calls(spec: RoomSpec, view: TurnView) -> Calls | Decision:
    """The calls a new turn starts with, or a stop decided before any call: a spending
    limit reached (for every policy), or the policy's own."""
    return budget_stop(spec.limits, view) or POLICIES[spec.policy.kind].first_calls(spec, view)


def decide(spec: RoomSpec, view: TurnView, answers: list[Answer]) -> Decision:
    """The next phase of the turn, or its outcome, given every answer so far (missing
    calls as timeouts), each reply first cut where it starts speaking for another
    participant."""
    answers, cuts = cut_answers(spec, answers)
    policy = POLICIES[spec.policy.kind]
    if spec.policy.kind in OWN_FAILURE_RULES:
        return replace(policy.decide(spec, view, answers), cuts=cuts)
    decision = None if nobody_answered(answers) else policy.decide(spec, view, answers)
    if decision is None or decision.next is None:
        decision = failure_stop(spec, view, answers) or decision
    assert decision is not None  # nobody answered: failure_stop always stops the run
    return replace(decision, cuts=cuts)


def replay(spec: RoomSpec, record: TurnRecord) -> Decision:
    """Decide a recorded turn again from its recorded inputs and answers (as they
    arrived: the impersonation cut is made again)."""
    return decide(spec, record_view(record), record.bids)


def record_view(record: TurnRecord) -> TurnView:
    """The room as the recorded turn's policy saw it when the turn opened."""
    return TurnView(
        turn=record.turn,
        run=record.run,
        run_turns=record.run_turns,
        messages_in_run=record.messages_in_run,
        recent=tuple(record.recent),
        snapshot_seq=record.snapshot_seq,
        policy_state=dict(record.policy_state),
        floor_state=dict(record.floor_state),
        unread=tuple(Posted(m.seq, m.sender, m.content) for m in record.unread),
        ops=tuple(FloorOp(op.id, op.op, op.agent, op.text) for op in record.ops),
    )


__all__ = ["Calls", "Decision", "FloorOp", "LogLine", "Posted", "TurnView", "decide", "first_calls",
           "record_view", "replay"]
