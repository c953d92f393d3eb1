"""A room as a file of JSON lines, and back: ``parley rooms archive`` and ``rooms import``.

One JSON object per line, in this order::

    {"kind": "room", "format": 1, "room": "<id>", "archived_at": <unix s>}
    {"kind": "spec", "fields": {...}}            the spec hash (version, name, policy, json)
    {"kind": "state", "fields": {...}}           the state hash, every field
    {"kind": "log", "id": "1-0", "fields": {...}}    each message, oldest first
    {"kind": "turn", "id": "...", "fields": {...}}   each turn record still kept
    {"kind": "inbox", "id": "...", "fields": {...}}  each post not yet in the log
    {"kind": "dead", "id": "...", "fields": {...}}   each dead letter
    {"kind": "end", "counts": {"log": n, "turn": n, "inbox": n, "dead": n}}

Entries keep their stream ids and their fields in order, so an import gives back the same
room: the same transcript, turn records, state and usage totals. An entry whose field names
or values are not UTF-8 (a dead letter can hold any bytes) is written as ``"raw": [[name,
value], ...]`` in base64 instead of ``"fields"``. The answers stream is not archived: each
turn record holds every answer its turn was decided from. Nor is the events stream: it
tells followers how the room got where it is, and the log, turn records and state already
hold what it told; an imported room's events start empty, with what happens to it next.
The ``end`` line tells a complete file from a cut one; an import checks the whole file
before it writes anything: its order and counts, and its values as they would be checked
on their way in: the spec as any spec, each post waiting as a post, the state's counts,
totals and times as numbers the room can go on with.
"""

from __future__ import annotations

import base64
import contextlib
import json
import math
import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from pydantic import ValidationError

from parley.shared.models import MentionPolicy, RoomSpec, check_person_name
from parley.shared.records import (
    AGENT_FIELD_PREFIX,
    CALL_TOTALS,
    COUNT_LIMIT,
    RUN_TOTAL_PREFIX,
    TOOLS_FIELD_MAX_BYTES,
    RoomState,
    check_post,
    decode_fields,
    message_from_fields,
    turn_record_from_fields,
)
from parley.shared.settings import Settings
from parley.shared.store import RoomChanged, RoomHead, RoomHeld, RoomStore, check_poster

ARCHIVE_FORMAT = 1
# Entry kinds in file order, each with the Keys method naming its stream.
ENTRY_KINDS = {"log": "log", "turn": "turns", "inbox": "inbox", "dead": "dead_letters"}
RESTORE_BATCH = 500
# An import takes counts and totals below this, a hundredth of what the scripts allow
# (records.COUNT_LIMIT): no room gets near it (a turn a second for 30,000 years), and one
# archived near the scripts' limit would soon fail on it.
IMPORT_COUNT_LIMIT = COUNT_LIMIT // 100
IMPORT_COUNT_LIMIT_TEXT = "10^12"
# The state fields that hold counts, and those that hold unix times; its totals are told
# by their names (total_field).
STATE_COUNTS = ("epoch", "last_seq", "run", "messages_in_run", "turn", "run_turns",
                "turn_snapshot_seq", "failed_takes")
STATE_TIMES = ("turn_deadline", "turn_opened_at", "paused_at")
# An agent's ``agent:<name>:calls`` numbers its calls; it is kept as a total is.
AGENT_TOTALS = (*CALL_TOTALS, "calls")
_DIGITS = re.compile(r"[0-9]{1,19}")


class ArchiveError(ValueError):
    """A file that is not a complete parley room archive; the message names the line."""


class ArchiveOfAnother(ArchiveError):
    """An archive of another organization's room, imported by one who is not a
    cluster-admin."""


@dataclass
class ArchiveResult:
    """What an archive wrote, and whether the room was removed from Redis after."""

    room: str
    path: str
    counts: dict[str, int]
    removed: bool
    children: list[str] = field(default_factory=list)  # its task rooms' archives


@dataclass
class ArchiveContents:
    """A checked archive: the room it holds, its hashes, and how many entries of each kind."""

    room: str
    spec: dict[Any, Any]
    state: dict[Any, Any]
    counts: dict[str, int] = field(default_factory=dict)


def encode_entry(fields: dict[Any, Any]) -> dict[str, Any]:
    """``{"fields": {...}}`` when every name and value is UTF-8, else ``{"raw": [...]}``."""
    try:
        return {"fields": {_text(name): _text(value) for name, value in fields.items()}}
    except UnicodeDecodeError:
        return {"raw": [[_b64(name), _b64(value)] for name, value in fields.items()]}


def decode_entry(line: dict[str, Any]) -> dict[Any, Any]:
    """The fields of an entry line as written to Redis; ValueError when malformed."""
    if "raw" in line:
        raw = line["raw"]
        if not isinstance(raw, list) or not all(
                isinstance(pair, list) and len(pair) == 2 and all(isinstance(x, str) for x in pair)
                for pair in raw):
            raise ValueError("raw is not a list of [name, value] base64 pairs")
        return {base64.b64decode(name, validate=True): base64.b64decode(value, validate=True)
                for name, value in raw}
    fields = line.get("fields")
    if not isinstance(fields, dict) or not all(isinstance(v, str) for v in fields.values()):
        raise ValueError("fields is not an object of text values")
    return dict(fields)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _b64(value: bytes | str) -> str:
    raw = value.encode() if isinstance(value, str) else value
    return base64.b64encode(raw).decode()


def write_archive(store: RoomStore, room: str, out: IO[str], head: RoomHead | None = None
                  ) -> dict[str, int]:
    """Write the room as JSON lines to ``out`` (from ``head`` when the caller read it
    already); returns how many entries of each kind."""
    head = head or store.read_head(room)
    write = _line_writer(out)
    write({"kind": "room", "format": ARCHIVE_FORMAT, "room": room, "archived_at": time.time(),
           "organization": head.read_state().organization})
    write({"kind": "spec", **encode_entry(head.spec)})
    write({"kind": "state", **encode_entry(head.state)})
    counts = dict.fromkeys(ENTRY_KINDS, 0)
    # The streams are read after the head: a room that goes on meanwhile (archived with
    # --keep) is written as the head saw it, its later messages and turn records left out.
    state = head.read_state()
    streamed = {"log": store.iter_entries(store.keys.log(room), end=f"{state.last_seq}-0"),
                "turn": (entry for entry in store.iter_entries(store.keys.turns(room))
                         if decided_by(entry[1], state)),
                "inbox": iter(head.inbox), "dead": iter(head.dead_letters)}
    for kind, entries in streamed.items():
        for entry_id, fields in entries:
            write({"kind": kind, "id": _text(entry_id), **encode_entry(fields)})
            counts[kind] += 1
    write({"kind": "end", "counts": counts})
    return counts


def decided_by(record: dict[Any, Any], state: RoomState) -> bool:
    """True when the turn record was committed by the time ``state`` was read: its turn is
    an earlier one, or the state's own and closed."""
    turn = int(record.get(b"turn") or record.get("turn") or 0)
    return turn < state.turn or (turn == state.turn and not state.turn_open)


def _line_writer(out: IO[str]) -> Any:
    def write(line: dict[str, Any]) -> None:
        out.write(json.dumps(line, ensure_ascii=False, separators=(",", ":")) + "\n")

    return write


def archive_room(store: RoomStore, room: str, path: str | Path, keep: bool = False
                 ) -> ArchiveResult:
    """Archive the room to ``path`` (a new file), then remove it from Redis unless
    ``keep``. The file appears whole or not at all. The room is removed only if it is not
    held by a coordinator and did not move on while it was written (RoomHeld,
    RoomChanged); the file is then taken away again, so a failure changes nothing."""
    target = Path(path)
    if target.exists():
        raise FileExistsError(f"{target} exists: archives are never overwritten; choose "
                              "another file")
    head = store.read_head(room)
    if head.holder and not keep:
        raise RoomHeld(f"room {room} is held by coordinator {head.holder} (a run is going "
                       "on): pause or cancel it first, or archive it with --keep")
    # Its tasks' rooms are archived with it, each to a file beside it named after the
    # task's room: the parent's archive stays one room's, importable as it is.
    children = [(child, child_archive(target, room, child)) for child in store.children(room)]
    counts = write_whole(target, lambda out: write_archive(store, room, out, head))
    for child, path in children:
        write_whole(path, lambda out, child=child: write_archive(store, child, out))
    paths = [str(path) for _, path in children]
    if keep:
        return ArchiveResult(room, str(target), counts, removed=False, children=paths)
    expect, inbox_newest = head.guard()
    try:
        store.delete(room, expect=expect, inbox_newest=inbox_newest)
    except (RoomHeld, RoomChanged) as error:
        for path in [target, *(path for _, path in children)]:
            path.unlink()
        raise type(error)(f"{error}; no archive was written: try again") from error
    return ArchiveResult(room, str(target), counts, removed=True, children=paths)


def child_archive(target: Path, room: str, child: str) -> Path:
    """Where a task's room is archived beside its parent's ``target``: ``<stem>.task-<id>``
    and the same suffix. Refused when that file exists (archives are never overwritten)."""
    path = target.with_name(f"{target.stem}{child[len(room):]}{target.suffix}")
    if path.exists():
        raise FileExistsError(f"{path} exists: archives are never overwritten; choose "
                              "another file")
    return path


def write_whole(target: Path, write: Any) -> dict[str, int]:
    """Run ``write`` on a new file that appears at ``target`` whole or not at all."""
    partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
    try:
        with partial.open("w", encoding="utf-8", newline="\n") as out:
            counts = write(out)
            out.flush()
            os.fsync(out.fileno())
        os.replace(partial, target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            partial.unlink()
    return counts


def read_lines(path: str | Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Each line of the file as (line number, JSON object)."""
    with Path(path).open(encoding="utf-8") as lines:
        for number, text in enumerate(lines, 1):
            try:
                line = json.loads(text)
            except (json.JSONDecodeError, UnicodeDecodeError) as error:
                raise ArchiveError(f"{path} line {number}: not JSON ({error})") from None
            if not isinstance(line, dict):
                raise ArchiveError(f"{path} line {number}: not a JSON object")
            yield number, line


def check_archive(path: str | Path,
                  message_max_bytes: int = Settings.model_fields["message_max_bytes"].default
                  ) -> ArchiveContents:
    """Read the whole file and check it is one complete room archive whose values the room
    can go on with (a post waiting at most ``message_max_bytes``), before anything is
    written; ArchiveError names the first line that is not, and what is wrong with it."""
    checker = _ArchiveChecker(message_max_bytes)
    for number, line in read_lines(path):
        try:
            checker.check(number, line)
        except (ValueError, KeyError, TypeError) as error:
            raise ArchiveError(f"{path} line {number}: {_reason(error)}") from None
    if checker.contents is None or not checker.ended:
        raise ArchiveError(f"{path}: the archive is cut short (no end line)")
    return checker.contents


def _reason(error: Exception) -> str:
    if isinstance(error, ValidationError):
        # pydantic prefixes the spec's own rules' messages; the field already says where.
        return "; ".join(f"{'.'.join(map(str, e['loc'])) or 'value'}: "
                         f"{e['msg'].removeprefix('Value error, ')}" for e in error.errors())
    if isinstance(error, KeyError):
        return f"{error.args[0]} is missing"
    return str(error)


class _ArchiveChecker:
    """Checks an archive line by line: the order of its lines, each one's content, ids
    increasing per kind, and the end line's counts."""

    def __init__(self, message_max_bytes: int) -> None:
        self.message_max_bytes = message_max_bytes
        self.room_spec: RoomSpec | None = None
        self.contents: ArchiveContents | None = None
        self.last_ids: dict[str, tuple[int, int]] = {}
        self.last_message_seq = 0
        self.ended = False

    def check(self, number: int, line: dict[str, Any]) -> None:
        """Check one line; ValueError (or KeyError, TypeError) says what is wrong."""
        kind = line.get("kind")
        expected = {1: "room", 2: "spec", 3: "state"}.get(number)
        if self.ended:
            raise ValueError("a line after the end line")
        if expected and kind != expected:
            raise ValueError(f"expected the {expected} line, found {kind!r}"
                             + (": not a parley room archive" if number == 1 else ""))
        if kind == "room":
            if line.get("format") != ARCHIVE_FORMAT:
                raise ValueError(f"archive format {line.get('format')!r}; this parley reads "
                                 f"format {ARCHIVE_FORMAT}")
            self.contents = ArchiveContents(room=str(line["room"]), spec={}, state={})
            return
        contents = self.contents
        assert contents is not None  # line 1 was the room line
        if kind == "spec":
            contents.spec = decode_entry(line)
            self.room_spec = RoomSpec.model_validate_json(contents.spec["json"])
        elif kind == "state":
            contents.state = decode_entry(line)
            check_state_values(decode_fields(contents.state))
            if not RoomState(contents.state).raw.get("status"):
                raise ValueError("the state has no status")
        elif kind in ENTRY_KINDS:
            self.check_entry(str(kind), line)
            contents.counts[str(kind)] = contents.counts.get(str(kind), 0) + 1
        elif kind == "end":
            self.check_end(line, contents)
        else:
            raise ValueError(f"unknown line kind {kind!r}")

    def check_entry(self, kind: str, line: dict[str, Any]) -> None:
        """An entry's id comes after the one before of its kind; a message's seq is its id
        and follows the one before (a capped log may start past 1, but has no gap)."""
        entry_id = parse_stream_id(line.get("id"))
        if entry_id <= self.last_ids.get(kind, (0, 0)):
            raise ValueError(f"{kind} id {line['id']} is not after the one before")
        self.last_ids[kind] = entry_id
        fields = decode_entry(line)
        if kind == "log":
            check_tool_calls(f"log entry {line['id']}", decode_fields(fields))
            message = message_from_fields(fields)
            if (message.seq, 0) != entry_id:
                raise ValueError(f"log entry {line['id']} holds seq {message.seq}")
            if self.last_message_seq and message.seq != self.last_message_seq + 1:
                raise ValueError(f"log entry {line['id']} does not follow seq "
                                 f"{self.last_message_seq}: a log's seqs have no gap")
            self.last_message_seq = message.seq
            self.check_message(line["id"], decode_fields(fields))
        elif kind == "inbox":
            self.check_waiting_post(line["id"], decode_fields(fields))
        elif kind == "turn":
            check_turn_record(line["id"], fields)

    def check_message(self, entry_id: str, fields: dict[str, str]) -> None:
        """A log message as the scripts wrote it: a sender drain would take, counts and a
        time the room can go on with; a person's (no score) at most a post's size."""
        where = f"log entry {entry_id}"
        sender, content = fields["sender"], fields["content"]
        # An agent's message (it has a score) is as long as its model wrote it; a person's
        # was a post, and no longer than one.
        most = len(content.encode()) if fields.get("score") else self.message_max_bytes
        check_post(sender, content, most)
        for name in ("seq", "turn", "run", "epoch"):
            if fields.get(name):
                check_count(f"{where} {name}", fields[name])
        for name in ("score", "ts"):
            if fields.get(name):
                finite_number(f"{where} {name}", fields[name])

    def check_waiting_post(self, entry_id: str, fields: dict[str, str]) -> None:
        """A post waiting as it was checked on its way in: a person's name that is not one
        of the room's agents' (nor outside its roster of people), content of at most
        ``message_max_bytes``, and a time."""
        spec, contents = self.room_spec, self.contents
        assert spec is not None and contents is not None  # lines 1 and 2 came first
        sender, content = fields["sender"], fields["content"]
        check_person_name(sender)
        check_post(sender, content, self.message_max_bytes)
        people = spec.policy.people if isinstance(spec.policy, MentionPolicy) else None
        check_poster(contents.room, sender, [agent.name for agent in spec.callers], people)
        if fields.get("ts"):
            finite_number(f"inbox entry {entry_id} ts", fields["ts"])

    def check_end(self, line: dict[str, Any], contents: ArchiveContents) -> None:
        """The end line counts what the file holds; the log ends at the state's last_seq."""
        counts = {kind: contents.counts.get(kind, 0) for kind in ENTRY_KINDS}
        if line.get("counts") != counts:
            raise ValueError(f"the end line counts {line.get('counts')}, the file holds {counts}")
        last_seq = RoomState(contents.state).last_seq
        if self.last_message_seq != last_seq:
            raise ValueError(f"the log ends at seq {self.last_message_seq}, the state's "
                             f"last_seq is {last_seq}")
        contents.counts = counts
        self.ended = True


def check_tool_calls(where: str, fields: dict[str, str]) -> None:
    """A message's tool calls as a commit writes them, if it has any: a JSON list within
    the log entry's cap, and who reads their results (shared or private)."""
    if "tools" not in fields:
        return
    tools = fields["tools"]
    if len(tools.encode()) > TOOLS_FIELD_MAX_BYTES:
        raise ValueError(f"{where} tools is over {TOOLS_FIELD_MAX_BYTES} bytes")
    try:
        calls = json.loads(tools)
    except ValueError:
        calls = None
    if not isinstance(calls, list):
        raise ValueError(f"{where} tools is not a JSON list of tool calls")
    if fields.get("tool_results") not in ("shared", "private"):
        raise ValueError(f"{where} tool_results {fields.get('tool_results')!r} is neither "
                         "shared nor private")


def check_state_values(state: dict[str, str]) -> None:
    """The state's counts and totals as the room can go on with (whole numbers, and
    finite numbers, from 0 and below IMPORT_COUNT_LIMIT), and its times finite; ValueError
    names the first field that is not."""
    for name, value in state.items():
        where = f"state {name}"
        if name in STATE_COUNTS:
            check_count(where, value)
        elif total_field(name):
            check_below_limit(where, value, finite_number(where, value))
        elif name in STATE_TIMES:
            finite_number(where, value)
    if "spec_version" in state:
        whole_number("state spec_version", state["spec_version"])


def total_field(name: str) -> bool:
    """True for a state field that holds a running total: the room's, its run's, or an
    agent's (``agent:<name>:<total>``, its calls too)."""
    if name.startswith(AGENT_FIELD_PREFIX):
        return name.rsplit(":", 1)[-1] in AGENT_TOTALS
    return name.removeprefix(RUN_TOTAL_PREFIX) in CALL_TOTALS


def check_turn_record(entry_id: str, fields: dict[Any, Any]) -> None:
    """A turn record as the turns stream's readers read it, its answers' tokens and costs
    finite numbers from 0."""
    record = turn_record_from_fields(fields)
    for answer in record.bids:
        for name in ("prompt_tokens", "completion_tokens", "cached_tokens", "cost_usd"):
            finite_number(f"turn record {entry_id} answer of {answer.agent} {name}",
                          str(getattr(answer, name)))


def whole_number(where: str, value: str) -> int:
    """``value`` as a whole number from 0 that fits in 64 bits; ValueError otherwise."""
    if not _DIGITS.fullmatch(value) or int(value) >= 2**63:
        raise ValueError(f"{where} {value!r} is not a whole number from 0")
    return int(value)


def finite_number(where: str, value: str) -> float:
    """``value`` as a finite number from 0; ValueError otherwise (``1e309`` included)."""
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if not math.isfinite(number) or number < 0:
        raise ValueError(f"{where} {value!r} is not a finite number from 0")
    return number


def check_count(where: str, value: str) -> int:
    """``value`` as a count an import takes: a whole number below IMPORT_COUNT_LIMIT."""
    return int(check_below_limit(where, value, whole_number(where, value)))


def check_below_limit(where: str, value: str, number: float) -> float:
    """``number`` (read from ``value``) if it is below IMPORT_COUNT_LIMIT, else ValueError."""
    if number >= IMPORT_COUNT_LIMIT:
        raise ValueError(f"{where} is {value}: an import takes counts and totals below "
                         f"{IMPORT_COUNT_LIMIT_TEXT}, so that the room can go on counting")
    return number


def parse_stream_id(value: Any) -> tuple[int, int]:
    """A stream id ``<ms>-<seq>`` as a pair of counts; ValueError when it is not one."""
    if not isinstance(value, str):
        raise ValueError(f"id {value!r} is not a stream id")
    millis, dash, sequence = value.partition("-")
    if not (dash and millis.isdigit() and sequence.isdigit()
            and (int(millis), int(sequence)) > (0, 0)):
        raise ValueError(f"id {value!r} is not a stream id")
    return int(millis), int(sequence)


def import_room(store: RoomStore, path: str | Path, room: str | None = None,
                organization: str | None = None) -> str:
    """Bring an archived room back into Redis (under ``room``, or the id it was archived
    under); returns its id. The whole file is checked first; the id must be free; with
    ``organization`` (an importer who is not a cluster-admin), the archive must be that
    organization's (else ArchiveOfAnother). Until the last step nothing is visible: the id
    is reserved, the streams are restored, and one script then adds the spec and the
    state. A failure on the way removes what it wrote."""
    contents = check_archive(path, store.message_max_bytes)
    archived = RoomState(contents.state).organization
    if organization is not None and archived != organization:
        raise ArchiveOfAnother(f"the archive is a room of organization {archived}, not "
                               f"{organization}'s: only a cluster-admin may import it")
    room = room or contents.room
    store.reserve(room)
    try:
        for kind, entries in _entry_batches(path):
            store.restore_entries(getattr(store.keys, ENTRY_KINDS[kind])(room), entries)
        store.finish_import(room, contents.spec, contents.state)
    except BaseException:
        with contextlib.suppress(Exception):
            store.delete(room, force=True)
        raise
    return room


def _entry_batches(path: str | Path) -> Iterator[tuple[str, list[tuple[str, dict[Any, Any]]]]]:
    """The file's entries, in batches of one kind."""
    kind, batch = "", list[tuple[str, dict[Any, Any]]]()
    for _, line in read_lines(path):
        if line.get("kind") not in ENTRY_KINDS:
            continue
        if batch and (line["kind"] != kind or len(batch) >= RESTORE_BATCH):
            yield kind, batch
            batch = []
        kind = line["kind"]
        batch.append((line["id"], decode_entry(line)))
    if batch:
        yield kind, batch
