"""One room's turn loop: the body of docs/architecture.md, "A turn, step by step"."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any

import structlog

from parley.coordinator import policies
from parley.coordinator.first_turns import FirstTurns
from parley.coordinator.lease import Lease
from parley.coordinator.outages import OutageClock
from parley.coordinator.policies import Calls, Decision, FloorOp, FloorPolicy, Posted, TurnView
from parley.coordinator.policies.budget import (
    Limit,
    first_reached,
    has_limits,
    left_in,
    limits_of,
    not_made,
    org_limits_of,
)
from parley.coordinator.relay import relay_calls, relay_decision
from parley.coordinator.room_io import Drained, OpenTurn, RoomIO, floor_fields
from parley.coordinator.task_keeper import TaskKeeper
from parley.coordinator.transport import Sender, chunk_requests
from parley.shared import metrics, tracing
from parley.shared.approvals import held_seconds
from parley.shared.logs import one_line
from parley.shared.models import (
    DEFAULT_ORGANIZATION,
    Answer,
    AnswerStatus,
    CallKind,
    CallRequest,
    ErrorKind,
    FloorChange,
    PostedMessage,
    RoomSpec,
    RoomStatus,
    TurnRecord,
)
from parley.shared.protocol import CALL_TASK
from parley.shared.records import RoomState
from parley.shared.settings import Settings
from parley.shared.tasks import Task

log = structlog.get_logger("parley.turn")

# The turn's log line shows this much of the posted message.
MESSAGE_LOG_CHARS = 300
# The floor field holding the last posted message a policy read, and the most unread
# messages a turn reads (the newest: a flood of posts cannot make a turn read it all).
READ_SEQ_FIELD = "read_seq"
OPS_ID_FIELD = "ops_id"  # the floor field holding the last floor change applied
MOST_UNREAD = 256
# How often a turn whose calls are cut on listening looks for its agent being set to only
# listen.
LISTEN_POLL_MS = 250
# How often a turn held for a pending approval looks at it again.
APPROVAL_POLL_S = 1.0


@dataclass
class TurnOptions:
    """Coordinator-wide knobs the loop needs."""

    prefix: str
    agents_per_task: int
    turns_maxlen: int
    task_heartbeat_s: float = 2.0
    task_finished_max: int = Settings.model_fields["task_finished_max"].default


@dataclass
class TurnAnswers:
    """One turn's answers: what arrived in the answers stream, and the answers of the
    phases played so far (timeouts included), in phase order."""

    turn: int
    cursor: str  # the answers stream id read up to
    committed_calls: dict[str, int]  # each agent's calls in earlier turns
    ops_after: str = "0-0"  # floor changes after this id came while the turn ran
    answers: list[Answer] = field(default_factory=list)
    arrived: dict[tuple[int, str], Answer] = field(default_factory=dict)
    # What came and took no part: recorded with the turn as its late answers.
    late: list[Answer] = field(default_factory=list)
    closed: set[int] = field(default_factory=set)  # the phases timed out
    # The phases asked again (or given time again): a call's timeout arriving there may be
    # the earlier ask's, which ran into the earlier deadline, so it stands only if the
    # call has no other answer by the phase's deadline.
    asked_again: set[int] = field(default_factory=set)
    timeouts: dict[tuple[int, str], Answer] = field(default_factory=dict)

    def keep(self, entries: list[tuple[str, Answer]]) -> None:
        """Keep each call's first answer for this turn's open phases and move the cursor
        past them; the others (earlier turns' answers, this turn's past their phase's
        deadline, redelivered duplicates) are late."""
        for self.cursor, answer in entries:  # noqa: B007 - the last id read is the cursor
            key = (answer.phase, answer.agent)
            if answer.turn != self.turn or answer.phase in self.closed or key in self.arrived:
                self.late.append(answer)
            elif answer.phase in self.asked_again and answer.status is AnswerStatus.TIMEOUT \
                    and key not in self.timeouts:
                self.timeouts[key] = answer
            else:
                self.arrived[key] = answer
                if key in self.timeouts:
                    self.late.append(self.timeouts.pop(key))

    def unanswered(self, phase: int, calls: Calls) -> bool:
        """True when none of the phase's calls has answered yet."""
        return len(self.missing(phase, calls)) == len(calls.agents)

    def missing(self, phase: int, calls: Calls) -> list[str]:
        """The agents of the phase's calls that have not answered yet."""
        return [name for name in calls.agents if (phase, name) not in self.arrived]

    def numbers(self, calls: Calls) -> dict[str, int]:
        """Each called agent's call number in the room: a call asked again (a re-ask, a
        takeover) keeps its number, a new phase's call gets the next one."""
        answered = Counter(answer.agent for answer in self.answers)
        return {name: self.committed_calls.get(name, 0) + 1 + answered[name]
                for name in calls.agents}

    def time_out(self, phase: int, calls: Calls) -> None:
        """Close the phase: its answers join the turn's, a missing one as a timeout."""
        numbers = self.numbers(calls)
        self.answers.extend(
            self.arrived.get((phase, name)) or self.timeouts.pop((phase, name), None)
            or timed_out(name, self.turn, calls.kind, phase, numbers[name])
            for name in calls.agents)
        self.closed.add(phase)


@dataclass
class RoomRunner:
    """Serves one room under a held lease until its run ends and it goes idle.

    It is the room's only writer while the lease holds; every write is fenced, so if the
    lease is lost the next write raises LeaseLost and the runner stops.
    """

    lease: Lease
    io: RoomIO
    transport: Sender  # the room's way into the coordinator's outbox
    options: TurnOptions
    # The coordinator's, shared by all its rooms; a room on its own never sees an outage
    # and never waits for another's first turn.
    outages: OutageClock = field(default_factory=OutageClock)
    first_turns: FirstTurns = field(default_factory=FirstTurns)
    ticket: int = field(init=False, default=0)  # the room's place in first_turns
    spec: RoomSpec = field(init=False)
    spec_version: int = field(init=False)
    policy: FloorPolicy = field(init=False)  # the room's policy's record
    # The run's trace (its invoke_workflow span's traceparent; "" with tracing off), and
    # that span while this runner started it and the run goes on.
    trace: str = field(init=False, default="")
    workflow: Any = field(init=False, default=None)
    trace_run: int = field(init=False, default=0)  # the run self.trace is of
    organization: str = DEFAULT_ORGANIZATION  # the room's, as its state says
    tasks_started: int = 0  # the room's background tasks ever started, as its state says
    tasks: TaskKeeper = field(init=False)
    tasks_open: bool = field(init=False, default=False)

    async def run(self) -> None:
        """Take turns until the room goes idle or is paused (a turn already open is
        finished first). LeaseLost propagates to the caller: a cancelled or deleted room
        fences its holder out that way."""
        self.ticket = self.first_turns.take()
        try:
            self.spec_version, self.spec = await self.io.read_spec(self.lease.room)
            self.policy = policies.record_of(self.spec)
            self.tasks = TaskKeeper(self.io, self.transport, self.options.prefix,
                                    self.options.task_heartbeat_s,
                                    self.options.task_finished_max)
            await self.serve()
        finally:
            self.first_turns.opened(self.ticket)
            self.end_workflow()

    async def serve(self) -> None:
        """The loop of ``run``."""
        # What a commit found when the inbox was empty stands for the next drain.
        drained: Drained | None = None
        while True:
            state = (drained or await self.drain()).state
            self.organization, self.tasks_started = state.organization, state.tasks_started
            drained = None
            relay: Task | None = None
            if not state.turn_open and state.tasks_started:
                posted, self.tasks_open, relay = await self.tasks.serve(self.lease, self.spec)
                if posted:
                    continue  # drain again: the log moved
            if state.turn_open:
                self.first_turns.opened(self.ticket)
                drained = await self.take_turn(state, self.resume_turn(state))
                continue
            if relay is not None and not state.paused:
                # The relay comes before the policy's next turn, in a run or as a new one.
                await self.first_turns.before_turn(self.ticket)
                drained = await self.open_relay(state, relay)
                continue
            if state.status is not RoomStatus.RUNNING or state.paused:
                if await self.go_idle():
                    return
                continue
            unread, ops = await self.read_posted(state, state.last_seq)
            first = policies.first_calls(self.spec,
                                         view_of(state, state.turn + 1, unread, ops))
            if isinstance(first, Decision):
                await self.io.end_run(self.lease, first.status, first.stop or "", first.detail,
                                      floor_fields(first), self.policy.watched)
                self.end_workflow()
                continue
            await self.first_turns.before_turn(self.ticket)
            turn = await self.io.open_turn(self.lease, self.spec.policy.call_timeout,
                                           self.run_trace(state))
            if turn is not None:  # None: paused since the drain; look again
                drained = await self.take_turn(state, turn)

    async def open_relay(self, state: RoomState, task: Task) -> Drained | None:
        """Open and play the turn in which the task's agent relays its result."""
        turn = await self.io.open_turn(self.lease, self.spec.policy.call_timeout,
                                       self.run_trace(state), relay=task.id)
        if turn is None:  # paused since the drain
            return None
        # The state as the turn opened it (a relay into an idle room started a new run).
        return await self.take_turn((await self.drain()).state, turn)

    async def read_posted(self, state: RoomState, upto_seq: int
                          ) -> tuple[tuple[Posted, ...], tuple[FloorOp, ...]]:
        """What others than the agents posted that the policy has not read yet, and the
        floor changes it has not applied (only a policy that reads them, as ``mention``
        does, is given them)."""
        if not self.policy.reads_posted:
            return (), ()
        room = self.lease.room
        after = int(state.floor_state.get(READ_SEQ_FIELD) or 0)
        found = await self.io.read_posted(room, after, upto_seq, self.spec.agent_names,
                                          MOST_UNREAD)
        changes = await self.io.read_floor_ops(
            room, state.floor_state.get(OPS_ID_FIELD) or "0-0", MOST_UNREAD)
        return (tuple(Posted(m.seq, m.sender, m.content) for m in found),
                tuple(FloorOp(c.id, c.op, c.agent, c.text) for c in changes))

    async def drain(self) -> Drained:
        """Commit what people posted; log each inbox entry set aside as unreadable."""
        drained = await self.io.drain_inbox(self.lease)
        for inbox_id, reason in drained.set_aside:
            log.warning("inbox_entry_set_aside", room=self.lease.room, inbox_id=inbox_id,
                        reason=reason)
        return drained

    def resume_turn(self, state: RoomState) -> OpenTurn:
        """The turn a previous holder opened; a passed deadline restarts the clock for the
        calls still missing, so a takeover does not turn them into timeouts. A turn that
        overlapped an outage gets its full time again from now (Redis answers again)."""
        now = time.time()
        deadline = state.turn_deadline
        graced = self.outages.give_time_again(self.lease.room, state.turn, state.turn_opened_at)
        if graced or deadline <= now:
            deadline = max(deadline, now + self.spec.policy.call_timeout)
        log.info("turn_resumed", room=self.lease.room, turn=state.turn,
                 given_time_again=graced or None)
        metrics.TAKEOVERS.inc()
        return OpenTurn(state.turn, state.turn_snapshot_seq, state.turn_bids_from, deadline,
                        state.turn_opened_at, resumed=True)

    def run_trace(self, state: RoomState) -> str:
        """The run's trace, started at its first turn (under the post that started the run)
        or continued from the state; a runner continuing a run another holder started says
        so with a ``takeover`` span. "" while tracing is off."""
        if not tracing.on():
            return ""
        kept = tracing.valid_traceparent(state.trace)
        if kept and kept != self.trace:
            self.end_workflow()
            self.trace, self.trace_run = kept, state.run
            with tracing.span("takeover", {"parley.room": self.lease.room,
                                           "parley.run": state.run, "parley.turn": state.turn,
                                           "parley.epoch": self.lease.epoch}, parent=kept):
                pass
        elif not (self.trace and self.trace_run == state.run):  # else: not stored yet
            self.end_workflow()
            self.trace_run = state.run
            self.workflow = tracing.start("invoke_workflow", {
                "gen_ai.operation.name": "invoke_workflow", "gen_ai.conversation.id":
                self.lease.room, "parley.room": self.lease.room, "parley.run": state.run,
                "parley.policy": self.spec.policy.kind}, parent=state.run_traceparent)
            self.trace = tracing.traceparent(self.workflow)
        return self.trace

    def end_workflow(self) -> None:
        """End the run's span if this runner started it (its run ended or the room went)."""
        tracing.end(self.workflow)
        self.workflow = None

    async def take_turn(self, state: RoomState, turn: OpenTurn) -> Drained | None:
        """The turn played in its span, under the run's; a run that stopped ends the run's."""
        trace = self.run_trace(state)
        # Attributes only while tracing: off, every turn would build them for nothing.
        attributes = None
        if tracing.on():
            attributes = {"parley.room": self.lease.room, "parley.run": state.run,
                          "parley.turn": turn.number, "parley.resumed": turn.resumed}
        with tracing.span("turn", attributes, parent=trace) as current:
            drained, decision = await self.play_turn(state, turn)
            if current is not None:
                tracing.annotate(current, {"parley.winner": decision.winner,
                                           "parley.stop_reason": decision.stop and
                                           decision.stop.value, "parley.decision":
                                           "stop" if decision.stop else
                                           "relay" if decision.relay else "post"})
        if decision.stop is not None:
            self.end_workflow()
        return drained

    async def play_turn(self, state: RoomState, turn: OpenTurn
                        ) -> tuple[Drained | None, Decision]:
        """Play the turn's phases (fan out, collect, decide) and commit the outcome; returns
        what the commit saw for the next turn (None: drain first), and the decision."""
        structlog.contextvars.bind_contextvars(turn=turn.number)
        if state.raw.get("turn_relay"):
            return await self.play_relay(state, turn, state.raw["turn_relay"])
        view = view_of(state, turn.number, *await self.read_posted(state, turn.snapshot_seq))
        calls = policies.first_calls(self.spec, view)
        if isinstance(calls, Decision):
            raise RuntimeError(f"turn {turn.number} is open but its policy stops before it")
        inbox = TurnAnswers(turn.number, turn.bids_from, committed_calls(state),
                            ops_after=last_op_id(state, view))
        if turn.resumed:
            # A fresh turn has no answers yet: only a resumed one reads what already came.
            inbox.keep(await self.io.read_answers(self.lease.room, inbox.cursor))
        phase = 0
        while True:
            await self.collect(turn, phase, calls, inbox)
            decision = policies.decide(self.spec, view, inbox.answers)
            if decision.next is None:
                break
            phase, calls = phase + 1, decision.next
            turn = replace(turn, deadline=time.time() + self.spec.policy.call_timeout)
        drained = await self.commit(state, turn, view, inbox, decision)
        self.outages.forget(self.lease.room)
        return drained, decision

    async def play_relay(self, state: RoomState, turn: OpenTurn, task_id: str
                         ) -> tuple[Drained | None, Decision]:
        """Play a relay turn (coordinator/relay.py): the task's agent, told the result,
        takes the floor without the policy being asked; its commit hands the result back."""
        task = next(task for task in await self.tasks.tasks(self.lease.room)
                    if task.id == task_id)
        view = view_of(state, turn.number)
        inbox = TurnAnswers(turn.number, turn.bids_from, committed_calls(state))
        if turn.resumed:
            inbox.keep(await self.io.read_answers(self.lease.room, inbox.cursor))
        await self.collect(turn, 0, relay_calls(task), inbox)
        decision = relay_decision(self.spec, view, task, inbox.answers)
        drained = await self.commit(state, turn, view, inbox, decision)
        self.outages.forget(self.lease.room)
        return drained, decision

    async def collect(self, turn: OpenTurn, phase: int, calls: Calls, inbox: TurnAnswers
                      ) -> None:
        """Every call of the phase answered into ``inbox``: answers already in the stream
        (a resumed turn) are reused, the missing calls are made, and whoever has not
        answered by the deadline counts as timed out (a turn nobody answered at all is
        asked once more)."""
        room = self.lease.room
        await self.fan_out(turn, phase, calls, inbox)
        sent_deadline = turn.deadline  # the deadline the calls were sent with
        asked_again = False
        while inbox.missing(phase, calls):
            block_ms = int((turn.deadline - time.time()) * 1000)
            if block_ms <= 0:
                held = await self.held_deadline(turn, phase, sent_deadline)
                if held > turn.deadline:
                    if turn.deadline <= sent_deadline:
                        log.info("turn_held", room=room, turn=turn.number, phase=phase)
                    turn = replace(turn, deadline=held)
                    block_ms = int((held - time.time()) * 1000)
            if calls.kind in self.policy.cut_on_listen:
                await self.cut_listening(phase, calls, inbox)
                if not inbox.missing(phase, calls):
                    break
                block_ms = min(block_ms, LISTEN_POLL_MS)
            if block_ms <= 0 and self.outages.give_time_again(room, turn.number, turn.opened_at):
                # The workers were cut off too: their requests may be lost or expired.
                turn = replace(turn, deadline=time.time() + self.spec.policy.call_timeout)
                log.warning("turn_given_time_again", room=room, turn=turn.number, phase=phase)
                inbox.asked_again.add(phase)
                await self.fan_out(turn, phase, calls, inbox)
                sent_deadline = turn.deadline
                continue
            if block_ms <= 0 and inbox.unanswered(phase, calls) and not asked_again:
                # Nobody answered the phase: a worker killed while holding its only task must
                # not end the run as no_bids, nor cost a later phase's one call (the chosen
                # participant's reply). Ask once more; an unserved queue still fails.
                turn = replace(turn, deadline=time.time() + self.spec.policy.call_timeout)
                log.warning("turn_asked_again", room=room, turn=turn.number, phase=phase)
                inbox.asked_again.add(phase)
                await self.fan_out(turn, phase, calls, inbox)
                sent_deadline = turn.deadline
                asked_again = True
                continue
            if block_ms <= 0:
                break
            inbox.keep(await self.io.wait_answers(room, inbox.cursor, block_ms))
        inbox.time_out(phase, calls)

    async def held_deadline(self, turn: OpenTurn, phase: int, sent_deadline: float) -> float:
        """The phase's deadline held for its approvals: the calls' deadline plus the time
        a tool call of theirs waited for a person (the waiting call holds its own deadline
        as long), so that a call still has the rest of its time once answered. While one is
        pending it holds at least another slice: the loop looks again then, the records
        telling it how long the wait was (a takeover reads the same records)."""
        approvals = await self.io.read_approvals(self.lease.room, turn.number, phase,
                                                 turn.opened_at)
        if not approvals:
            return sent_deadline
        now = time.time()
        held = sent_deadline + held_seconds(approvals, now)
        if any(approval.pending_at(now) for approval in approvals):
            held = max(held, now + APPROVAL_POLL_S)
        return held

    async def cut_listening(self, phase: int, calls: Calls, inbox: TurnAnswers) -> None:
        """A call whose agent was set to only listen since the turn opened is cut (a
        mention room's turn): its answer is recorded as cancelled (what it would have said
        is not posted), and the change itself applies at the next turn."""
        changes = await self.io.read_floor_ops(self.lease.room, inbox.ops_after, MOST_UNREAD)
        listening = {change.agent for change in changes if change.op == "listen"}
        numbers = inbox.numbers(calls)
        for name in inbox.missing(phase, calls):
            if name in listening:
                inbox.arrived[(phase, name)] = cancelled(name, inbox.turn, calls.kind, phase,
                                                         numbers[name])
                log.info("turn_cut", room=self.lease.room, turn=inbox.turn, agent=name)

    async def fan_out(self, turn: OpenTurn, phase: int, calls: Calls, inbox: TurnAnswers
                      ) -> None:
        """Make the phase's calls still missing: one request per queue and chunk of agents
        (the outbox may put several rooms' requests in one task message),
        each call with its number (a scripted agent's k-th call replays its k-th entry)
        and capped at what is left of the room's spending limits. With nothing left, the
        calls are not made: each is answered as such, of kind ``budget``."""
        agents, numbers = inbox.missing(phase, calls), inbox.numbers(calls)
        if not agents:
            return
        bounds = await self.spending_bounds()
        limit = first_reached(bounds)
        if limit is not None:
            for name in agents:
                inbox.arrived[(phase, name)] = not_made(name, turn.number, calls.kind,
                                                        phase, numbers[name], limit)
            log.info("calls_not_made", room=self.lease.room, turn=turn.number,
                     phase=phase, limit=limit.name or limit.field)
            return
        left = left_in(bounds)
        queues = {caller.name: caller.call_queue for caller in self.spec.callers}
        by_queue: dict[str, list[str]] = {}
        for name in agents:
            by_queue.setdefault(queues[name], []).append(name)
        template = CallRequest(
            prefix=self.options.prefix, room=self.lease.room, turn=turn.number,
            attempt=self.lease.epoch, agents=[], kind=calls.kind, phase=phase,
            snapshot_seq=turn.snapshot_seq, deadline=turn.deadline,
            spec_version=self.spec_version, instructions=dict(calls.instructions),
            max_tokens=left.tokens, max_cost_usd=left.cost_usd, organization=self.organization,
            tasks_started=self.tasks_started, answers_from=turn.bids_from if turn.resumed else "",
        )
        # Each request carries its publish span's traceparent: a message the outbox shares
        # between rooms carries several traces, which one header could not.
        attributes = None
        if tracing.on():
            attributes = {"messaging.system": "celery", "messaging.operation.type": "send",
                          "parley.call.kind": calls.kind.value, "parley.phase": phase,
                          "parley.agents": list(agents)}
        with tracing.span(f"publish {CALL_TASK}", attributes, kind="producer") as publish:
            template = template.model_copy(update={"traceparent": tracing.traceparent()})
            requests = chunk_requests(by_queue, self.options.agents_per_task, template, numbers)
            if publish is not None:
                tracing.annotate(publish, {"parley.messages": len(requests)})
            await self.transport.send(requests)

    async def spending_bounds(self) -> tuple[Limit, ...]:
        """The limits the calls going out now are checked against, with their totals: the
        room's and run's (its spec's), then its organization's of the day."""
        bounds: tuple[Limit, ...] = ()
        if has_limits(self.spec.limits):
            run_usage, room_usage = await self.io.read_usage(self.lease.room)
            bounds = limits_of(self.spec.limits, run_usage, room_usage)
        org_limits, org_usage = await self.io.read_org_budget(self.organization)
        if org_limits.daily():
            bounds += org_limits_of(self.organization, org_limits, org_usage)
        return bounds

    async def commit(self, state: RoomState, turn: OpenTurn, view: TurnView,
                     inbox: TurnAnswers, decision: Decision) -> Drained | None:
        """Write the decision with the fenced commit script and log the turn (and the
        warnings the decision asks for: logged once, as the turn is committed once);
        returns what the commit saw for the next turn."""
        record = turn_record(state, turn, view, inbox.answers, decision, self.lease.epoch,
                             inbox.late, tracing.trace_id_of(self.trace))
        with tracing.span("commit", {"parley.turn": record.turn} if tracing.on() else None):
            seq, drained = await self.io.commit(self.lease, record, decision,
                                                self.options.turns_maxlen, self.policy.watched,
                                                self.spec.tool_results == "shared")
        log_turn(record, decision, seq)
        metrics.observe_turn(record, self.organization)
        for line in decision.log_lines:
            log.warning(line.event, room=self.lease.room, turn=record.turn, **line.fields)
        return drained

    async def go_idle(self) -> bool:
        """Leave the runnable set unless someone posted or resumed the room meanwhile (then
        keep serving). A paused room goes the same way: its posts wait in the inbox.

        The due time is read before the last look at the inbox and the room leaves the set
        only if it is unchanged: a post moves it to now, so a post racing with this step
        keeps the room runnable even if this coordinator dies right here. A task started
        since the loop last served the tasks counts as a post: its start moved the due time
        before that read, or the last look's state counts it.
        """
        room = self.lease.room
        await self.lease.set_idling(True)  # renewals stop moving the room's due time
        due = await self.io.due_time(room)
        drained = await self.drain()
        task_started = drained.state.tasks_started != self.tasks_started
        if drained.moved or task_started or not await self.io.unschedule(room, due):
            await self.lease.set_idling(False)
            return False
        await self.io.touch(room)
        if self.tasks_open:
            # Looked at again while its tasks run: a worker that dies is noticed.
            await self.io.redis.zadd(self.io.keys.runnable, {room: self.tasks.next_look_ms()},
                                     nx=True)
        log.info("room_paused" if drained.state.paused else "room_idle", room=room)
        return True


def view_of(state: RoomState, turn: int, unread: tuple[Posted, ...] = (),
            ops: tuple[FloorOp, ...] = ()) -> TurnView:
    """The policy's view of the room for ``turn``."""
    run_turns = state.run_turns if state.turn_open else state.run_turns + 1
    return TurnView(
        turn=turn, run=state.run, run_turns=run_turns, messages_in_run=state.messages_in_run,
        recent=tuple(state.recent), snapshot_seq=state.last_seq,
        policy_state=state.policy_state, run_usage=state.run_usage, room_usage=state.usage,
        floor_state=state.floor_state, unread=unread, ops=ops,
    )


def last_op_id(state: RoomState, view: TurnView) -> str:
    """The newest floor change the turn's view holds (or the floor had applied)."""
    return view.ops[-1].id if view.ops else state.floor_state.get(OPS_ID_FIELD) or "0-0"


def cancelled(agent: str, turn: int, kind: CallKind, phase: int, call: int) -> Answer:
    """The answer of a call cut because its agent was set to only listen."""
    return Answer(agent=agent, turn=turn, kind=kind, phase=phase, call=call,
               status=AnswerStatus.ERROR, error="cut: the agent was set to only listen",
               error_kind=ErrorKind.CANCELLED)


def committed_calls(state: RoomState) -> dict[str, int]:
    """Each agent's calls in the room's committed turns."""
    return {name: int(amount) for name, amount in state.agent_totals("calls").items()}


def timed_out(agent: str, turn: int, kind: CallKind = CallKind.BID, phase: int = 0,
              call: int = 0) -> Answer:
    """The silent answer of a call that did not answer in time."""
    return Answer(agent=agent, turn=turn, kind=kind, phase=phase, call=call,
               status=AnswerStatus.TIMEOUT, error="no answer before the deadline",
               error_kind=ErrorKind.NO_ANSWER)


def turn_record(state: RoomState, turn: OpenTurn, view: TurnView, bids: list[Answer],
                decision: Decision, epoch: int, late: list[Answer] | None = None,
                trace_id: str = "") -> TurnRecord:
    """The record of a decided turn: all it was decided from, the decision, and the late
    answers that came meanwhile."""
    return TurnRecord(
        turn=turn.number, run=state.run, run_turns=view.run_turns, epoch=epoch,
        snapshot_seq=turn.snapshot_seq, messages_in_run=state.messages_in_run,
        recent=list(state.recent), policy_state=dict(view.policy_state), bids=bids,
        late=late or [],
        floor_state=dict(view.floor_state), addressed=decision.addressed,
        unread=[PostedMessage(seq=p.seq, sender=p.sender, content=p.content)
                for p in view.unread],
        ops=[FloorChange(id=op.id, op=op.op, agent=op.agent, text=op.text) for op in view.ops],
        adjusted=decision.adjusted,
        winner=decision.winner, score=decision.score, stop_reason=decision.stop,
        stop_detail=decision.detail, cuts=decision.cuts, relay=decision.relay,
        opened_at=turn.opened_at,
        deadline=turn.deadline, decided_at=time.time(), trace_id=trace_id,
    )


def log_turn(record: TurnRecord, decision: Decision, seq: int) -> None:
    """The turn's one log line: who spoke and what (the start of it), why the run stopped,
    every call with its tokens, cost and latency, and the late answers that came."""
    log.info(
        "turn_committed", speaker=decision.winner, seq=seq or None,
        relay=decision.relay or None,
        message=one_line(decision.message, MESSAGE_LOG_CHARS) or None,
        message_chars=len(decision.message), stop_reason=decision.stop,
        detail=decision.detail or None, cuts=decision.cuts or None,
        turn_ms=round((record.decided_at - record.opened_at) * 1000, 2),
        calls=[call_usage(bid) for bid in record.bids],
        late=[call_usage(bid) for bid in record.late] or None,
        prompt_tokens=record.prompt_tokens,
        completion_tokens=record.completion_tokens, cost_usd=record.cost_usd,
    )


def call_usage(bid: Answer) -> dict[str, object]:
    """One call's line in the per-turn log event."""
    return {"agent": bid.agent, "kind": bid.kind.value, "status": bid.status.value,
            "prompt_tokens": bid.prompt_tokens,
            "completion_tokens": bid.completion_tokens, "cost_usd": bid.cost_usd,
            "latency_ms": bid.latency_ms}
