"""How much Redis memory a message and a turn cost in a room's streams, to size their caps.

    .venv/bin/python -m benchmarks.stream_sizes --agents 4,16 --chars 200,600,1500

Writes log entries, turn records, bids and events exactly as the coordinator and the
workers encode them (``agent_message_fields``, ``turn_record_fields``, ``answer_fields``,
``answer_event_fields`` and the scripts' event fields) into the Redis at
``PARLEY_REDIS_URL`` under a private prefix, reads ``MEMORY USAGE`` of each stream and
prints bytes per entry. In a bid room every agent drafts its message with its bid, so a
turn record holds N messages; the message length is the knob (600 characters is about 100
words). Events hold no message, only a run's end its answer.
"""

from __future__ import annotations

import argparse
import uuid

import redis

from parley.shared.events import answer_event_fields
from parley.shared.keys import Keys
from parley.shared.models import Answer, RoomSpec, TurnRecord
from parley.shared.records import agent_message_fields, answer_fields, turn_record_fields
from parley.shared.settings import Settings
from parley.shared.store import RoomStore

ENTRIES = 500


def sample_bid(agent: int, turn: int, chars: int) -> Answer:
    """A bid with realistic token counts, cost and latency and a ``chars``-long message."""
    words = f"agent{agent} says something about turn {turn} and the plan ahead. "
    message = (words * (chars // len(words) + 1))[:chars]
    return Answer(agent=f"agent{agent}", turn=turn, score=0.123456789 + agent / 100,
               message=message, attempt=1, prompt_tokens=1834, completion_tokens=142,
               cost_usd=0.000412345, latency_ms=873.456789)


def sample_record(agents: int, turn: int, chars: int) -> TurnRecord:
    """A decided turn of an ``agents``-agent room."""
    bids = [sample_bid(i, turn, chars) for i in range(agents)]
    return TurnRecord(
        turn=turn, run=1, run_turns=turn, epoch=3, snapshot_seq=turn, messages_in_run=turn,
        recent=["agent1"], bids=bids, adjusted={b.agent: b.score for b in bids},
        winner="agent1", score=0.9, opened_at=1764500000.123456, deadline=1764500030.123456,
        decided_at=1764500000.987654,
    )


def bytes_per_entry(client: redis.Redis, key: str) -> float:
    """MEMORY USAGE of the whole stream over its entries."""
    usage = int(client.memory_usage(key, samples=0) or 0)
    return usage / int(client.xlen(key))


def measure(client: redis.Redis, keys: Keys, agents: int, chars: int) -> dict[str, float]:
    """Bytes per turn record, per bid and per turn of bids, for one room shape."""
    room = f"size-{agents}-{chars}"
    pipe = client.pipeline(transaction=False)
    for turn in range(1, ENTRIES + 1):
        record = sample_record(agents, turn, chars)
        pipe.xadd(keys.turns(room), {"seq": str(turn), **turn_record_fields(record)})
        for bid in record.bids:
            pipe.xadd(keys.bids(room), answer_fields(bid))
    pipe.execute()
    per_bid = bytes_per_entry(client, keys.bids(room))
    return {"agents": agents, "chars": chars,
            "turn_record_bytes": round(bytes_per_entry(client, keys.turns(room))),
            "bid_bytes": round(per_bid), "bids_per_turn_bytes": round(per_bid * agents)}


def measure_log(client: redis.Redis, keys: Keys, chars: int) -> dict[str, int]:
    """Bytes per log entry: an agent's message of ``chars`` characters as commit.lua writes
    it (seq, sender, content, score, turn, run, epoch, ts), id ``<seq>-0``."""
    room = f"size-log-{chars}"
    words = "the agents weigh the launch against what fails first and what it costs. "
    content = (words * (chars // len(words) + 1))[:chars]
    pipe = client.pipeline(transaction=False)
    for seq in range(1, ENTRIES + 1):
        fields = agent_message_fields(f"agent{seq % 4}", content, 0.8123456789, seq, 1, 3,
                                      1764500000.123456 + seq)
        pipe.xadd(keys.log(room), {"seq": str(seq), **fields}, id=f"{seq}-0")
    pipe.execute()
    return {"chars": chars, "log_entry_bytes": round(bytes_per_entry(client, keys.log(room)))}


def measure_room(client: redis.Redis, keys: Keys, agents: int) -> dict[str, int]:
    """Bytes of a room's spec and state hashes once its agents have spoken: the spec of
    ``examples/rooms/demo.yaml``'s shape, and the state with every agent's totals."""
    room = f"size-room-{agents}"
    spec = RoomSpec.model_validate({
        "name": "launch-panel", "policy": {"kind": "bid"},
        "agents": [{"name": f"Agent{i}", "role": "argues one side of the launch",
                    "system_prompt": "You are a thoughtful panelist. " * 4,
                    "model": "openai/gpt-4o-mini"} for i in range(agents)]})
    RoomStore(client, keys).create_room(room, spec)
    totals = {f"agent:Agent{i}:{name}": "1234.5" for i in range(agents)
              for name in ("calls", "prompt_tokens", "completion_tokens", "cost_usd")}
    client.hset(keys.state(room), mapping={
        "status": "idle", "run": 3, "last_seq": 120, "messages_in_run": 12, "turn": 130,
        "run_turns": 12, "recent": '["Agent1"]', "stop_reason": "lull", "stop_detail": "",
        "answer": "x" * 600, "inbox_last_id": "1764500000123-0", "prompt_tokens": 123456,
        "completion_tokens": 23456, "cost_usd": "0.123456", **totals})
    usage = [int(client.memory_usage(key, samples=0) or 0) for key in
             (keys.spec(room), keys.state(room))]
    return {"agents": agents, "spec_bytes": usage[0], "state_bytes": usage[1]}


def worst_dead_letter(settings: Settings) -> dict[str, str]:
    """The biggest dead letter drain.lua writes: 16 fields, names and values at the cut."""
    cut = settings.dead_letter_value_max_bytes
    fields = {f"{i:02}".ljust(cut, "n"): "v" * cut for i in range(16)}
    return {**fields, "inbox_id": "1764500000123-0",
            "reason": f"content is too long (9999999 bytes, most {settings.message_max_bytes}); "
                      f"values cut to {cut} bytes; 20 fields dropped"}


def measure_dead_letters(client: redis.Redis, keys: Keys, settings: Settings) -> dict[str, int]:
    """Bytes per dead letter at its largest."""
    pipe = client.pipeline(transaction=False)
    for _ in range(ENTRIES):
        pipe.xadd(keys.dead_letters("size-dead"), worst_dead_letter(settings))
    pipe.execute()
    return {"worst_dead_letter_bytes": round(bytes_per_entry(client, keys.dead_letters("size-dead")))}


def turn_events(agents: int, turn: int, chars: int) -> list[dict[str, str]]:
    """The events one decided turn of an ``agents``-agent room writes, as the scripts and
    the workers write them; every tenth turn ends its run with a ``chars``-long answer."""
    ts = f"{1764500000.123456 + turn:.6f}"
    events = [{"type": "turn_opened", "turn": str(turn), "run": "1", "phase": "0",
               "deadline": f"{1764500030.123456 + turn:.6f}", "ts": ts}]
    events += [{"type": "answer_arrived", **answer_event_fields(sample_bid(i, turn, 0)),
                "ts": ts} for i in range(agents)]
    events += [{"type": "message_committed", "seq": str(turn + 1), "sender": "agent1",
                "run": "1", "turn": str(turn), "ts": ts},
               {"type": "turn_decided", "turn": str(turn), "run": "1", "winner": "agent1",
                "score": "0.9", "ts": ts}]
    if turn % 10 == 0:
        events.append({"type": "run_ended", "run": "1", "status": "idle",
                       "stop_reason": "max_messages", "stop_detail": "",
                       "answer": "a" * chars, "ts": ts})
    return events


def measure_events(client: redis.Redis, keys: Keys, agents: int, chars: int) -> dict[str, float]:
    """Bytes per event in the mix a busy room writes (answers make most of it)."""
    room = f"size-events-{agents}-{chars}"
    pipe = client.pipeline(transaction=False)
    for turn in range(1, ENTRIES + 1):
        for event in turn_events(agents, turn, chars):
            pipe.xadd(keys.events(room), event)
    pipe.execute()
    return {"event_bytes": round(bytes_per_entry(client, keys.events(room)))}


def room_total(rows: list[dict[str, float]], dead: dict[str, int], settings: Settings) -> None:
    """What the capped streams of one room hold at most, per room shape, at these caps."""
    dead_mb = dead["worst_dead_letter_bytes"] * settings.dead_letter_stream_maxlen / 1e6
    for row in rows:
        turns_mb = row["turn_record_bytes"] * settings.turns_stream_maxlen / 1e6
        bids_mb = row["bid_bytes"] * settings.bids_stream_maxlen / 1e6
        events_mb = row["event_bytes"] * settings.events_stream_maxlen / 1e6
        print(f"agents={row['agents']} chars={row['chars']}: turns {turns_mb:.1f} MB + bids "
              f"{bids_mb:.1f} MB + events {events_mb:.1f} MB + dead letters at most "
              f"{dead_mb:.1f} MB = {turns_mb + bids_mb + events_mb + dead_mb:.1f} MB",
              flush=True)


def main() -> None:
    """Print one line per room shape."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", default="4,16")
    parser.add_argument("--chars", default="200,600,1500")
    args = parser.parse_args()
    settings = Settings()
    client = redis.Redis.from_url(settings.redis_url)
    keys = Keys(f"parley-size-{uuid.uuid4().hex[:8]}")
    rows = []
    try:
        for chars in sorted({100, *map(int, args.chars.split(",")), 4000}):
            row = measure_log(client, keys, chars)
            print(f"log entry: chars={row['chars']} bytes={row['log_entry_bytes']} "
                  f"(overhead {row['log_entry_bytes'] - row['chars']})", flush=True)
        for agents in map(int, args.agents.split(",")):
            row = measure_room(client, keys, agents)
            print(f"room: agents={agents} spec={row['spec_bytes']} bytes "
                  f"state={row['state_bytes']} bytes", flush=True)
        for agents in map(int, args.agents.split(",")):
            for chars in map(int, args.chars.split(",")):
                rows.append({**measure(client, keys, agents, chars),
                             **measure_events(client, keys, agents, chars)})
                print("  ".join(f"{name}={value}" for name, value in rows[-1].items()),
                      flush=True)
        dead = measure_dead_letters(client, keys, settings)
        print(f"worst_dead_letter_bytes={dead['worst_dead_letter_bytes']}")
        print(f"at caps turns={settings.turns_stream_maxlen} bids={settings.bids_stream_maxlen} "
              f"events={settings.events_stream_maxlen} "
              f"dead_letters={settings.dead_letter_stream_maxlen}:")
        room_total(rows, dead, settings)
    finally:
        for key in client.scan_iter(match=f"{keys.prefix}:*"):
            client.delete(key)


if __name__ == "__main__":
    main()
