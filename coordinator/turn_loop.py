"""One room's turn loop: the body of DESIGN.md's "The turn, step by step"."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field, replace

import orjson
import structlog

from coordinator import policies
from coordinator.lease import Lease
from coordinator.outages import OutageClock
from coordinator.policies import Decision, TurnView
from coordinator.room_io import OpenTurn, RoomIO
from coordinator.transport import Transport, chunk_requests
from shared.models import Bid, BidRequest, BidStatus, RoomSpec, RoomStatus, TurnRecord
from shared.records import RoomState, agent_message_fields, turn_record_fields

log = structlog.get_logger("parley.turn")


@dataclass
class TurnOptions:
    """Coordinator-wide knobs the loop needs."""

    prefix: str
    agents_per_task: int
    turns_maxlen: int


@dataclass
class RoomRunner:
    """Serves one room under a held lease until its run ends and it goes idle.

    It is the room's only writer while the lease holds; every write is fenced, so if the
    lease is lost the next write raises LeaseLost and the runner stops.
    """

    lease: Lease
    io: RoomIO
    transport: Transport
    options: TurnOptions
    # The coordinator's, shared by all its rooms; a room on its own never sees an outage.
    outages: OutageClock = field(default_factory=OutageClock)
    spec: RoomSpec = field(init=False)
    spec_version: int = field(init=False)

    async def run(self) -> None:
        """Take turns until the room goes idle. LeaseLost propagates to the caller."""
        self.spec_version, self.spec = await self.io.read_spec(self.lease.room)
        while True:
            _, state = await self.io.drain_inbox(self.lease)
            if state.turn_open:
                await self.take_turn(state, self.resume_turn(state))
                continue
            if state.status is not RoomStatus.RUNNING:
                if await self.go_idle():
                    return
                continue
            stop = policies.stop_before_turn(self.spec, view_of(state, state.turn + 1))
            if stop is not None:
                await self.io.end_run(self.lease, stop.status, stop.stop or "", stop.detail)
                continue
            turn = await self.io.open_turn(self.lease, self.spec.policy.bid_timeout_s)
            await self.take_turn(state, turn)

    def resume_turn(self, state: RoomState) -> OpenTurn:
        """The turn a previous holder opened; a passed deadline restarts the clock for the
        agents still missing, so a takeover does not turn them into timeouts. A turn that
        overlapped an outage gets its full bid time again from now (Redis answers again)."""
        now = time.time()
        deadline = state.turn_deadline
        graced = self.outages.give_time_again(self.lease.room, state.turn, state.turn_opened_at)
        if graced or deadline <= now:
            deadline = max(deadline, now + self.spec.policy.bid_timeout_s)
        log.info("turn_resumed", room=self.lease.room, turn=state.turn,
                 given_time_again=graced or None)
        return OpenTurn(state.turn, state.turn_snapshot_seq, state.turn_bids_from, deadline,
                        state.turn_opened_at, resumed=True)

    async def take_turn(self, state: RoomState, turn: OpenTurn) -> None:
        """Fan out, collect, decide and commit one turn."""
        structlog.contextvars.bind_contextvars(turn=turn.number)
        bids = await self.collect(turn)
        view = view_of(state, turn.number)
        decision = policies.decide(self.spec, view, bids)
        await self.commit(state, turn, view, bids, decision)
        self.outages.forget(self.lease.room)

    async def collect(self, turn: OpenTurn) -> list[Bid]:
        """Every agent's bid for the turn: those already in the stream (a resumed turn)
        are reused, the missing agents are asked, and whoever has not answered by the
        deadline counts as timed out. A turn that overlapped an outage of Redis or the
        broker gets its time again, and a turn nobody answered is asked once more."""
        room = self.lease.room
        got: dict[str, Bid] = {}
        cursor = turn.bids_from
        if turn.resumed:
            # A fresh turn has no bids yet: only a resumed one reads what already came.
            cursor = self.keep_bids(turn, got, await self.io.read_bids(room, cursor), cursor)
        await self.fan_out(turn, [name for name in self.spec.agent_names if name not in got])
        asked_again = False
        while len(got) < len(self.spec.agents):
            block_ms = int((turn.deadline - time.time()) * 1000)
            if block_ms <= 0 and self.outages.give_time_again(room, turn.number, turn.opened_at):
                # The workers were cut off too: their requests may be lost or expired.
                turn = replace(turn, deadline=time.time() + self.spec.policy.bid_timeout_s)
                log.warning("turn_given_time_again", room=room, turn=turn.number)
                await self.fan_out(turn, [n for n in self.spec.agent_names if n not in got])
                continue
            if block_ms <= 0 and not got and not asked_again:
                # Nobody answered: a worker killed while holding the turn's only task must
                # not end the run as no_bids. Ask once more; an unserved queue still fails.
                turn = replace(turn, deadline=time.time() + self.spec.policy.bid_timeout_s)
                log.warning("turn_asked_again", room=room, turn=turn.number)
                await self.fan_out(turn, list(self.spec.agent_names))
                asked_again = True
                continue
            if block_ms <= 0:
                break
            cursor = self.keep_bids(turn, got, await self.io.wait_bids(room, cursor, block_ms),
                                    cursor)
        return [got.get(name) or timed_out(name, turn.number) for name in self.spec.agent_names]

    def keep_bids(self, turn: OpenTurn, got: dict[str, Bid], entries: list[tuple[str, Bid]],
                  cursor: str) -> str:
        """Keep each agent's first bid for this turn (late bids of earlier turns and
        redelivered duplicates are ignored); returns the stream id read up to."""
        for cursor, bid in entries:  # noqa: B007 - the last id read is the new cursor
            if bid.turn == turn.number and bid.agent in self.spec.agent_names:
                got.setdefault(bid.agent, bid)
        return cursor

    async def fan_out(self, turn: OpenTurn, agents: list[str]) -> None:
        """Send one task per queue and chunk of agents."""
        if not agents:
            return
        by_queue: dict[str, list[str]] = {}
        for name in agents:
            by_queue.setdefault(self.spec.agent(name).queue, []).append(name)
        template = BidRequest(
            prefix=self.options.prefix, room=self.lease.room, turn=turn.number,
            attempt=self.lease.epoch, agents=[], snapshot_seq=turn.snapshot_seq,
            deadline=turn.deadline, spec_version=self.spec_version,
        )
        requests = chunk_requests(by_queue, self.options.agents_per_task, template)
        # A publish waits for the broker's reply: in a thread, so that meanwhile the event
        # loop (every other room of this coordinator) keeps moving.
        await asyncio.to_thread(self.transport.send, requests)

    async def commit(self, state: RoomState, turn: OpenTurn, view: TurnView, bids: list[Bid],
                     decision: Decision) -> None:
        """Write the decision with the fenced commit script and log the turn."""
        now = time.time()
        record = TurnRecord(
            turn=turn.number, run=state.run, run_turns=view.run_turns, epoch=self.lease.epoch,
            snapshot_seq=turn.snapshot_seq, messages_in_run=state.messages_in_run,
            recent=list(state.recent), bids=bids, adjusted=decision.adjusted,
            winner=decision.winner, score=decision.score, stop_reason=decision.stop,
            stop_detail=decision.detail, cuts=decision.cuts, opened_at=turn.opened_at,
            deadline=turn.deadline, decided_at=now,
        )
        payload = {
            "recent": _json_list(decision.recent),
            "usage": usage_increments(bids),
            "record": turn_record_fields(record),
            "turns_maxlen": str(self.options.turns_maxlen),
        }
        if decision.winner is not None:
            payload["message"] = agent_message_fields(
                decision.winner, decision.message, decision.score or 0.0, turn.number,
                state.run, self.lease.epoch, now)
        if decision.stop is not None:
            payload["stop"] = {"status": decision.status.value, "reason": decision.stop.value,
                               "detail": decision.detail}
        seq = await self.io.commit(self.lease, turn.number, turn.snapshot_seq, payload)
        log.info(
            "turn_committed", speaker=decision.winner, seq=seq or None,
            message_chars=len(decision.message), stop_reason=decision.stop,
            detail=decision.detail or None, cuts=decision.cuts or None,
            turn_ms=round((now - turn.opened_at) * 1000, 2),
            calls=[call_usage(bid) for bid in bids], prompt_tokens=record.prompt_tokens,
            completion_tokens=record.completion_tokens, cost_usd=record.cost_usd,
        )

    async def go_idle(self) -> bool:
        """Leave the runnable set unless someone posted meanwhile (then keep serving).

        The due time is read before the last look at the inbox and the room leaves the set
        only if it is unchanged: a post moves it to now, so a post racing with this step
        keeps the room runnable even if this coordinator dies right here.
        """
        room = self.lease.room
        self.lease.idling = True  # renewals stop moving the room's due time
        due = await self.io.due_time(room)
        moved, _ = await self.io.drain_inbox(self.lease)
        if moved or not await self.io.unschedule(room, due):
            self.lease.idling = False
            return False
        await self.io.touch(room)
        log.info("room_idle", room=room)
        return True


def view_of(state: RoomState, turn: int) -> TurnView:
    """The policy's view of the room for ``turn``."""
    run_turns = state.run_turns if state.turn_open else state.run_turns + 1
    return TurnView(
        turn=turn, run=state.run, run_turns=run_turns, messages_in_run=state.messages_in_run,
        recent=tuple(state.recent), snapshot_seq=state.last_seq,
    )


def timed_out(agent: str, turn: int) -> Bid:
    """The silent bid of an agent that did not answer in time."""
    return Bid(agent=agent, turn=turn, status=BidStatus.TIMEOUT, error="no bid before the deadline")


def usage_increments(bids: list[Bid]) -> dict[str, str]:
    """Token and cost increments for the room's and each agent's running totals."""
    increments: dict[str, float] = {}
    for bid in bids:
        for name in ("prompt_tokens", "completion_tokens", "cost_usd"):
            amount = float(getattr(bid, name))
            if amount:
                increments[name] = increments.get(name, 0.0) + amount
                increments[f"agent:{bid.agent}:{name}"] = amount
    return {field_name: repr(amount) for field_name, amount in increments.items()}


def call_usage(bid: Bid) -> dict[str, object]:
    """One call's line in the per-turn log event."""
    return {"agent": bid.agent, "status": bid.status.value, "prompt_tokens": bid.prompt_tokens,
            "completion_tokens": bid.completion_tokens, "cost_usd": bid.cost_usd,
            "latency_ms": bid.latency_ms}


def _json_list(items: tuple[str, ...]) -> str:
    return orjson.dumps(list(items)).decode()
