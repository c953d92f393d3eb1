"""Synchronous access to rooms, for clients and workers (the coordinator has its own, async).

Posting a message is ``XADD inbox`` and then ``ZADD runnable``, in that order: a coordinator
going idle removes the room from ``runnable`` before its last look at the inbox, so a post
that races with it always leaves the room runnable (no lost wake-up). Resuming a room makes
it due the same way, after its state says it is no longer paused.

Every change to a room's own keys is one Lua script (``shared/lua/``) that checks before it
writes; the global sorted sets (``rooms``, ``runnable``) are separate commands, so that each
script touches one room's hash slot only (Redis Cluster). A lifecycle change marks the room
active in ``rooms`` *before* its script runs: an expiry sweep that reads the changed state
then also sees the new activity time.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import orjson
import redis
from pydantic import BaseModel

from parley.shared import tracing
from parley.shared.approvals import ApprovalBook
from parley.shared.events import Event, answer_event_fields, event_from_entry
from parley.shared.keys import Keys, check_room_id
from parley.shared.models import (
    DEFAULT_ORGANIZATION,
    Answer,
    FloorChange,
    Message,
    RoomSpec,
    RoomStatus,
    StopReason,
    TurnRecord,
    check_person_name,
    name_key,
)
from parley.shared.organizations import RoomLimitReached, check_organization, read_limits
from parley.shared.records import (
    ZERO_TOTALS,
    RoomState,
    answer_fields,
    answer_from_fields,
    check_post,
    decode,
    floor_change_from_entry,
    message_from_fields,
    turn_record_from_fields,
    usage_increments,
)
from parley.shared.refusals import Refusal, refusal_of
from parley.shared.scripts import Scripts
from parley.shared.settings import Settings
from parley.shared.speakers import same_name
from parley.shared.spec_limits import DEFAULT_MAX_AGENTS, STORED, check_agent_count

# The state fields an archive's delete checks are unchanged since it read the room: any
# post drained, turn opened or committed, run started or ended, pause or resume moves one.
# The approximate cap of a mention room's floor changes stream.
FLOOR_OPS_MAXLEN = 1000
# A tool call's wake-up list outlives any wait for it, then goes on its own.
TOOL_WAKE_TTL_MS = 600_000
# Listing one organization's rooms, or counting them, reads the rooms by recent activity
# a page at a time, at most this many.
ORG_SCAN_PAGE = 500
ORG_SCAN_MAX = 100_000
ARCHIVE_GUARD_FIELDS = ("last_seq", "turn", "turn_open", "run", "status", "inbox_last_id",
                        "paused")


class RoomNotFound(LookupError):
    """The room id names no room."""


class RoomExists(ValueError):
    """A room with that id already exists."""


class RoomHeld(ValueError):
    """A coordinator holds the room (a run is going on): the operation needs it let go."""


class TaskRoomRefused(ValueError):
    """The room is a background task's own: it runs no turns, so it takes no posts and
    starts no task."""


class RoomChanged(ValueError):
    """The room moved on (a post, a turn) between reading it and the change that relied on
    the read: nothing was changed."""


def holder_of(lease: str | None) -> str | None:
    """The coordinator id in a lease value ``<coordinator id>:<epoch>``."""
    return lease.rsplit(":", 1)[0] if lease else None


def script_error(error: redis.ResponseError, room: str) -> Exception:
    """A lifecycle script's refusal as the exception the front door reports in one line."""
    refused = refusal_of(error)
    code, detail = (refused.code, refused.detail) if refused else (None, "")
    if code is Refusal.NO_ROOM:
        return RoomNotFound(f"no room {room!r}")
    if code is Refusal.EXISTS:
        return RoomExists(f"room {room!r} already exists")
    if code is Refusal.HELD:
        return RoomHeld(f"room {room} is held by coordinator {holder_of(detail)} (a run is "
                        "going on): pause or cancel it first, or use --force")
    if code is Refusal.CHANGED:
        return RoomChanged(f"room {room} changed meanwhile ({detail}): nothing was removed")
    if code is Refusal.TASK_ROOM:
        return TaskRoomRefused(f"room {room} is a background task's room of room {detail}: "
                               f"it takes no posts; post into {detail}")
    return error


class RoomSummary(BaseModel):
    """One room as ``parley rooms list`` shows it."""

    room: str
    name: str
    policy: str
    organization: str
    status: RoomStatus
    paused: bool
    run: int
    messages: int  # the log's last seq: every message the room ever had
    stop_reason: StopReason | None
    cost_usd: float
    last_activity: float | None  # unix s
    holder: str | None  # the coordinator serving it
    expires_at: float | None  # unix s, when idle rooms expire and this one would
    parent: str | None = None  # a task's room: the room whose task it works
    children: list[str] = []  # the rooms of its background tasks


@dataclass(frozen=True)
class CancelResult:
    """What cancelling did: whether a run was in progress (and ended), its number, and how
    many posts wait in the inbox (they start the next run)."""

    cancelled: bool
    run: int
    waiting: int


@dataclass(frozen=True)
class RoomHead:
    """An archive's start: the room's spec and state hashes, its inbox and dead letters,
    read at one moment, and what its delete must find unchanged."""

    spec: dict[bytes, bytes]
    state: dict[bytes, bytes]
    inbox: list[tuple[bytes, dict[bytes, bytes]]]
    dead_letters: list[tuple[bytes, dict[bytes, bytes]]]
    holder: str | None

    def read_state(self) -> RoomState:
        """The state hash as read."""
        return RoomState(self.state)

    def guard(self) -> tuple[dict[str, str], str]:
        """The state fields and the inbox's newest id delete.lua must still find."""
        state = {decode(k): decode(v) for k, v in self.state.items()}
        fields = {name: state.get(name, "") for name in ARCHIVE_GUARD_FIELDS}
        return fields, decode(self.inbox[-1][0]) if self.inbox else "0-0"


def now_ms() -> int:
    """Wall-clock milliseconds, the unit of the scheduling sorted sets."""
    return int(time.time() * 1000)



def new_room_fields(spec: RoomSpec, organization: str, **state: str
                    ) -> tuple[dict[str, str], dict[str, str]]:
    """A new room's spec and idle state fields (its totals at 0), ``state`` added."""
    # The version is when the spec was stored (µs), not 1: a room deleted and created
    # again under the same id must not match a worker's cached spec of the old one.
    version = str(time.time_ns() // 1000)
    spec_fields = {"version": version, "name": spec.name, "policy": spec.policy.kind,
                   "json": spec.model_dump_json(exclude_defaults=False)}
    return spec_fields, {"status": "idle", "last_seq": "0", "epoch": "0",
                         "spec_version": version, "organization": organization,
                         **ZERO_TOTALS, **state}

class RoomStore:
    """Rooms in one Redis under one key prefix."""

    def __init__(self, client: redis.Redis, keys: Keys,
                 message_max_bytes: int = Settings.model_fields["message_max_bytes"].default,
                 events_maxlen: int = Settings.model_fields["events_stream_maxlen"].default,
                 max_agents: int = DEFAULT_MAX_AGENTS) -> None:
        # redis-py types every reply as a union of what any client could return; this one
        # returns bytes, and the record functions below decode them.
        self.redis: Any = client
        self.keys = keys
        self.message_max_bytes = message_max_bytes
        self.events_maxlen = events_maxlen
        self.max_agents = max_agents
        self.scripts = Scripts(client)
        self.approvals = ApprovalBook(client, keys, self.scripts, events_maxlen)

    def create_room(self, room: str, spec: RoomSpec,
                    organization: str = DEFAULT_ORGANIZATION) -> None:
        """Store a new room of ``organization``: its spec and idle state (its totals at 0),
        in one script; raise RoomExists if the id is taken, TooManyAgents if the spec has
        more agents than a new room may have, RoomLimitReached if the organization has its
        max_live_rooms (a background task's own room is made by create_task_room and does
        not count there)."""
        check_room_id(room)
        check_organization(organization)
        check_agent_count(len(spec.agents), self.max_agents)
        most = read_limits(self.redis, self.keys, organization).max_live_rooms
        claimed = self.claim_org_room(organization, room, most)
        try:
            self._create(room, "new", *new_room_fields(spec, organization))
        except BaseException:
            # The place was taken for this create: give it back, unless the id is a room
            # of the organization already (a create of the same id at once).
            if claimed and self.organization_of(room) != organization:
                self.redis.srem(self.keys.org_rooms(organization), room)
            raise
        self.redis.zadd(self.keys.rooms, {room: now_ms()})

    def claim_org_room(self, organization: str, room: str, most: int | None) -> bool:
        """Count the room among the organization's live rooms (claim_org_room.lua); True
        when counted now. Raise RoomLimitReached when it has ``most`` (None: no limit)."""
        try:
            return bool(self.scripts.claim_org_room(
                keys=[self.keys.org_rooms(organization)],
                args=[room, "" if most is None else most]))
        except redis.ResponseError as error:
            refused = refusal_of(error)
            if refused and refused.code is Refusal.LIMIT:
                raise RoomLimitReached(
                    f"organization {organization} has {refused.detail} rooms, its "
                    f"max_live_rooms is {most}: delete or archive one first") from error
            raise

    def forget_org_room(self, room: str, organization: str | None) -> None:
        """Take a deleted room out of its organization's live rooms (None: unknown)."""
        if organization is not None:
            self.redis.srem(self.keys.org_rooms(organization), room)
    def create_task_room(self, room: str, spec: RoomSpec, parent: str, task_id: str,
                         organization: str = DEFAULT_ORGANIZATION) -> bool:
        """Store the room of ``parent``'s task ``task_id`` and link the two (the child's
        state names its parent and task, the parent's children set holds it); False when
        it existed (a task delivered again): then only the link is made again. Two
        scripts' worth of writes: the rooms may sit in different Redis Cluster slots."""
        check_room_id(room)
        try:
            self._create(room, "new", *new_room_fields(spec, organization, parent=parent,
                                                       task=task_id))
            created = True
        except RoomExists:
            created = False
        # Never runnable: no coordinator takes a task's room; listed beside its parent.
        pipe = self.redis.pipeline(transaction=False)
        pipe.sadd(self.keys.children(parent), room)
        pipe.zadd(self.keys.rooms, {room: now_ms()})
        pipe.execute()
        return created

    def write_task_log(self, room: str, expected_seq: int, worker: str,
                       messages: list[tuple[str, str]],
                       usage: tuple[int, int, float] = (0, 0, 0.0)) -> int:
        """Append ``messages`` (sender, content) to a task's room after ``expected_seq``
        and add ``usage`` to its totals; 0 when its log had moved past it (written
        before)."""
        prompt, completion, cost = usage
        try:
            return int(self.scripts.task_room_log(
                keys=[self.keys.state(room), self.keys.log(room)],
                args=[expected_seq, f"{time.time():.6f}", worker, int(prompt),
                      int(completion), repr(float(cost)),
                      *[item for message in messages for item in message]]))
        except redis.ResponseError as error:
            raise script_error(error, room) from error

    def children(self, room: str) -> list[str]:
        """The rooms of the room's background tasks, sorted."""
        return sorted(decode(child) for child in self.redis.smembers(self.keys.children(room)))

    def _create(self, room: str, mode: str, spec: dict[Any, Any], state: dict[Any, Any]) -> None:
        pairs = [*_pairs(spec), *_pairs(state)]
        try:
            self.scripts.create(keys=[self.keys.state(room), self.keys.spec(room),
                                      self.keys.log(room)],
                                args=[mode, len(spec), *pairs])
        except redis.ResponseError as error:
            raise script_error(error, room) from error

    def post(self, room: str, sender: str, content: str) -> str:
        """Queue a message from a person or app into the room; return its inbox id.

        People post under their own names: never one a reader could take for an agent's of
        this room (shared.speakers' name_skeleton: case, separators, look-alike and
        invisible characters aside) nor the reserved sender, so no post passes for an
        agent's words. A post also gives a room that failed on its errors (room_error) its
        tries again."""
        check_person_name(sender)
        check_post(sender, content, self.message_max_bytes)
        check_poster(room, sender, self.agent_names(room), self.people(room))
        try:
            inbox_id, paused = self.scripts.post(
                keys=[self.keys.spec(room), self.keys.state(room), self.keys.inbox(room)],
                args=[sender, content, f"{time.time():.6f}", tracing.traceparent()])
        except redis.ResponseError as error:
            raise script_error(error, room) from error
        pipe = self.redis.pipeline(transaction=False)
        if not paused:  # a paused room's posts wait for resume, which makes it due
            pipe.zadd(self.keys.runnable, {room: now_ms()}, lt=True)
        pipe.zadd(self.keys.rooms, {room: now_ms()})
        pipe.execute()
        return decode(inbox_id)

    def floor_op(self, room: str, op: str, agent: str = "", text: str = "") -> str:
        """Queue a change of a mention room's floor for its coordinator (and start a run to
        serve it when none is in progress); returns the change's id."""
        try:
            op_id, paused = self.scripts.floor_op(
                keys=[self.keys.spec(room), self.keys.state(room), self.keys.floor_ops(room),
                      self.keys.events(room)],
                args=[op, agent, text, f"{time.time():.6f}", FLOOR_OPS_MAXLEN,
                      self.events_maxlen])
        except redis.ResponseError as error:
            raise script_error(error, room) from error
        pipe = self.redis.pipeline(transaction=False)
        if not paused:
            pipe.zadd(self.keys.runnable, {room: now_ms()}, lt=True)
        pipe.zadd(self.keys.rooms, {room: now_ms()})
        pipe.execute()
        return decode(op_id)

    def read_floor_ops(self, room: str, after_id: str) -> list[FloorChange]:
        """Floor changes queued after ``after_id``, oldest first."""
        entries = self.redis.xrange(self.keys.floor_ops(room), f"({after_id}", "+")
        return [floor_change_from_entry(entry_id, raw) for entry_id, raw in entries]

    def people(self, room: str) -> list[str] | None:
        """The room's roster of people (a mention room's ``people``), None when it has
        none; read as agent_names reads the agents."""
        spec_json = self.redis.hget(self.keys.spec(room), "json")
        try:
            people = (orjson.loads(spec_json or b"{}").get("policy") or {}).get("people")
        except (orjson.JSONDecodeError, AttributeError, TypeError):
            return None
        if not isinstance(people, list):
            return None
        return [name for name in people if isinstance(name, str)]

    def agent_names(self, room: str) -> list[str]:
        """The names of the room's agents (its selector too), read without validating the
        rest of its spec: a room whose stored spec went bad must still take the post that
        repairs its run."""
        spec_json = self.redis.hget(self.keys.spec(room), "json")
        if spec_json is None:
            raise RoomNotFound(f"no room {room!r}")
        try:
            spec = orjson.loads(spec_json)
            agents = [*(spec.get("agents") or []), (spec.get("policy") or {}).get("selector")]
            return [agent["name"] for agent in agents
                    if isinstance(agent, dict) and isinstance(agent.get("name"), str)]
        except (orjson.JSONDecodeError, AttributeError, TypeError):
            return []

    def read_spec(self, room: str) -> tuple[int, RoomSpec]:
        """The room's spec and its version (checked against the spec bounds as written)."""
        version, spec_json = self.redis.hmget(self.keys.spec(room), "version", "json")
        if spec_json is None:
            raise RoomNotFound(f"no room {room!r}")
        return int(version), RoomSpec.model_validate_json(spec_json, context=STORED)

    def read_state(self, room: str) -> RoomState:
        """The room's state hash."""
        fields = self.redis.hgetall(self.keys.state(room))
        if not fields:
            raise RoomNotFound(f"no room {room!r}")
        return RoomState(fields)

    def read_messages(self, room: str, after_seq: int = 0, upto_seq: int | None = None
                      ) -> list[Message]:
        """Log messages with ``after_seq < seq <= upto_seq``."""
        end = f"{upto_seq}-0" if upto_seq is not None else "+"
        entries = self.redis.xrange(self.keys.log(room), f"({after_seq}-0", end)
        return [message_from_fields(fields) for _, fields in entries]

    def read_messages_from(self, room: str, after_seq: int = 0, count: int = 1000
                           ) -> list[Message]:
        """At most ``count`` log messages after ``after_seq``, oldest first."""
        entries = self.redis.xrange(self.keys.log(room), f"({after_seq}-0", "+", count=count)
        return [message_from_fields(fields) for _, fields in entries]

    def read_answers(self, room: str, after: str = "0-0") -> list[tuple[str, Answer]]:
        """Answers still in the room's answers stream after the id ``after``, oldest first,
        each with its entry id."""
        entries = self.redis.xrange(self.keys.bids(room), f"({after}", "+")
        return [(decode(entry_id), answer_from_fields(fields)) for entry_id, fields in entries]

    def read_events(self, room: str, after: str = "0-0", count: int | None = None
                    ) -> list[Event]:
        """Events still in the room's events stream after the id ``after``, oldest first."""
        entries = self.redis.xrange(self.keys.events(room), f"({after}", "+", count=count)
        return [event_from_entry(entry_id, fields) for entry_id, fields in entries]

    def wait_events(self, room: str, after: str, block_ms: int, count: int = 1000
                    ) -> list[Event]:
        """Events after the id ``after``, waiting up to ``block_ms`` for the first."""
        reply = self.redis.xread({self.keys.events(room): after}, count=count,
                                 block=max(1, block_ms))
        return [event_from_entry(entry_id, fields)
                for _, entries in reply for entry_id, fields in entries]

    def wait_room(self, room: str, after_seq: int, after_event: str, block_ms: int
                  ) -> tuple[list[Message], list[Event]]:
        """Messages after seq ``after_seq`` and events after the id ``after_event``, waiting
        up to ``block_ms`` for the first of either. A script writes a message and its events
        at once, so a reply holds both or neither."""
        log, events = self.keys.log(room), self.keys.events(room)
        reply = self.redis.xread({log: f"{after_seq}-0", events: after_event},
                                 block=max(1, block_ms))
        found = {decode(key): entries for key, entries in reply}
        return ([message_from_fields(fields) for _, fields in found.get(log, [])],
                [event_from_entry(entry_id, fields) for entry_id, fields in found.get(events, [])])

    def state_and_last_event(self, room: str) -> tuple[RoomState, str]:
        """The room's state and the id of the last event it has written, read together
        (the scripts write both at once): the events after that id are what changes the
        state from here. ``0-0`` when there is no event."""
        pipe = self.redis.pipeline(transaction=True)
        pipe.hgetall(self.keys.state(room))
        pipe.xrevrange(self.keys.events(room), "+", "-", count=1)
        fields, last = pipe.execute()
        if not fields:
            raise RoomNotFound(f"no room {room!r}")
        return RoomState(fields), decode(last[0][0]) if last else "0-0"

    def read_turns(self, room: str, last: int | None = None) -> list[TurnRecord]:
        """Every turn record still in the turns stream (or only the ``last`` newest), oldest
        first. The newest are read from the stream's end, so a long room costs no more."""
        if last is None:
            return [record for _, record in self.read_turn_entries(room)]
        if last <= 0:
            return []
        entries = self.redis.xrevrange(self.keys.turns(room), "+", "-", count=last)
        return [turn_record_from_fields(fields) for _, fields in reversed(entries)]

    def read_turn_entries(self, room: str, after: str = "0-0") -> list[tuple[str, TurnRecord]]:
        """The turn records still in the turns stream after the id ``after``, oldest first,
        each with its entry id."""
        entries = self.redis.xrange(self.keys.turns(room), f"({after}", "+")
        return [(decode(entry_id), turn_record_from_fields(f)) for entry_id, f in entries]

    def write_answer(self, room: str, answer: Answer, maxlen: int) -> None:
        """Append a worker's answer to the room's answers (bids) stream."""
        self.write_answers(room, [answer], maxlen)

    def write_answers(self, room: str, answers: list[Answer], maxlen: int) -> int:
        """Append answers to the room's answers (bids) stream, each with its
        ``answer_arrived`` event and its tokens and cost counted in the room's totals, in one
        round trip; returns how many were written: none when the room is gone (deleted,
        archived or expired meanwhile), and none of those already written under their
        ``answer_id``."""
        args: list[Any] = [maxlen, self.events_maxlen]
        for answer in answers:
            fields, event = answer_fields(answer), answer_event_fields(answer)
            increments = usage_increments([answer])
            args += [answer.answer_id, len(fields), *_pairs(fields), len(event), *_pairs(event),
                     len(increments), *_pairs(increments)]
        return int(self.scripts.write_answers(
            keys=[self.keys.state(room), self.keys.bids(room), self.keys.events(room),
                  self.keys.answer_ids(room)],
            args=args))

    def write_chunk(self, room: str, turn: int, phase: int, agent: str, index: int,
                    text: str) -> bool:
        """Write a ``message_chunk`` event of the message ``agent`` is writing in ``turn``;
        False when it was not written (the room is gone, or the turn no longer open)."""
        return bool(self.scripts.write_chunk(
            keys=[self.keys.state(room), self.keys.events(room)],
            args=[self.events_maxlen, turn, phase, agent, index, text]))

    def journal_put(self, room: str, field: str, record: str, *, expect: str = "",
                    event: dict[str, str] | None = None, wake: str | None = None,
                    cap: int = 1000) -> tuple[bool, str]:
        """Put ``record`` at ``field`` of the room's tool journal if the field holds
        ``expect`` ("" for nothing), writing ``event`` beside it and, with ``wake`` (a tool
        call's id), waking whoever waits for that call's result. (True, record) when
        written; (False, what the field holds) when not, ("" when the room is gone)."""
        pairs = _pairs(event or {})
        written, held = self.scripts.tool_journal(
            keys=[self.keys.state(room), self.keys.tools(room), self.keys.tool_ids(room),
                  self.keys.events(room), self.keys.tool_done(room, wake or field)],
            args=[self.events_maxlen, cap, field, record, expect, 1 if wake else 0,
                  TOOL_WAKE_TTL_MS, len(pairs) // 2, *pairs])
        return int(written) == 1, decode(held)

    def journal_get(self, room: str, *fields: str) -> list[str | None]:
        """What the room's tool journal holds at ``fields`` (None where nothing)."""
        values = self.redis.hmget(self.keys.tools(room), list(fields))
        return [decode(value) if value is not None else None for value in values]

    def wait_tool_done(self, room: str, call_id: str, timeout_s: float) -> bool:
        """Block up to ``timeout_s`` for tool call ``call_id``'s wake-up; True when it came."""
        if timeout_s <= 0:
            return False
        return self.redis.blpop([self.keys.tool_done(room, call_id)], timeout=timeout_s) is not None

    def claim_acp_turn(self, room: str, agent: str, call: str, worker: str, until: float
                       ) -> bool:
        """Take ACP agent ``agent``'s call ``call`` for ``worker`` until ``until`` (epoch
        seconds); False when a worker took it already."""
        return bool(self.redis.set(self.keys.acp_turn(room, agent, call), worker, nx=True,
                                   pxat=max(int(until * 1000), int(time.time() * 1000) + 1)))

    def stream_lengths(self, room: str) -> dict[str, int]:
        """XLEN of each of the room's streams, by name (log, inbox, bids, turns,
        dead_letters, events)."""
        streams = {"log": self.keys.log(room), "inbox": self.keys.inbox(room),
                   "bids": self.keys.bids(room), "turns": self.keys.turns(room),
                   "dead_letters": self.keys.dead_letters(room),
                   "events": self.keys.events(room)}
        pipe = self.redis.pipeline(transaction=False)
        for key in streams.values():
            pipe.xlen(key)
        return dict(zip(streams, pipe.execute(), strict=True))

    def list_rooms(self, limit: int = 100) -> list[str]:
        """Room ids, most recently active first."""
        return [decode(r) for r in self.redis.zrevrange(self.keys.rooms, 0, limit - 1)]

    def summaries(self, limit: int = 100, idle_expiry_s: float = 0.0,
                  organization: str | None = None) -> list[RoomSummary]:
        """The most recently active rooms (of ``organization`` only, when given), most
        recent first; rooms that are gone (or still being imported) are left out."""
        if organization is None:
            return self._summaries(0, limit, idle_expiry_s)
        found: list[RoomSummary] = []
        for start in range(0, ORG_SCAN_MAX, ORG_SCAN_PAGE):
            page = self._summaries(start, ORG_SCAN_PAGE, idle_expiry_s)
            found += [summary for summary in page if summary.organization == organization]
            if len(found) >= limit or len(page) < ORG_SCAN_PAGE:
                break
        return found[:limit]

    def _summaries(self, start: int, count: int, idle_expiry_s: float) -> list[RoomSummary]:
        """The summaries of ``count`` rooms from ``start`` by recent activity, in two round
        trips."""
        active = self.redis.zrevrange(self.keys.rooms, start, start + count - 1,
                                      withscores=True)
        pipe = self.redis.pipeline(transaction=False)
        for member, _ in active:
            room = decode(member)
            pipe.hgetall(self.keys.state(room))
            pipe.hmget(self.keys.spec(room), "name", "policy")
            pipe.get(self.keys.lease(room))
        replies = pipe.execute()
        states = [replies[3 * index] for index in range(len(active))]
        children = self._children_of([decode(member) for member, _ in active], states)
        summaries = []
        for index, (member, score) in enumerate(active):
            state, (name, policy), lease = replies[3 * index: 3 * index + 3]
            if state and name is not None:
                summaries.append(_summary(decode(member), RoomState(state), decode(name),
                                          decode(policy or b""), score / 1000,
                                          decode(lease) if lease else None, idle_expiry_s,
                                          children.get(decode(member), ())))
        return summaries

    def _children_of(self, rooms: list[str], states: list[dict[bytes, bytes]]
                     ) -> dict[str, Any]:
        """The task rooms of those of ``rooms`` whose state counts tasks started: one more
        round trip only when a listed room has had any."""
        with_tasks = [room for room, state in zip(rooms, states, strict=True)
                      if state and state.get(b"tasks")]
        if not with_tasks:
            return {}
        pipe = self.redis.pipeline(transaction=False)
        for room in with_tasks:
            pipe.smembers(self.keys.children(room))
        return dict(zip(with_tasks, pipe.execute(), strict=True))

    def summary(self, room: str, idle_expiry_s: float = 0.0) -> RoomSummary:
        """One room's summary."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.hgetall(self.keys.state(room))
        pipe.hmget(self.keys.spec(room), "name", "policy")
        pipe.get(self.keys.lease(room))
        pipe.zscore(self.keys.rooms, room)
        pipe.smembers(self.keys.children(room))
        state, (name, policy), lease, score, children = pipe.execute()
        if not state or name is None:
            raise RoomNotFound(f"no room {room!r}")
        return _summary(room, RoomState(state), decode(name), decode(policy or b""),
                        score / 1000 if score is not None else None,
                        decode(lease) if lease else None, idle_expiry_s, children)

    def organization_of(self, room: str) -> str | None:
        """The room's organization, None when there is no such room."""
        status, organization = self.redis.hmget(self.keys.state(room), "status",
                                                "organization")
        return None if status is None else decode(organization or b"") or DEFAULT_ORGANIZATION

    def touch(self, room: str) -> None:
        """Mark the room active now (only if it is listed: a room that is gone stays gone)."""
        self.redis.zadd(self.keys.rooms, {room: now_ms()}, xx=True)

    def pause(self, room: str) -> bool:
        """Pause the room: no new turn opens and posts wait in the inbox (a turn already
        open is finished). False when it was paused already."""
        self.touch(room)
        try:
            return bool(self.scripts.pause(
                keys=[self.keys.state(room), self.keys.events(room)],
                args=[f"{time.time():.6f}", self.events_maxlen]))
        except redis.ResponseError as error:
            raise script_error(error, room) from error

    def resume(self, room: str) -> bool:
        """Resume a paused room where it was, posts included: make it due when it has a
        run in progress or posts waiting. False when it was not paused."""
        self.touch(room)
        try:
            resumed, needed = self.scripts.resume(
                keys=[self.keys.state(room), self.keys.inbox(room), self.keys.events(room)],
                args=[self.events_maxlen])
        except redis.ResponseError as error:
            raise script_error(error, room) from error
        if needed:
            self.redis.zadd(self.keys.runnable, {room: now_ms()}, lt=True)
        return bool(resumed)

    def cancel(self, room: str, detail: str = "cancelled") -> CancelResult:
        """End the room's current run now (stop_reason cancelled), abandoning a turn in
        flight whole and fencing its coordinator out. Not an error when no run is in
        progress: ``cancelled`` is False then."""
        self.touch(room)
        try:
            cancelled, run, waiting = self.scripts.cancel(
                keys=[self.keys.lease(room), self.keys.state(room), self.keys.inbox(room),
                      self.keys.events(room)],
                args=[detail, self.events_maxlen])
        except redis.ResponseError as error:
            raise script_error(error, room) from error
        if cancelled:
            # Due now: a coordinator lets the room settle (or starts the posts waiting)
            # without waiting for the removed lease's expiry.
            self.redis.zadd(self.keys.runnable, {room: now_ms()}, lt=True)
        return CancelResult(bool(cancelled), int(run), int(waiting))

    def delete(self, room: str, force: bool = False, expect: dict[str, str] | None = None,
               inbox_newest: str = "") -> int:
        """Remove every key of the room; returns how many. Refused (RoomHeld) while a
        coordinator holds it unless ``force``, which fences the holder out first; refused
        (RoomChanged) when ``expect``'s state fields or ``inbox_newest`` moved on. Its
        tasks' rooms go right after it, each in a script of its own (another Redis Cluster
        slot, maybe); one left by a client that died between is expired as an orphan."""
        organization = self.organization_of(room)  # set at create, never changed
        children = self.children(room)
        parent = self.redis.hget(self.keys.state(room), "parent")
        try:
            deleted = int(self.scripts.delete(
                keys=self.keys.room_keys(room),
                args=["1" if force else "0", "0", orjson.dumps(expect or {}), inbox_newest]))
        except redis.ResponseError as error:
            raise script_error(error, room) from error
        if not deleted:
            raise RoomNotFound(f"no room {room!r}")
        self.forget_org_room(room, organization)
        pipe = self.redis.pipeline(transaction=False)
        pipe.zrem(self.keys.rooms, room)
        pipe.zrem(self.keys.runnable, room)
        if parent is not None:  # a task's room deleted on its own leaves its parent's list
            pipe.srem(self.keys.children(decode(parent)), room)
        pipe.execute()
        for child in children:
            deleted += self.delete_child(child)
        return deleted

    def delete_child(self, room: str) -> int:
        """Remove a task's room as its parent goes (it runs no turns: nothing holds it);
        returns how many keys."""
        deleted = int(self.scripts.delete(keys=self.keys.room_keys(room),
                                          args=["1", "0", "{}", ""]))
        pipe = self.redis.pipeline(transaction=False)
        pipe.zrem(self.keys.rooms, room)
        pipe.zrem(self.keys.runnable, room)
        pipe.execute()
        return deleted

    def read_head(self, room: str) -> RoomHead:
        """The room's spec, state, inbox and dead letters at one moment (one MULTI: the
        room's keys share a slot), for an archive."""
        pipe = self.redis.pipeline(transaction=True)
        pipe.hgetall(self.keys.spec(room))
        pipe.hgetall(self.keys.state(room))
        pipe.xrange(self.keys.inbox(room))
        pipe.xrange(self.keys.dead_letters(room))
        pipe.get(self.keys.lease(room))
        spec, state, inbox, dead, lease = pipe.execute()
        if not spec or not state:
            raise RoomNotFound(f"no room {room!r}")
        return RoomHead(spec, state, inbox, dead, holder_of(decode(lease) if lease else None))

    def iter_entries(self, key: str, page: int = 1000, end: str = "+"
                     ) -> Iterator[tuple[bytes, dict[bytes, bytes]]]:
        """Every entry of a stream up to ``end``, oldest first, ``page`` at a time."""
        start = "-"
        while True:
            entries = self.redis.xrange(key, start, end, count=page)
            yield from entries
            if len(entries) < page:
                return
            start = f"({decode(entries[-1][0])}"

    def reserve(self, room: str) -> None:
        """Take a free room id for an import (none of its keys may exist)."""
        check_room_id(room)
        try:
            self.scripts.reserve(keys=self.keys.room_keys(room))
        except redis.ResponseError as error:
            if self.redis.hgetall(self.keys.state(room)) == {b"importing": b"1"}:
                raise RoomExists(f"room {room!r} is being imported, or an import of it "
                                 f"stopped halfway: parley rooms delete {room} --force "
                                 "removes what it left") from error
            raise RoomExists(f"room {room!r} already exists") from error

    def restore_entries(self, key: str, entries: list[tuple[str, dict[Any, Any]]]) -> None:
        """Append entries with their own ids to a stream of a reserved room, in one round
        trip (ids must be increasing: Redis refuses any other)."""
        pipe = self.redis.pipeline(transaction=False)
        for entry_id, fields in entries:
            pipe.xadd(key, fields, id=entry_id)
        pipe.execute()

    def finish_import(self, room: str, spec: dict[Any, Any], state: dict[Any, Any]) -> None:
        """Complete a reserved room with its spec and state (one script; its log must end
        at the state's last_seq), list it and, when it has work, make it due."""
        restored = RoomState(state)
        # An imported room is live again and counts, but is not refused: its place was
        # given back when it was archived, and an import half done would be left behind.
        claimed = self.claim_org_room(restored.organization, room, None)
        try:
            self._create(room, "import", spec, state)
        except BaseException:
            if claimed:
                self.redis.srem(self.keys.org_rooms(restored.organization), room)
            raise
        pipe = self.redis.pipeline(transaction=False)
        pipe.zadd(self.keys.rooms, {room: now_ms()})
        if not restored.paused and (restored.status is RoomStatus.RUNNING
                                    or restored.turn_open or self.redis.xlen(self.keys.inbox(room))):
            pipe.zadd(self.keys.runnable, {room: now_ms()})
        pipe.execute()

    def coordinators(self) -> list[tuple[str, float]]:
        """Coordinator ids with the age of their last heartbeat in seconds."""
        now = now_ms()
        beats = self.redis.zrange(self.keys.coordinators, 0, -1, withscores=True)
        return [(decode(member), (now - score) / 1000) for member, score in beats]

    def scans_failing(self, coordinators: list[str]) -> dict[str, str]:
        """Why each of these coordinators' scans keep failing, for those whose do."""
        if not coordinators:
            return {}
        why = self.redis.mget([self.keys.scans_failing(c) for c in coordinators])
        return {c: decode(reason) for c, reason in zip(coordinators, why, strict=True) if reason}

    def lease_holder(self, room: str) -> str | None:
        """``<coordinator id>:<epoch>`` of the room's lease, or None."""
        token = self.redis.get(self.keys.lease(room))
        return decode(token) if token is not None else None


def check_poster(room: str, sender: str, agents: list[str], people: list[str] | None) -> None:
    """Raise ValueError unless ``sender`` may post into the room: not under the name of one
    of its ``agents`` nor one a reader could take for it (``same_name``), and one of its ``people`` when it
    keeps a roster of them (None when it does not)."""
    agent = next((name for name in agents if same_name(name, sender)), None)
    if agent is not None:
        taken = ("is an agent" if name_key(agent) == name_key(sender)
                 else f"reads as the agent {agent!r}")
        raise ValueError(f"{sender!r} {taken} in room {room}: people post under their "
                         "own names")
    if people is not None and name_key(sender) not in {name_key(name) for name in people}:
        raise ValueError(f"{sender!r} is not one of room {room}'s people "
                         f"({', '.join(people) or 'none'}): post as one of them")


def _pairs(fields: dict[Any, Any]) -> list[Any]:
    """A mapping as a flat field, value, field, value ... list (a script's ARGV)."""
    return [item for pair in fields.items() for item in pair]


def _summary(room: str, state: RoomState, name: str, policy: str, last_activity: float | None,
             lease: str | None, idle_expiry_s: float, children: Any = ()) -> RoomSummary:
    expires_at = None
    parent = state.raw.get("parent") or None
    # A task's room expires with its parent, not on its own.
    if (idle_expiry_s and last_activity is not None and lease is None and parent is None
            and state.status is not RoomStatus.RUNNING and not state.turn_open):
        expires_at = last_activity + idle_expiry_s
    return RoomSummary(
        room=room, name=name, policy=policy, organization=state.organization,
        status=state.status, paused=state.paused,
        run=state.run, messages=state.last_seq, stop_reason=state.stop_reason,
        cost_usd=float(state.raw.get("cost_usd") or 0), last_activity=last_activity,
        holder=holder_of(lease), expires_at=expires_at, parent=parent,
        children=sorted(decode(child) for child in children))
