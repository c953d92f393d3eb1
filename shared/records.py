"""Flat Redis field encodings of messages, answers, state and turn records, both ways.

Dashboards read these fields directly, so each value is a plain string: numbers as
decimals, absent values as absent fields, lists as JSON.
"""

from __future__ import annotations

import codecs
from typing import Any

import orjson

from parley.shared.models import (
    DEFAULT_ORGANIZATION,
    Answer,
    FloorChange,
    Message,
    RoomStatus,
    StopReason,
    ToolCallRecord,
    TurnRecord,
    Usage,
)

# A person's or app's name in the log; drain.lua sets longer ones aside.
SENDER_MAX_BYTES = 128
# Every count and total of a room's state (epoch, last_seq, run, turn, run_turns,
# messages_in_run, failed_takes, tokens, cost) stays below this. The scripts refuse with
# OVERFLOW to move one to it (shared/lua/lib/checks.lua says why it is 10^14), and an import
# refuses a state holding one already there.
COUNT_LIMIT = 10**14
# A log entry's tool calls (its ``tools`` field) are kept within this many bytes, so that a
# message that used many tools stays a bounded entry: past it a call keeps what it was
# (tool, status, duration, who approved it) but not its arguments nor its result, and
# past that the calls are left out (the turn record holds every one).
TOOLS_FIELD_MAX_BYTES = 65_536
# What a result cut to its cap ends with, and what stands for one left out.
CUT_MARK = " […cut]"
LEFT_OUT = "[left out: the message's tool calls passed their cap]"


def decode(value: bytes | str) -> str:
    """A Redis reply value as str."""
    return value.decode() if isinstance(value, bytes) else value


def decode_fields(fields: dict[Any, Any]) -> dict[str, str]:
    """A Redis reply's field map with str keys and values."""
    return {decode(k): decode(v) for k, v in fields.items()}


def message_from_fields(fields: dict[Any, Any]) -> Message:
    """A log entry as a Message."""
    f = decode_fields(fields)
    return Message(
        seq=int(f["seq"]),
        sender=f["sender"],
        content=f["content"],
        score=float(f["score"]) if f.get("score") else None,
        turn=int(f["turn"]) if f.get("turn") else None,
        run=int(f.get("run") or 0),
        ts=float(f.get("ts") or 0),
        addressed=orjson.loads(f["addressed"]) if f.get("addressed") else None,
        task_id=f.get("task_id") or None,
        worker=f.get("worker") or None,
        **logged_tool_calls(f),
    )


def logged_tool_calls(fields: dict[str, str]) -> dict[str, Any]:
    """A log entry's tool calls and who reads their results, as Message fields (validated
    by the model); none for a message that used no tool."""
    if not fields.get("tools"):
        return {}
    return {"tool_calls": orjson.loads(fields["tools"]),
            "tool_results": fields.get("tool_results") or None}


def agent_message_fields(
    sender: str, content: str, score: float | None, turn: int, run: int, epoch: int, ts: float
) -> dict[str, str]:
    """Log fields of an agent's message (the commit script adds the seq). Only a bid has a
    score: a message without one has no score field, and reads back with ``score=None``."""
    fields = {
        "sender": sender,
        "content": content,
        "turn": str(turn),
        "run": str(run),
        "epoch": str(epoch),
        "ts": f"{ts:.6f}",
    }
    if score is not None:
        fields["score"] = repr(score)
    return fields


def tool_calls_fields(calls: list[ToolCallRecord], shared: bool, result_max_bytes: int,
                      most: int = TOOLS_FIELD_MAX_BYTES) -> dict[str, str]:
    """Log fields of the tool calls a message was written from: ``tools`` (JSON, each
    result cut to ``result_max_bytes``, the whole within about ``most`` bytes) and
    ``tool_results`` (shared or private: who reads the results in prompts); none for a
    message that used no tool."""
    if not calls:
        return {}
    kept, used = [], 0
    for call in calls:
        entry = call.model_copy(update={"result": cut_bytes(call.result, result_max_bytes)})
        size = len(orjson.dumps(entry.model_dump(mode="json")))
        if used + size > most:
            entry = entry.model_copy(update={"arguments": {}, "result": LEFT_OUT})
            size = len(orjson.dumps(entry.model_dump(mode="json")))
            if used + size > most:
                break  # the turn record keeps them all
        used += size
        kept.append(entry.model_dump(mode="json", exclude_defaults=True))
    return {"tools": orjson.dumps(kept).decode(),
            "tool_results": "shared" if shared else "private"}


# Text a model, a tool or an external agent wrote may hold lone surrogates (a JSON
# "\ud83d" escape without its other half decodes to one), which UTF-8 cannot encode:
# encoded with these errors each becomes U+FFFD, where a strict encoding would fail the
# write (and with it every other answer of the same message). The workers' Redis client
# encodes with them too.
REPLACE_SURROGATES = "parley.replace_surrogates"


def _replaced(error: UnicodeError) -> tuple[bytes, int]:
    if not isinstance(error, UnicodeEncodeError):
        raise error
    # Bytes: the UTF-8 encoder takes a text replacement in ASCII only.
    return "\ufffd".encode() * (error.end - error.start), error.end


codecs.register_error(REPLACE_SURROGATES, _replaced)


def cap_bytes(text: str, max_bytes: int) -> str:
    """``text`` as UTF-8 can hold it, cut to at most ``max_bytes`` of it (never inside a
    character)."""
    data = text.encode("utf-8", REPLACE_SURROGATES)
    if len(data) <= max_bytes and len(data) == len(text):  # ASCII: as it was
        return text
    return data[:max_bytes].decode(errors="ignore")


def cut_bytes(text: str, most: int) -> str:
    """``text`` as UTF-8 can hold it, within ``most`` bytes of it, marked where it was
    cut."""
    if len(text.encode("utf-8", REPLACE_SURROGATES)) <= most:
        return cap_bytes(text, most)
    return cap_bytes(text, max(0, most - len(CUT_MARK.encode()))) + CUT_MARK


def check_post(sender: str, content: str, max_bytes: int) -> None:
    """Raise ValueError, naming the problem, unless drain.lua would accept this post."""
    if not sender.strip():
        raise ValueError("a message needs a sender")
    if len(sender.encode()) > SENDER_MAX_BYTES:
        raise ValueError(f"the sender's name is longer than {SENDER_MAX_BYTES} bytes")
    if any(ord(char) < 32 or ord(char) == 127 for char in sender):
        raise ValueError(f"the sender {sender!r} has control characters (a newline?)")
    if not content.strip():
        raise ValueError("a message needs some content")
    size = len(content.encode())
    if size > max_bytes:
        raise ValueError(f"the message is {size} bytes; the most is {max_bytes} "
                         "(PARLEY_MESSAGE_MAX_BYTES)")


# Fields only some answers carry (some failures, calls that used tools): written only when
# set, so an answer costs no more; an answer written before they existed reads the same.
ONLY_WHEN_SET = frozenset({"error_variable", "tool_calls", "policy_call"})
# An answer's fields that are lists or objects, kept as JSON.
JSON_ANSWER_FIELDS = frozenset({"tool_calls", "policy_call"})


def answer_fields(answer: Answer) -> dict[str, str]:
    """A call's answer as answers (bids) stream fields."""
    data = answer.model_dump(mode="json")
    fields = {name: _plain(getattr(answer, name)) for name, value in data.items()
              if (value or name not in ONLY_WHEN_SET) and name not in JSON_ANSWER_FIELDS}
    fields.update({name: orjson.dumps(data[name]).decode() for name in JSON_ANSWER_FIELDS
                   if data[name]})
    return fields


def answer_from_fields(fields: dict[Any, Any]) -> Answer:
    """An answers (bids) stream entry as an Answer."""
    data: dict[str, Any] = decode_fields(fields)
    for name in JSON_ANSWER_FIELDS & data.keys():
        data[name] = orjson.loads(data[name])
    return Answer.model_validate(data)


def _plain(value: Any) -> str:
    if isinstance(value, float):
        return repr(value)
    return str(value)


# State fields a floor policy keeps for itself (per run) carry this prefix.
POLICY_FIELD_PREFIX = "policy:"
# State fields a floor policy keeps for the room's whole life (a new run keeps them).
FLOOR_FIELD_PREFIX = "floor:"
# Each agent's running totals are the state fields ``agent:<agent>:<total>``.
AGENT_FIELD_PREFIX = "agent:"
# The token and cost totals kept for the room (plain names), for its current run
# (``run_<total>``, reset when a run starts) and for each agent.
USAGE_TOTALS = ("prompt_tokens", "completion_tokens", "cost_usd")
# The part of prompt_tokens providers read from their prompt caches (billed at a discount):
# kept the same way, its fields absent (0) until a provider reports some.
CACHED_TOKENS = "cached_tokens"
CALL_TOTALS = (*USAGE_TOTALS, CACHED_TOKENS)
RUN_TOTAL_PREFIX = "run_"


def agent_total_field(agent: str, total: str) -> str:
    """The state field of ``agent``'s running total of ``total``."""
    return f"{AGENT_FIELD_PREFIX}{agent}:{total}"


def run_total_field(total: str) -> str:
    """The state field of the current run's running total of ``total``."""
    return f"{RUN_TOTAL_PREFIX}{total}"


# Every room and run total, as a new room starts them: readable before any call.
ZERO_TOTALS = {field: "0" for total in USAGE_TOTALS for field in (total, run_total_field(total))}


def usage_increments(bids: list[Answer]) -> dict[str, str]:
    """What the answers add to the room's, the run's and each agent's running totals of
    tokens and cost (write_answers.lua adds them as the answers land)."""
    increments: dict[str, float] = {}
    for bid in bids:
        for total in CALL_TOTALS:
            amount = float(getattr(bid, total))
            if amount:
                for field in (total, run_total_field(total), agent_total_field(bid.agent, total)):
                    increments[field] = increments.get(field, 0) + amount
    return {field: repr(amount) for field, amount in increments.items()}


def call_counts(bids: list[Answer]) -> dict[str, str]:
    """What a committed turn's answers add to each agent's count of calls (its next call's
    number: a scripted agent's next entry)."""
    counts: dict[str, int] = {}
    for bid in bids:
        field = agent_total_field(bid.agent, "calls")
        counts[field] = counts.get(field, 0) + 1
    return {field: str(count) for field, count in counts.items()}


def usage_from(fields: dict[str, str], prefix: str = "") -> Usage:
    """The totals stored under ``prefix`` (``""`` the room's, ``run_`` the run's); a
    missing field is 0."""
    return Usage(prompt_tokens=int(float(fields.get(f"{prefix}prompt_tokens") or 0)),
                 completion_tokens=int(float(fields.get(f"{prefix}completion_tokens") or 0)),
                 cost_usd=float(fields.get(f"{prefix}cost_usd") or 0),
                 cached_tokens=int(float(fields.get(f"{prefix}cached_tokens") or 0)))


class RoomState:
    """A room's state hash, typed. Missing fields read as their starting values."""

    def __init__(self, fields: dict[Any, Any]) -> None:
        f = decode_fields(fields)
        self.raw = f
        self.status = RoomStatus(f.get("status") or RoomStatus.IDLE)
        self.last_seq = int(f.get("last_seq") or 0)
        self.run = int(f.get("run") or 0)
        self.messages_in_run = int(f.get("messages_in_run") or 0)
        self.recent: list[str] = orjson.loads(f.get("recent") or "[]")
        self.turn = int(f.get("turn") or 0)
        self.run_turns = int(f.get("run_turns") or 0)
        self.turn_open = f.get("turn_open") == "1"
        self.turn_deadline = float(f.get("turn_deadline") or 0)
        self.turn_opened_at = float(f.get("turn_opened_at") or 0)
        self.turn_snapshot_seq = int(f.get("turn_snapshot_seq") or 0)
        self.turn_bids_from = f.get("turn_bids_from") or "0-0"
        self.epoch = int(f.get("epoch") or 0)
        self.stop_reason = StopReason(f["stop_reason"]) if f.get("stop_reason") else None
        self.stop_detail = f.get("stop_detail") or ""
        self.inbox_last_id = f.get("inbox_last_id") or "0-0"
        self.spec_version = int(f.get("spec_version") or 0)
        self.answer = f.get("answer") or None
        self.policy_state = {name[len(POLICY_FIELD_PREFIX):]: value for name, value in f.items()
                             if name.startswith(POLICY_FIELD_PREFIX)}
        self.floor_state = {name[len(FLOOR_FIELD_PREFIX):]: value for name, value in f.items()
                            if name.startswith(FLOOR_FIELD_PREFIX)}
        # What every call so far cost: over the room's life, and in its current run.
        self.usage = usage_from(f)
        self.run_usage = usage_from(f, RUN_TOTAL_PREFIX)
        # Takes that failed in a row, the last one's error, and (once the room failed) the
        # newest inbox id then: posts up to it were waiting when the room failed.
        self.failed_takes = int(f.get("failed_takes") or 0)
        self.last_error = f.get("last_error") or ""
        self.failed_inbox_id = f.get("failed_inbox_id") or "0-0"
        # A paused room opens no turn and moves no post to its log; its run keeps its status.
        self.paused = f.get("paused") == "1"
        self.paused_at = float(f.get("paused_at") or 0)
        # The run's trace: the post that started it (its traceparent) and the run's own
        # invoke_workflow span, which every coordinator holding the room continues.
        self.run_traceparent = f.get("run_traceparent") or ""
        self.trace = f.get("trace") or ""
        # Set at create, never changed; rooms of before organizations are the default's.
        self.organization = f.get("organization") or DEFAULT_ORGANIZATION
        # Background tasks ever started (task_start.lua): none, and there are none to read.
        self.tasks_started = int(f.get("tasks") or 0)

    def agent_totals(self, name: str) -> dict[str, float]:
        """Each agent's running total of ``name`` (``agent:<agent>:<name>`` fields)."""
        prefix, suffix = AGENT_FIELD_PREFIX, f":{name}"
        return {field[len(prefix):-len(suffix)]: float(value) for field, value in self.raw.items()
                if field.startswith(prefix) and field.endswith(suffix)}

    def totals(self) -> dict[str, float]:
        """Token and cost totals, for the room (plain names, 0 before any call) and per
        agent (``agent:..``)."""
        return {**dict.fromkeys(USAGE_TOTALS, 0.0),
                **{k: float(v) for k, v in self.raw.items() if k.rsplit(":", 1)[-1] in CALL_TOTALS}}


def turn_record_fields(record: TurnRecord) -> dict[str, str]:
    """A turn record as flat turns-stream fields (the bids as one JSON list; recent,
    policy_state, adjusted and cuts as JSON too)."""
    data = record.model_dump(mode="json",
                             exclude={"bids", "late", "recent", "adjusted", "cuts",
                                      "policy_state", "floor_state", "unread", "ops",
                                      "addressed"})
    fields = {name: "" if value is None else _plain(value) for name, value in data.items()}
    fields["recent"] = orjson.dumps(record.recent).decode()
    fields["policy_state"] = orjson.dumps(record.policy_state).decode()
    if record.floor_state or record.unread or record.ops:  # a mention room's only
        fields["floor_state"] = orjson.dumps(record.floor_state).decode()
        fields["unread"] = orjson.dumps([m.model_dump() for m in record.unread]).decode()
        fields["ops"] = orjson.dumps([op.model_dump() for op in record.ops]).decode()
        fields["addressed"] = orjson.dumps(record.addressed).decode()
    fields["adjusted"] = orjson.dumps(record.adjusted).decode()
    fields["cuts"] = orjson.dumps(record.cuts).decode()
    # Fields at their defaults are left out of each answer: a turn record is kept per turn.
    fields["bids"] = answers_json(record.bids)
    fields["late"] = answers_json(record.late)
    return fields


def answers_json(answers: list[Answer]) -> str:
    """Answers as a turn record's JSON list, each without its fields at their defaults."""
    return orjson.dumps([answer.model_dump(mode="json", exclude_defaults=True)
                         for answer in answers]).decode()


def turn_record_from_fields(fields: dict[Any, Any]) -> TurnRecord:
    """A turns-stream entry as a TurnRecord."""
    f = decode_fields(fields)
    f.pop("seq", None)
    data: dict[str, Any] = {k: v for k, v in f.items() if v != ""}
    data["recent"] = orjson.loads(f["recent"])
    data["adjusted"] = orjson.loads(f["adjusted"])
    data["cuts"] = orjson.loads(f.get("cuts") or "{}")  # absent from older records
    data["policy_state"] = orjson.loads(f.get("policy_state") or "{}")
    data["floor_state"] = orjson.loads(f.get("floor_state") or "{}")
    data["unread"] = orjson.loads(f.get("unread") or "[]")
    data["ops"] = orjson.loads(f.get("ops") or "[]")
    data["addressed"] = orjson.loads(f.get("addressed") or "{}")
    data["bids"] = orjson.loads(f["bids"])
    data["late"] = orjson.loads(f.get("late") or "[]")  # absent from older records
    return TurnRecord.model_validate(data)


def floor_change_from_entry(entry_id: bytes | str, fields: dict[Any, Any]) -> FloorChange:
    """A floor_ops stream entry as a FloorChange."""
    f = decode_fields(fields)
    return FloorChange(id=decode(entry_id), op=f.get("op", ""), agent=f.get("agent", ""),
                       text=f.get("text", ""))
