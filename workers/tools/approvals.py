"""A tool call that waits for a person before it runs (shared/approvals.py holds the
records).

The call asks (or, asked again, finds its earlier request), then blocks on the room's
events stream, where the answer lands, in slices of ``WAIT_SLICE_S``: between slices it
looks at the record, at the worker shutting down and at its turn still being open. Past
the approval's ``expires_at`` it times the approval out, a denial. The call's deadline is
held meanwhile: the tool loop moves it on by the verdict's ``waited_s``, as the
coordinator moves the phase's.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import structlog

from parley.shared.approvals import Approval, ApprovalStatus, field_names
from parley.shared.models import RoomSpec, ToolCallRecord
from parley.shared.records import decode
from parley.shared.store import RoomStore
from parley.workers.deadlines import STOPPING, DeadlinePassed

log = structlog.get_logger("parley.tools")

# How long one blocking read waits before the call looks again (a worker shutting down
# stops waiting within it).
WAIT_SLICE_S = 1.0
# How long to wait again when this worker's clock says the approval's time is up and
# Redis's does not yet.
CLOCK_SLACK_S = 0.05


@dataclass(frozen=True)
class ApprovalVerdict:
    """A person's answer to a tool call (or the timeout's): whether it may run, who said
    so (``""`` for a timeout), why, and how long the call waited for it."""

    approved: bool
    by: str
    reason: str
    waited_s: float = 0.0

    def held(self, deadline: float) -> float:
        """The call's deadline once held for the wait."""
        return deadline + self.waited_s

    def denial(self) -> str:
        """The tool's result for the model when the call was denied."""
        if not self.by:
            return f"The tool call was denied: {self.reason}."
        because = f": {self.reason}" if self.reason else ""
        return f"The tool call was denied by {self.by}{because}."


class ApprovalWaitStopped(DeadlinePassed):
    """The call stopped waiting for its approval before an answer: the worker is shutting
    down, or the turn it was made for ended. Its request stays: a call asked again finds it."""


def turn_and_phase(call_id: str) -> tuple[int, int]:
    """The turn and phase a tool call id (``<turn>.<phase>.<call>.<round>.<index>``) names."""
    parts = call_id.split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        raise ValueError(f"tool call id {call_id!r} is not <turn>.<phase>.<call>.<round>."
                         "<index>") from None


def await_approval(store: RoomStore, room: str, spec: RoomSpec, record: ToolCallRecord
                   ) -> ApprovalVerdict:
    """Ask for approval of ``record``'s tool call (or find it asked) and wait for the
    answer, at most the spec's ``approval_timeout_s`` from when it was first asked."""
    started = time.time()
    turn, phase = turn_and_phase(record.id)
    created, approval = store.approvals.request(room, record.id, record.agent, record.tool,
                                                record.arguments, turn, phase,
                                                spec.approval_timeout_s)
    log.info("tool_approval_waiting", room=room, id=record.id, tool=record.tool,
             asked_again=not created or None)
    while approval.status is ApprovalStatus.PENDING:
        left = approval.expires_at - time.time()
        if left <= 0:
            closed, approval = store.approvals.time_out(room, record.id)
            if closed:
                break
            left = CLOCK_SLACK_S
        if STOPPING.is_set():
            raise ApprovalWaitStopped(f"the worker stopped while {record.tool} waited for "
                                      "approval")
        approval = wait_for_answer(store, room, approval, turn, min(left, WAIT_SLICE_S))
    verdict = ApprovalVerdict(approval.approved, approval.by, approval.reason,
                              waited_s=time.time() - started)
    log.info("tool_approval_answered", room=room, id=record.id, tool=record.tool,
             status=approval.status.value, by=approval.by or None,
             waited_s=round(verdict.waited_s, 3))
    return verdict


def wait_for_answer(store: RoomStore, room: str, approval: Approval, turn: int,
                    block_s: float) -> Approval:
    """The record after waiting up to ``block_s`` for an event: the events stream's newest
    id, the turn and the record are read at one moment, so an answer written after is an
    event past that id and ends the wait."""
    keys = store.keys
    pipe = store.redis.pipeline(transaction=True)
    pipe.xrevrange(keys.events(room), "+", "-", count=1)
    pipe.hmget(keys.state(room), "turn", "turn_open")
    pipe.hmget(keys.approvals(room), field_names(approval.id))
    newest, (open_turn, turn_open), values = pipe.execute()
    if values[7] is None or decode(values[7]) != ApprovalStatus.PENDING:
        return store.approvals.get(room, approval.id) or approval
    if turn_open != b"1" or open_turn is None or int(open_turn) != turn:
        raise ApprovalWaitStopped(f"turn {turn} ended while {approval.tool} waited for "
                                  "approval")
    cursor = decode(newest[0][0]) if newest else "0-0"
    store.wait_events(room, cursor, int(block_s * 1000), count=1)
    return store.approvals.get(room, approval.id) or approval
