"""Floor policies: pure functions from (spec, turn view, answers) to a decision.

Each policy is one module exporting its record (``POLICY``, a ``FloorPolicy``): its kind,
its calls and decisions, how its turns are told and its stops worded, and what the
dashboard shows of its state. Its two functions:

- ``first_calls(spec, view)``: the calls a new turn starts with (``Calls``), or a
  ``Decision`` that stops the run before any call;
- ``decide(spec, view, answers)``: given every answer of the turn so far (all phases),
  either ``Decision(next=Calls(...))`` for another phase of the same turn, or the turn's
  outcome. It is a function of all the answers, so a coordinator taking over a turn
  replays the phases that already have their answers, and a recorded turn replays.

This module finds the room's policy by its kind and adds the rules every policy shares:
the spending limits (coordinator.policies.budget) before a turn starts and for a phase
none of whose calls could be made for them, the impersonation cut
(coordinator.policies.impersonation) before any policy sees a reply, and the stops when
nobody could answer (save for policies that contain their own failures).
"""

from __future__ import annotations

from dataclasses import replace

from parley.coordinator.policies import bid, handoff, mention, roundtable, selector
from parley.coordinator.policies.base import (
    Calls,
    Decision,
    FloorOp,
    FloorPolicy,
    LogLine,
    Posted,
    TurnView,
    record_view,
)
from parley.coordinator.policies.budget import budget_stop, unaffordable_stop
from parley.coordinator.policies.common import failure_stop, nobody_answered
from parley.coordinator.policies.impersonation import cut_answers
from parley.shared.models import Answer, RoomSpec, TurnRecord

POLICIES: dict[str, FloorPolicy] = {policy.kind: policy for policy in (
    bid.POLICY, selector.POLICY, roundtable.POLICY, mention.POLICY, handoff.POLICY)}


class UnknownPolicy(LookupError):
    """A room's policy kind has no record: parley cannot run, tell or show it."""


def record_of(spec: RoomSpec) -> FloorPolicy:
    """The record of the room's policy; UnknownPolicy (naming the kinds there are) for a
    kind no policy has."""
    try:
        return POLICIES[spec.policy.kind]
    except KeyError:
        raise UnknownPolicy(f"no floor policy {spec.policy.kind!r}: the policies are "
                            f"{', '.join(POLICIES)}") from None


def first_calls(spec: RoomSpec, view: TurnView) -> Calls | Decision:
    """The calls a new turn starts with, or a stop decided before any call: a spending
    limit reached (for every policy), or the policy's own."""
    return budget_stop(spec.limits, view) or record_of(spec).first_calls(spec, view)


def decide(spec: RoomSpec, view: TurnView, answers: list[Answer]) -> Decision:
    """The next phase of the turn, or its outcome, given every answer so far (missing
    calls as timeouts), each reply first cut where it starts speaking for another
    participant; a phase whose calls could not be made for want of budget stops the run."""
    answers, cuts = cut_answers(spec, answers)
    unaffordable = unaffordable_stop(view, answers)
    if unaffordable is not None:
        return replace(unaffordable, cuts=cuts)
    policy = record_of(spec)
    if policy.contains_failures:
        return replace(policy.decide(spec, view, answers), cuts=cuts)
    decision = None if nobody_answered(answers) else policy.decide(spec, view, answers)
    if decision is None or decision.next is None:
        decision = failure_stop(spec, view, answers) or decision
    assert decision is not None  # nobody answered: failure_stop always stops the run
    return replace(decision, cuts=cuts)


def replay(spec: RoomSpec, record: TurnRecord) -> Decision:
    """Decide a recorded turn again from its recorded inputs and answers (as they
    arrived: the impersonation cut is made again). A relay turn was not the policy's: it
    replays as recorded (coordinator/relay.py)."""
    if record.relay:
        return relayed(record)
    return decide(spec, record_view(record), record.bids)


def relayed(record: TurnRecord) -> Decision:
    """A recorded relay turn's decision: its agent spoke, the policy's state unchanged."""
    said = next((bid.message for bid in record.bids if bid.agent == record.winner), "")
    return Decision(winner=record.winner, message=said, recent=tuple(record.recent),
                    relay=record.relay)


__all__ = ["Calls", "Decision", "FloorOp", "FloorPolicy", "LogLine", "Posted", "TurnView",
           "UnknownPolicy", "decide", "first_calls", "record_of", "record_view", "relayed",
           "replay"]
