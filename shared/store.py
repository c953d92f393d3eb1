"""Synchronous access to rooms, for clients and workers (the coordinator has its own, async).

Posting a message is ``XADD inbox`` and then ``ZADD runnable``, in that order: a coordinator
going idle removes the room from ``runnable`` before its last look at the inbox, so a post
that races with it always leaves the room runnable (no lost wake-up).
"""

from __future__ import annotations

import time
from typing import Any

import orjson
import redis

from shared.events import Event, answer_event_fields, event_from_entry
from shared.keys import Keys, check_room_id
from shared.models import Bid, Message, RoomSpec, TurnRecord, check_person_name, name_key
from shared.records import (
    RoomState,
    bid_fields,
    bid_from_fields,
    check_post,
    decode,
    message_from_fields,
    turn_record_from_fields,
)
from shared.settings import Settings


class RoomNotFound(LookupError):
    """The room id names no room."""


class RoomExists(ValueError):
    """A room with that id already exists."""


def now_ms() -> int:
    """Wall-clock milliseconds, the unit of the scheduling sorted sets."""
    return int(time.time() * 1000)


class RoomStore:
    """Rooms in one Redis under one key prefix."""

    def __init__(self, client: redis.Redis, keys: Keys,
                 message_max_bytes: int = Settings.model_fields["message_max_bytes"].default,
                 events_maxlen: int = Settings.model_fields["events_stream_maxlen"].default
                 ) -> None:
        # redis-py types every reply as a union of what any client could return; this one
        # returns bytes, and the record functions below decode them.
        self.redis: Any = client
        self.keys = keys
        self.message_max_bytes = message_max_bytes
        self.events_maxlen = events_maxlen

    def create_room(self, room: str, spec: RoomSpec) -> None:
        """Store a new room's spec and idle state; raise RoomExists if the id is taken."""
        check_room_id(room)
        if not self.redis.hsetnx(self.keys.state(room), "status", "idle"):
            raise RoomExists(f"room {room!r} already exists")
        spec_json = spec.model_dump_json(exclude_defaults=False)
        pipe = self.redis.pipeline(transaction=False)
        pipe.hset(
            self.keys.spec(room),
            mapping={"version": 1, "name": spec.name, "policy": spec.policy.kind, "json": spec_json},
        )
        pipe.hset(self.keys.state(room), mapping={"last_seq": 0, "epoch": 0, "spec_version": 1})
        pipe.zadd(self.keys.rooms, {room: now_ms()})
        pipe.execute()

    def post(self, room: str, sender: str, content: str) -> str:
        """Queue a message from a person or app into the room; return its inbox id.

        People post under their own names: never an agent's of this room (whatever the
        case or spacing) nor the reserved sender, so no post passes for an agent's words.
        A post also gives a room that failed on its errors (room_error) its tries again."""
        check_person_name(sender)
        check_post(sender, content, self.message_max_bytes)
        if name_key(sender) in {name_key(name) for name in self.agent_names(room)}:
            raise ValueError(f"{sender!r} is an agent in room {room}: people post under "
                             "their own names")
        pipe = self.redis.pipeline(transaction=False)
        pipe.xadd(self.keys.inbox(room), {"sender": sender, "content": content,
                                           "ts": f"{time.time():.6f}"})
        pipe.hset(self.keys.state(room), "failed_takes", 0)
        pipe.zadd(self.keys.runnable, {room: now_ms()}, lt=True)
        pipe.zadd(self.keys.rooms, {room: now_ms()})
        inbox_id, *_ = pipe.execute()
        return inbox_id.decode() if isinstance(inbox_id, bytes) else inbox_id

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
        """The room's spec and its version."""
        version, spec_json = self.redis.hmget(self.keys.spec(room), "version", "json")
        if spec_json is None:
            raise RoomNotFound(f"no room {room!r}")
        return int(version), RoomSpec.model_validate_json(spec_json)

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

    def read_answers(self, room: str, after: str = "0-0") -> list[tuple[str, Bid]]:
        """Answers still in the room's answers stream after the id ``after``, oldest first,
        each with its entry id."""
        entries = self.redis.xrange(self.keys.bids(room), f"({after}", "+")
        return [(decode(entry_id), bid_from_fields(fields)) for entry_id, fields in entries]

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

    def read_turns(self, room: str) -> list[TurnRecord]:
        """Every turn record still in the turns stream, oldest first."""
        return [turn_record_from_fields(f) for _, f in self.redis.xrange(self.keys.turns(room))]

    def write_bid(self, room: str, bid: Bid, maxlen: int) -> None:
        """Append a worker's bid to the room's bids stream."""
        self.write_bids(room, [bid], maxlen)

    def write_bids(self, room: str, bids: list[Bid], maxlen: int) -> None:
        """Append bids to the room's bids stream, each with its ``answer_arrived`` event,
        in one round trip."""
        pipe = self.redis.pipeline(transaction=False)
        for bid in bids:
            pipe.xadd(self.keys.bids(room), bid_fields(bid), maxlen=maxlen, approximate=True)
            pipe.xadd(self.keys.events(room), answer_event_fields(bid),
                      maxlen=self.events_maxlen, approximate=True)
        pipe.execute()

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

    def coordinators(self) -> list[tuple[str, float]]:
        """Coordinator ids with the age of their last heartbeat in seconds."""
        now = now_ms()
        beats = self.redis.zrange(self.keys.coordinators, 0, -1, withscores=True)
        return [(decode(member), (now - score) / 1000) for member, score in beats]

    def lease_holder(self, room: str) -> str | None:
        """``<coordinator id>:<epoch>`` of the room's lease, or None."""
        token = self.redis.get(self.keys.lease(room))
        return decode(token) if token is not None else None
