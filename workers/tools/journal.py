"""The room's tool journal, as one call's tool loop uses it: nothing runs twice.

Before a tool runs, its start is claimed (the first claim wins); after it, its result
replaces the start. Each model step's tool calls are recorded too (the first record wins),
so a call asked again (a takeover, a re-ask, a worker killed mid-call) replays its steps
and results instead of calling the model and the tools again. A start with no result is
another worker's call still running while its claim is within its tool's timeout, and
``uncertain`` after: the worker running it stopped.

=====================  ============================================================
journal field          holds (JSON)
=====================  ============================================================
``<call>.<round>``     a model step's tool calls: ``content``, ``calls`` [{id, name,
                       arguments}]
``<call>.<r>.<i>``     ``state: started`` (by, at, timeout_s), then ``state: done``
                       (the ``record`` and the ``text`` the model read)
=====================  ============================================================
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from typing import Any

import orjson

from parley.shared.events import tool_called_fields, tool_result_fields
from parley.shared.models import ToolCallRecord
from parley.shared.store import RoomStore

STARTED, DONE = "started", "done"
# A wait for another worker's result wakes this often to read the journal again.
WAIT_STEP_S = 0.5


@dataclass(frozen=True)
class AskedCall:
    """One tool call a model step asked for: the provider's id for it (the tool message
    answers it), the function's name as offered, and its arguments as the model wrote them."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class Step:
    """A model step of a tool loop: its text and the tool calls it asked for."""

    content: str
    calls: tuple[AskedCall, ...]

    def dumps(self) -> str:
        """The step as its journal record."""
        return orjson.dumps({"state": DONE, "content": self.content,
                             "calls": [vars(call) for call in self.calls]}).decode()

    @staticmethod
    def loads(text: str) -> Step:
        """A step from its journal record."""
        data = orjson.loads(text)
        return Step(str(data.get("content") or ""),
                    tuple(AskedCall(str(c["id"]), str(c["name"]), str(c["arguments"]))
                          for c in data["calls"]))


@dataclass(frozen=True)
class Claim:
    """A tool call's start as the journal holds it: whose, since when, for how long."""

    raw: str  # the journal's text of it, which a result (or a new claim) must replace
    by: str
    at: float
    timeout_s: float

    @property
    def expires(self) -> float:
        """When the claim's tool call must have ended (it is stale after)."""
        return self.at + self.timeout_s


@dataclass(frozen=True)
class Done:
    """A tool call's result as the journal holds it."""

    record: ToolCallRecord
    text: str


def read_entry(raw: str) -> Claim | Done:
    """A tool call's journal record, a start or a result."""
    data: dict[str, Any] = orjson.loads(raw)
    if data.get("state") == DONE:
        return Done(ToolCallRecord.model_validate(data["record"]), str(data.get("text", "")))
    return Claim(raw, str(data.get("by", "")), float(data.get("at", 0.0)),
                 float(data.get("timeout_s", 0.0)))


class ToolJournal:
    """The journal of one room, written under one claimant's name (this loop's)."""

    def __init__(self, store: RoomStore, room: str, cap: int, turn: int, phase: int) -> None:
        self.store = store
        self.room = room
        self.cap = cap
        self.turn = turn
        self.phase = phase
        self.by = secrets.token_hex(6)

    def recorded_step(self, field: str) -> Step | None:
        """The model step recorded at ``field``, or None."""
        raw = self.store.journal_get(self.room, field)[0]
        return Step.loads(raw) if raw else None

    def record_step(self, field: str, step: Step) -> Step:
        """Record ``step`` at ``field`` unless one is there: the step that holds (another
        worker's, when it recorded first)."""
        written, held = self.store.journal_put(self.room, field, step.dumps(), cap=self.cap)
        return step if written or not held else Step.loads(held)

    def claim(self, record: ToolCallRecord, timeout_s: float, replacing: str = ""
              ) -> tuple[Claim | None, Claim | Done | None]:
        """Claim the tool call's start (where the journal holds ``replacing``: nothing, or
        a stale claim), writing its ``tool_called`` event: (our claim, None) when claimed,
        else (None, what the journal holds; None when the room is gone)."""
        raw = orjson.dumps({"state": STARTED, "by": self.by, "at": time.time(),
                            "timeout_s": timeout_s, "tool": record.tool,
                            "agent": record.agent}).decode()
        written, held = self.store.journal_put(
            self.room, record.id, raw, expect=replacing,
            event=tool_called_fields(record, self.turn, self.phase), cap=self.cap)
        if written:
            return read_entry(raw), None  # type: ignore[return-value]
        return None, read_entry(held) if held else None

    def finish(self, record: ToolCallRecord, text: str, claim: Claim) -> Done:
        """Replace our claim with the result, writing its ``tool_result`` event and waking
        whoever waits for it: the result that holds (one written first, by a worker that
        ran it for us, stays)."""
        done = Done(record, text)
        raw = orjson.dumps({"state": DONE, "record": record.model_dump(mode="json"),
                            "text": text}).decode()
        written, held = self.store.journal_put(self.room, record.id, raw, expect=claim.raw,
                                               event=tool_result_fields(record),
                                               wake=record.id, cap=self.cap)
        if written or not held:
            return done
        entry = read_entry(held)
        return entry if isinstance(entry, Done) else done

    def read(self, call_id: str) -> Claim | Done | None:
        """What the journal holds of tool call ``call_id`` now."""
        raw = self.store.journal_get(self.room, call_id)[0]
        return read_entry(raw) if raw else None

    def wait(self, call_id: str, until: float) -> Claim | Done | None:
        """What the journal holds of the call once its result is there or ``until`` came."""
        while True:
            entry = self.read(call_id)
            left = until - time.time()
            if isinstance(entry, Done) or left <= 0:
                return entry
            self.store.wait_tool_done(self.room, call_id, min(WAIT_STEP_S, left))
