"""A coordinator's reads and fenced writes of one room's keys (asyncio)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import orjson
from redis.exceptions import ResponseError

from parley.coordinator.answer_reads import AnswerReads, OwnReads
from parley.coordinator.lease import Lease, LeaseLost
from parley.coordinator.policies.base import POSTED, Decision, WatchedState
from parley.shared.approvals import Approval, approval_from_values, field_names
from parley.shared.keys import Keys
from parley.shared.models import (
    Answer,
    FloorChange,
    PostedMessage,
    RoomSpec,
    ToolCallRecord,
    TurnRecord,
    Usage,
)
from parley.shared.organizations import OrgLimits, parse_limits, usage_of, utc_day
from parley.shared.records import (
    CALL_TOTALS,
    FLOOR_FIELD_PREFIX,
    POLICY_FIELD_PREFIX,
    RUN_TOTAL_PREFIX,
    SENDER_MAX_BYTES,
    RoomState,
    agent_message_fields,
    answer_from_fields,
    call_counts,
    decode,
    floor_change_from_entry,
    tool_calls_fields,
    turn_record_fields,
    usage_from,
)
from parley.shared.refusals import FENCED, Refusal, refused_with
from parley.shared.scripts import Scripts
from parley.shared.settings import Settings
from parley.shared.spec_limits import STORED
from parley.shared.store import now_ms

# How long a coordinator goes by the organizations' limits it read before reading them
# again: an edited tokens file reaches the turns within this.
ORG_LIMITS_READ_S = 5.0


@dataclass(frozen=True)
class InboxLimits:
    """What drain accepts from a room's inbox, how much it keeps of what it sets aside, the
    log's cap (0: never trimmed) for drain and commit, and how much of each tool result a
    committed message keeps."""

    message_max_bytes: int
    dead_letter_maxlen: int
    dead_letter_value_max_bytes: int
    log_maxlen: int = 0
    tool_result_max_bytes: int = Settings.model_fields["tool_result_max_bytes"].default

    @classmethod
    def from_settings(cls, settings: Settings) -> InboxLimits:
        """The limits configured in ``settings``."""
        return cls(settings.message_max_bytes, settings.dead_letter_stream_maxlen,
                   settings.dead_letter_value_max_bytes, settings.log_stream_maxlen,
                   settings.tool_result_max_bytes)


@dataclass(frozen=True)
class Drained:
    """What one drain did: messages moved, the state it left, and the inbox entries it set
    aside as dead letters (inbox id, reason)."""

    moved: int
    state: RoomState
    set_aside: list[tuple[str, str]]


@dataclass(frozen=True)
class OpenTurn:
    """A turn in flight: fixed by open_turn.lua, so a successor can resume it."""

    number: int
    snapshot_seq: int
    bids_from: str
    deadline: float
    opened_at: float
    resumed: bool = False  # opened by an earlier holder: some answers may already be in


@dataclass(frozen=True)
class FailedTake:
    """A failed take counted: the takes failed in a row, whether that failed the room, and
    whether another coordinator's count had failed it already (then nothing was counted)."""

    attempts: int
    failed: bool = False
    failed_before: bool = False


def _fence(error: ResponseError) -> Exception:
    """A refused fenced write means this coordinator must drop the room."""
    if refused_with(error, FENCED):
        return LeaseLost(str(error))
    return error


class RoomIO:
    """Room reads and the fenced writes of the turn loop, for one coordinator."""

    def __init__(self, client: Any, keys: Keys, scripts: Scripts, drain_batch: int = 256,
                 limits: InboxLimits | None = None, events_maxlen: int | None = None,
                 waits: AnswerReads | None = None):
        self.redis = client
        self.waits = waits or OwnReads(client)  # for the blocking reads of answers
        self.keys = keys
        self.scripts = scripts
        self.drain_batch = drain_batch
        # Unless given (the service passes its settings'), the settings' defaults.
        defaults = Settings.model_construct()
        self.limits = limits or InboxLimits.from_settings(defaults)
        # Every fenced script also writes the room's events, capped near this.
        self.events_maxlen = events_maxlen or defaults.events_stream_maxlen
        # Each organization's limits, and when they were read (monotonic s).
        self.org_limits: dict[str, tuple[float, OrgLimits]] = {}

    async def read_spec(self, room: str) -> tuple[int, RoomSpec]:
        """The room's spec and its version."""
        version, spec_json = await self.redis.hmget(self.keys.spec(room), "version", "json")
        # A room of hundreds of agents takes a while to validate: off the event loop, which
        # runs every other room's turns meanwhile.
        return int(version), await asyncio.to_thread(coordinator_spec, spec_json)

    async def drain_inbox(self, lease: Lease) -> Drained:
        """Commit posted messages to the log unless a turn is open, setting aside the
        entries that cannot be messages; returns what moved, what was set aside and the
        room's state afterwards."""
        room = lease.room
        keys = [self.keys.lease(room), self.keys.state(room), self.keys.inbox(room),
                self.keys.log(room), self.keys.dead_letters(room), self.keys.events(room)]
        limits = self.limits
        args = [lease.token, lease.epoch, self.drain_batch, limits.dead_letter_maxlen,
                SENDER_MAX_BYTES, limits.message_max_bytes, limits.dead_letter_value_max_bytes,
                limits.log_maxlen, self.events_maxlen]
        try:
            moved, fields, set_aside = await self.scripts.drain(keys=keys, args=args)
        except ResponseError as error:
            raise _fence(error) from error
        pairs = [decode(value) for value in set_aside]
        return Drained(int(moved), state_of(fields), list(zip(pairs[::2], pairs[1::2], strict=True)))

    async def open_turn(self, lease: Lease, timeout_s: float, trace: str = "",
                        relay: str = "") -> OpenTurn | None:
        """Open the next turn with a deadline ``timeout_s`` from now, keeping the run's
        ``trace`` (a traceparent) in the state; ``relay`` names the task a relay turn relays
        (it starts a run when none is under way). None when the room was paused meanwhile
        (no turn opens: the caller looks at the room again)."""
        room = lease.room
        opened_at = time.time()
        deadline = opened_at + timeout_s
        keys = [self.keys.lease(room), self.keys.state(room), self.keys.bids(room),
                self.keys.events(room)]
        try:
            turn, snapshot, bids_from = await self.scripts.open_turn(
                keys=keys, args=[lease.token, f"{deadline:.6f}", f"{opened_at:.6f}",
                                 self.events_maxlen, trace, relay])
        except ResponseError as error:
            if refused_with(error, Refusal.PAUSED):
                return None
            raise _fence(error) from error
        return OpenTurn(int(turn), int(snapshot), decode(bids_from), deadline, opened_at)

    async def read_posted(self, room: str, after_seq: int, upto_seq: int,
                          agents: tuple[str, ...], most: int) -> list[PostedMessage]:
        """The log's messages after ``after_seq`` up to ``upto_seq`` not sent by one of
        ``agents``, oldest first; at most the ``most`` newest of them."""
        if upto_seq <= after_seq:
            return []
        start = max(after_seq + 1, upto_seq - most + 1)
        entries = await self.redis.xrange(self.keys.log(room), f"{start}-0", f"{upto_seq}-0")
        posted = []
        for _entry_id, raw in entries:
            fields = {decode(k): decode(v) for k, v in raw.items()}
            if fields.get("sender") not in agents:
                posted.append(PostedMessage(seq=int(fields["seq"]), sender=fields["sender"],
                                            content=fields.get("content", "")))
        return posted

    async def read_floor_ops(self, room: str, after_id: str, most: int) -> list[FloorChange]:
        """Floor changes queued after ``after_id`` (exclusive), oldest first, at most
        ``most``."""
        entries = await self.redis.xrange(self.keys.floor_ops(room), f"({after_id}", "+",
                                          count=most)
        return [floor_change_from_entry(entry_id, raw) for entry_id, raw in entries]

    async def read_usage(self, room: str) -> tuple[Usage, Usage]:
        """The totals of every answer so far: the current run's and the room's."""
        fields = [f"{prefix}{total}" for prefix in (RUN_TOTAL_PREFIX, "") for total in CALL_TOTALS]
        values = await self.redis.hmget(self.keys.state(room), fields)
        read = {name: decode(value) for name, value in zip(fields, values, strict=True) if value}
        return usage_from(read, RUN_TOTAL_PREFIX), usage_from(read)

    async def read_org_budget(self, organization: str) -> tuple[OrgLimits, Usage]:
        """The organization's limits (as the API last loaded them, read again at most every
        ORG_LIMITS_READ_S: a global key, kept off most turns) and its totals of today."""
        now = time.monotonic()
        cached = self.org_limits.get(organization)
        if cached is None or now - cached[0] > ORG_LIMITS_READ_S:
            cached = (now, parse_limits(await self.redis.hget(self.keys.org_limits,
                                                              organization)))
            self.org_limits[organization] = cached
        if not cached[1].daily():
            return cached[1], Usage()
        day = await self.redis.hgetall(self.keys.org_day(organization, utc_day()))
        return cached[1], usage_of(day)

    async def read_answers(self, room: str, after_id: str) -> list[tuple[str, Answer]]:
        """Bids written after ``after_id`` (exclusive), oldest first."""
        entries = await self.redis.xrange(self.keys.bids(room), f"({after_id}", "+")
        return [(decode(entry_id), answer_from_fields(fields)) for entry_id, fields in entries]

    async def wait_answers(self, room: str, after_id: str, block_ms: int) -> list[tuple[str, Answer]]:
        """Bids after ``after_id``, waiting up to ``block_ms`` for the first."""
        entries = await self.waits.wait(self.keys.bids(room), after_id, block_ms)
        return [(decode(entry_id), answer_from_fields(fields)) for entry_id, fields in entries]

    async def read_approvals(self, room: str, turn: int, phase: int, since: float
                             ) -> list[Approval]:
        """The approvals of ``phase`` of ``turn``: the pending ones, and those answered
        since ``since`` (unix s; the turn's opening)."""
        pending = await self.redis.zrange(self.keys.approvals_open(room), 0, -1)
        answered = await self.redis.zrangebyscore(self.keys.approvals_done(room),
                                                  int(since * 1000), "+inf")
        prefix = f"{turn}.{phase}."
        ids = [decode(member) for member in [*pending, *answered]]
        ids = [approval_id for approval_id in ids if approval_id.startswith(prefix)]
        if not ids:
            return []
        pipe = self.redis.pipeline(transaction=False)
        for approval_id in ids:
            pipe.hmget(self.keys.approvals(room), field_names(approval_id))
        return [approval_from_values(approval_id, values)
                for approval_id, values in zip(ids, await pipe.execute(), strict=True)
                if values[7]]

    async def commit(self, lease: Lease, record: TurnRecord, decision: Decision,
                     turns_maxlen: int, watched: WatchedState | None = None,
                     shared_tool_results: bool = True) -> tuple[int, Drained | None]:
        """Commit a decided turn with commit.lua, all or nothing: the winner's message (with
        the tool calls it was written from, their results for every agent's prompts when
        ``shared_tool_results``, else for its sender's only), the state and totals the
        decision changes, the run's end if it stops, and ``record`` (kept in a turns
        stream capped near ``turns_maxlen``); a change of the policy's ``watched`` fields
        writes their event. The log must still be at the turn's snapshot. Returns the new
        message's seq (0 for no message) and, when the inbox is empty, what a drain would
        return now (None: drain first)."""
        room = lease.room
        keys = [self.keys.lease(room), self.keys.state(room), self.keys.log(room),
                self.keys.turns(room), self.keys.events(room), self.keys.inbox(room)]
        payload = commit_payload(record, decision, turns_maxlen, self.limits.log_maxlen,
                                 self.events_maxlen, watched)
        if "message" in payload:
            payload["message"].update(tool_calls_fields(
                posted_tool_calls(record), shared_tool_results,
                self.limits.tool_result_max_bytes))
        if decision.relay:  # the relay turn's commit hands its task's result back
            payload["handback"] = decision.relay
            keys += [self.keys.tasks(room), self.keys.handbacks(room)]
        args = [lease.token, record.turn, record.snapshot_seq, orjson.dumps(payload)]
        try:
            seq, waiting, state = await self.scripts.commit(keys=keys, args=args)
        except ResponseError as error:
            raise _fence(error) from error
        return int(seq), None if waiting else Drained(0, state_of(state), [])

    async def end_run(self, lease: Lease, status: str, reason: str, detail: str,
                      fields: dict[str, str] | None = None,
                      watched: WatchedState | None = None) -> None:
        """End the run outside a turn, setting ``fields`` (a policy's room-scoped fields)
        in the same write; a change of the policy's ``watched`` fields writes their
        event."""
        keys = [self.keys.lease(lease.room), self.keys.state(lease.room),
                self.keys.events(lease.room)]
        pairs = [item for pair in (fields or {}).items() for item in pair]
        watch = orjson.dumps(watch_payload(watched)).decode() if watched else ""
        try:
            await self.scripts.end_run(keys=keys, args=[lease.token, status, reason, detail,
                                                        self.events_maxlen, watch, *pairs])
        except ResponseError as error:
            raise _fence(error) from error

    async def count_failed_take(self, room: str, token: str, most: int, error: str
                                ) -> FailedTake:
        """Count a take of the lease ``token`` that ended in ``error`` ('' for a take the
        acquire refused): the takes failed in a row, and whether the room now ended failed
        (room_error) because that reached ``most``, or had already."""
        keys = [self.keys.lease(room), self.keys.state(room), self.keys.inbox(room),
                self.keys.events(room)]
        try:
            failed_takes, outcome = await self.scripts.count_failed_take(
                keys=keys, args=[token, most, error, self.events_maxlen])
        except ResponseError as error_reply:
            raise _fence(error_reply) from error_reply
        return FailedTake(int(failed_takes), failed=outcome == 1, failed_before=outcome == 2)

    async def set_runnable(self, room: str, runnable: bool) -> None:
        """Put the room in (due now) or take it out of the runnable set."""
        if runnable:
            await self.redis.zadd(self.keys.runnable, {room: now_ms()})
        else:
            await self.redis.zrem(self.keys.runnable, room)

    async def postpone(self, room: str, delay_s: float) -> None:
        """Make the room due ``delay_s`` from now (if it is still runnable)."""
        await self.redis.zadd(self.keys.runnable, {room: now_ms() + int(delay_s * 1000)},
                              xx=True)

    async def due_time(self, room: str) -> float | None:
        """The room's due time in the runnable set, or None when it is not in it."""
        return await self.redis.zscore(self.keys.runnable, room)

    async def unschedule(self, room: str, due: float | None) -> bool:
        """Take the room off the runnable set if its due time is still ``due``."""
        expected = "" if due is None else repr(due)
        return bool(await self.scripts.unschedule(keys=[self.keys.runnable], args=[room, expected]))

    async def touch(self, room: str) -> None:
        """Mark the room active now, for dashboards ordering rooms by activity and for idle
        expiry (only if it is listed: a room deleted meanwhile stays gone)."""
        await self.redis.zadd(self.keys.rooms, {room: now_ms()}, xx=True)


def coordinator_spec(spec_json: bytes) -> RoomSpec:
    """A stored spec as the coordinator keeps it: validated, without its agents' scripts.

    The scripts are emptied before validation, not after: the coordinator never replays
    one, and validating a thousand rooms' scripts entry by entry is most of a standby's CPU
    as it takes them over (the workers validate the spec with its scripts). A stored spec
    that is not JSON, or whose other fields do not validate, still fails here."""
    try:
        document = orjson.loads(spec_json)
    except orjson.JSONDecodeError:
        return RoomSpec.model_validate_json(spec_json)  # its own error, as for any spec
    agents = document.get("agents") if isinstance(document, dict) else None
    for agent in agents if isinstance(agents, list) else ():
        if isinstance(agent, dict) and isinstance(agent.get("script"), list):
            agent["script"] = []
    return RoomSpec.model_validate(document, context=STORED)


def state_of(fields: list[Any]) -> RoomState:
    """A state hash a script returned as a flat field/value list."""
    return RoomState(dict(zip(fields[::2], fields[1::2], strict=True)))


def watch_payload(watched: WatchedState) -> dict[str, Any]:
    """A policy's watched fields as the scripts take them (lib/watched.lua): the event, and
    each field as [state field, the event's field, value when absent]."""
    return {"event": watched.event,
            "fields": [[f"{FLOOR_FIELD_PREFIX}{name}", name, absent]
                       for name, absent in watched.fields]}


def commit_payload(record: TurnRecord, decision: Decision, turns_maxlen: int, log_maxlen: int,
                   events_maxlen: int, watched: WatchedState | None = None) -> dict[str, Any]:
    """commit.lua's payload (its header describes each part). The message is stamped with
    the turn's decision time."""
    payload: dict[str, Any] = {
        "fields": state_updates(decision),
        # Tokens and cost were counted as each answer landed (write_answers.lua).
        "usage": call_counts(record.bids),
        "record": turn_record_fields(record),
        "turns_maxlen": str(turns_maxlen),
        "log_maxlen": str(log_maxlen),
        "events_maxlen": str(events_maxlen),
    }
    if watched is not None:
        payload["watch"] = watch_payload(watched)
    if decision.winner is not None:
        payload["message"] = agent_message_fields(
            decision.winner, decision.message, decision.score, record.turn, record.run,
            record.epoch, record.decided_at)
        if POSTED in decision.addressed:
            payload["message"]["addressed"] = orjson.dumps(decision.addressed[POSTED]).decode()
    if decision.stop is not None:
        payload["stop"] = {"status": decision.status.value, "reason": decision.stop.value,
                           "detail": decision.detail}
    return payload


def posted_tool_calls(record: TurnRecord) -> list[ToolCallRecord]:
    """The tool calls of the answer the turn's winner posted: its last of the turn (the
    phase that wrote the message comes after any other of its calls)."""
    posted = [answer for answer in record.bids if answer.agent == record.winner]
    return posted[-1].tool_calls if posted else []


def state_updates(decision: Decision) -> dict[str, str]:
    """The state fields a decision sets: recent speakers, the policy's own fields, and
    the run's answer when the turn changed it."""
    fields = {"recent": orjson.dumps(list(decision.recent)).decode()}
    fields.update({f"{POLICY_FIELD_PREFIX}{name}": value
                   for name, value in decision.policy_state.items()})
    fields.update(floor_fields(decision))
    if decision.answer is not None:
        fields["answer"] = decision.answer
    return fields


def floor_fields(decision: Decision) -> dict[str, str]:
    """The room-scoped policy fields a decision sets (``floor:<field>``)."""
    return {f"{FLOOR_FIELD_PREFIX}{name}": value for name, value in decision.floor_state.items()}
