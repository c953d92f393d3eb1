"""Floor policies: pure functions from (spec, turn view, bids) to a decision.

Each policy module offers ``stop_before_turn(spec, view)`` and ``decide(spec, view, bids)``;
this module picks the room's policy and adds the rules every policy shares: the
impersonation cut (coordinator.policies.impersonation) before any policy sees the bids,
and the stops when nobody could bid.
"""

from __future__ import annotations

from dataclasses import replace
from types import ModuleType

from coordinator.policies import bid
from coordinator.policies.base import Decision, TurnView
from coordinator.policies.common import failure_stop
from coordinator.policies.impersonation import cut_bids
from shared.models import Bid, RoomSpec, TurnRecord

POLICIES: dict[str, ModuleType] = {"bid": bid}


def stop_before_turn(spec: RoomSpec, view: TurnView) -> Decision | None:
    """A stop decided before any agent is asked (e.g. the message cap), or None."""
    return POLICIES[spec.policy.kind].stop_before_turn(spec, view)


def decide(spec: RoomSpec, view: TurnView, bids: list[Bid]) -> Decision:
    """This turn's decision, given every agent's bid (missing agents as timeouts), each
    reply first cut where it starts speaking for another participant."""
    bids, cuts = cut_bids(spec, bids)
    queues = ", ".join(sorted({agent.queue for agent in spec.agents}))
    failure = failure_stop(view, bids, spec.policy.bid_timeout_s, queues)
    decision = failure or POLICIES[spec.policy.kind].decide(spec, view, bids)
    return replace(decision, cuts=cuts)


def replay(spec: RoomSpec, record: TurnRecord) -> Decision:
    """Decide a recorded turn again from its recorded inputs (the bids as they arrived:
    the impersonation cut is made again)."""
    view = TurnView(
        turn=record.turn,
        run=record.run,
        run_turns=record.run_turns,
        messages_in_run=record.messages_in_run,
        recent=tuple(record.recent),
        snapshot_seq=record.snapshot_seq,
    )
    return decide(spec, view, record.bids)


__all__ = ["Decision", "TurnView", "decide", "replay", "stop_before_turn"]
