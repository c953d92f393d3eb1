"""Tool calls that wait for a person: a room's approval records, and the one place they
are written (request_approval.lua, answer_approval.lua) and read.

An approval's id is its tool call's (``<turn>.<phase>.<call>.<round>.<index>``), so a call
asked again finds the request its first asking wrote. Its record is flat fields of the
room's approvals hash (``Keys.approvals``); the times are Redis's clock, so every process
reads one clock. The first answer wins; one given after ``expires_at`` (requested_at +
the spec's ``approval_timeout_s``) times the approval out instead, a denial.

A pending approval holds its turn's deadline: the time a phase's approvals were pending
(``held_seconds``) is added to the phase's deadline by the coordinator, as the waiting
call adds it to its own, so that a call that waited for a person still has the rest of
its time afterwards.
"""

from __future__ import annotations

import time
from enum import StrEnum
from typing import Any

import orjson
import redis
from pydantic import BaseModel, Field, JsonValue, field_validator

from parley.shared.keys import Keys
from parley.shared.models import check_person_name, name_key
from parley.shared.records import decode
from parley.shared.refusals import Refusal, refusal_of

# The record's fields, in the order the scripts return them (shared/lua/lib/approvals.lua).
APPROVAL_FIELDS = ("agent", "tool", "arguments", "turn", "phase", "requested_at",
                   "expires_at", "status", "by", "reason", "answered_at")
# How many answered approvals a room keeps (the pending ones are all kept).
ANSWERED_KEPT = 1000


class ApprovalStatus(StrEnum):
    """Where an approval stands."""

    PENDING = "pending"  # waiting for a person
    APPROVED = "approved"  # an approver let the call run
    DENIED = "denied"  # an approver refused it
    TIMED_OUT = "timed_out"  # nobody answered within approval_timeout_s: a denial


class Approval(BaseModel):
    """One tool call's approval, as its record holds it."""

    id: str
    agent: str
    tool: str
    arguments: dict[str, JsonValue] = Field(default_factory=dict)
    turn: int
    phase: int = 0
    requested_at: float
    expires_at: float
    status: ApprovalStatus = ApprovalStatus.PENDING
    by: str = ""
    reason: str = ""
    answered_at: float | None = None

    @field_validator("arguments", mode="before")
    @classmethod
    def _from_json(cls, value: Any) -> Any:
        return orjson.loads(value) if isinstance(value, str | bytes) else value

    @field_validator("answered_at", mode="before")
    @classmethod
    def _empty_is_none(cls, value: Any) -> Any:
        return None if value in ("", b"") else value

    @property
    def approved(self) -> bool:
        """True when an approver let the call run."""
        return self.status is ApprovalStatus.APPROVED

    def pending_at(self, now: float) -> bool:
        """True while the approval waits for a person and its time is not up."""
        return self.status is ApprovalStatus.PENDING and now < self.expires_at

    def held_until(self, now: float) -> float:
        """When the approval stopped (or will have stopped, by ``now``) holding its call."""
        end = self.answered_at if self.answered_at is not None else now
        return max(self.requested_at, min(end, self.expires_at))


class ApprovalNotFound(LookupError):
    """No approval of the room has that id (or id prefix)."""


class NotAnApprover(PermissionError):
    """The person answering is not on the spec's ``approvers`` roster."""


class ApprovalClosed(ValueError):
    """The approval was answered (or timed out) already: the first answer stands."""

    def __init__(self, message: str, approval: Approval) -> None:
        super().__init__(message)
        self.approval = approval


def approval_from_values(approval_id: str, values: list[Any]) -> Approval:
    """A record from its fields' values in APPROVAL_FIELDS order."""
    fields = {name: decode(value) if value is not None else ""
              for name, value in zip(APPROVAL_FIELDS, values, strict=True)}
    return Approval.model_validate({"id": approval_id, **fields})


def field_names(approval_id: str) -> list[str]:
    """The approvals hash's fields of one record, in APPROVAL_FIELDS order."""
    return [f"{approval_id}:{name}" for name in APPROVAL_FIELDS]


def held_seconds(approvals: list[Approval], now: float) -> float:
    """How long at least one of ``approvals`` was pending, up to ``now``: overlapping waits
    (parallel tool calls) count once, and none counts past its expires_at."""
    spans = sorted((a.requested_at, a.held_until(now)) for a in approvals)
    held, reached = 0.0, float("-inf")
    for start, end in spans:
        start = max(start, reached)
        if end > start:
            held += end - start
            reached = end
    return held


def describe_call(tool: str, arguments: dict[str, Any], most: int = 120) -> str:
    """``tool(key=value, ...)`` as one line, cut near ``most`` characters."""
    shown = ", ".join(f"{key}={value if isinstance(value, str) else orjson.dumps(value).decode()}"
                      for key, value in arguments.items())
    text = f"{tool}({shown})"
    return text if len(text) <= most else text[: most - 2] + "…)"


class ApprovalBook:
    """A room's approvals in one Redis: ask, answer, read (sync: clients and workers)."""

    def __init__(self, client: Any, keys: Keys, scripts: Any, events_maxlen: int) -> None:
        self.redis = client
        self.keys = keys
        self.scripts = scripts
        self.events_maxlen = events_maxlen

    def request(self, room: str, approval_id: str, agent: str, tool: str,
                arguments: dict[str, Any], turn: int, phase: int, timeout_s: float
                ) -> tuple[bool, Approval]:
        """Ask for approval of a tool call (or find it asked already); returns whether it
        was asked now, and its record."""
        reply = self.scripts.request_approval(
            keys=[self.keys.spec(room), self.keys.approvals(room),
                  self.keys.approvals_open(room), self.keys.events(room)],
            args=[approval_id, agent, tool, orjson.dumps(arguments), turn, phase,
                  repr(float(timeout_s)), self.events_maxlen])
        return bool(int(reply[0])), approval_from_values(approval_id, reply[1:])

    def answer(self, room: str, approval_id: str, approve: bool, by: str, reason: str = ""
               ) -> Approval:
        """Approve or deny an approval as ``by``; returns it answered. Raises NotAnApprover
        (naming the roster), ApprovalNotFound, or ApprovalClosed (answered already, or
        its time was up: it is timed out now)."""
        check_person_name(by)
        roster = self.approvers(room)
        spelled = next((name for name in roster if name_key(name) == name_key(by)), None)
        if spelled is None:
            raise NotAnApprover(f"{by!r} is not an approver of room {room} (approvers: "
                                f"{', '.join(roster) or 'none'})")
        verdict = ApprovalStatus.APPROVED if approve else ApprovalStatus.DENIED
        outcome, approval = self._answer(room, approval_id, verdict, spelled, reason)
        if outcome != "answered":
            raise ApprovalClosed(closed_detail(room, approval), approval)
        return approval

    def time_out(self, room: str, approval_id: str) -> tuple[bool, Approval]:
        """Mark a pending approval whose time is up as timed out; returns whether it now
        is closed (False: its time is not up by Redis's clock), and its record."""
        outcome, approval = self._answer(room, approval_id, ApprovalStatus.TIMED_OUT, "", "")
        return outcome != "early", approval

    def _answer(self, room: str, approval_id: str, verdict: ApprovalStatus, by: str,
                reason: str) -> tuple[str, Approval]:
        try:
            reply = self.scripts.answer_approval(
                keys=[self.keys.spec(room), self.keys.approvals(room),
                      self.keys.approvals_open(room), self.keys.approvals_done(room),
                      self.keys.events(room)],
                args=[approval_id, verdict.value, by, reason, self.events_maxlen,
                      ANSWERED_KEPT])
        except redis.ResponseError as error:
            raise answer_error(error, room, approval_id, by) from error
        return decode(reply[0]), approval_from_values(approval_id, reply[1:])

    def approvers(self, room: str) -> list[str]:
        """The room's ``approvers`` roster as its stored spec spells it."""
        spec_json = self.redis.hget(self.keys.spec(room), "json")
        if spec_json is None:
            raise ApprovalNotFound(f"no room {room!r}")
        try:
            names = orjson.loads(spec_json).get("approvers") or []
        except (orjson.JSONDecodeError, AttributeError):
            return []
        return [name for name in names if isinstance(name, str)]

    def get(self, room: str, approval_id: str) -> Approval | None:
        """The record ``approval_id``, or None."""
        values = self.redis.hmget(self.keys.approvals(room), field_names(approval_id))
        return approval_from_values(approval_id, values) if values[7] else None

    def pending(self, room: str) -> list[Approval]:
        """The approvals still waiting for a person (their time not up), oldest first."""
        now = time.time()
        return [a for a in self._read(room, self.keys.approvals_open(room)) if a.pending_at(now)]

    def answered(self, room: str, last: int = 100) -> list[Approval]:
        """The ``last`` approvals answered (or timed out), newest first."""
        return self._read(room, self.keys.approvals_done(room), last, newest_first=True)

    def _read(self, room: str, index: str, last: int = ANSWERED_KEPT,
              newest_first: bool = False) -> list[Approval]:
        ids = [decode(member) for member in (
            self.redis.zrevrange(index, 0, last - 1) if newest_first
            else self.redis.zrange(index, 0, last - 1))]
        if not ids:
            return []
        pipe = self.redis.pipeline(transaction=False)
        for approval_id in ids:
            pipe.hmget(self.keys.approvals(room), field_names(approval_id))
        return [approval_from_values(approval_id, values)
                for approval_id, values in zip(ids, pipe.execute(), strict=True) if values[7]]

    def find(self, room: str, given: str) -> Approval:
        """The approval whose id is ``given``, or the only pending one whose id starts with
        it; ApprovalNotFound (one line) otherwise."""
        if (exact := self.get(room, given)) is not None:
            return exact
        matches = [a for a in self.pending(room) if a.id.startswith(given)]
        if len(matches) == 1:
            return matches[0]
        if not matches:
            raise ApprovalNotFound(f"no approval {given!r} in room {room}: parley approvals "
                                   f"{room} lists the pending ones")
        raise ApprovalNotFound(f"{given!r} names {len(matches)} approvals in room {room} "
                               f"({', '.join(a.id for a in matches)}): give more of the id")


def closed_detail(room: str, approval: Approval) -> str:
    """Why an approval can no longer be answered, in one line."""
    call = describe_call(approval.tool, approval.arguments)
    if approval.status is ApprovalStatus.TIMED_OUT:
        return f"{call} in room {room} timed out: {approval.reason}"
    return f"{call} in room {room} was already {approval.status.value} by {approval.by}"


def answer_error(error: redis.ResponseError, room: str, approval_id: str, by: str
                 ) -> Exception:
    """answer_approval.lua's refusal as the exception the front door reports in one line."""
    refused = refusal_of(error)
    if refused is None:
        return error
    if refused.code is Refusal.NO_ROOM:
        return ApprovalNotFound(f"no room {room!r}")
    if refused.code is Refusal.NO_APPROVAL:
        return ApprovalNotFound(f"no approval {approval_id!r} in room {room}")
    if refused.code is Refusal.NOT_APPROVER:
        return NotAnApprover(f"{by!r} is not an approver of room {room} (approvers: "
                             f"{refused.detail or 'none'})")
    return error
