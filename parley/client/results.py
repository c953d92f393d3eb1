"""What the front door reads back: how a run ended, one room as ``parley rooms show`` shows
it, and a room's turns as ``parley turns`` shows them."""

from __future__ import annotations

from dataclasses import dataclass, field

from pydantic import BaseModel

from parley.shared.models import Answer, CallKind, Message, RoomStatus, StopReason, TurnRecord
from parley.shared.store import RoomSummary


class RunResult(BaseModel):
    """How a run ended, with the room's whole conversation."""

    room: str
    status: RoomStatus
    stop_reason: StopReason | None
    stop_detail: str = ""
    # The run's answer: the last substantive message its policy posted (a selector room
    # strips a trailing TERMINATE); None when no agent posted one.
    answer: str | None = None
    messages: list[Message]


class RunTimeout(TimeoutError):
    """The run did not finish (or never started) in time."""


class StreamReport(BaseModel):
    """One of a room's streams: its length, its cap (None: never trimmed) and, for the log,
    its first seq still kept (above 1 once a cap trimmed it)."""

    length: int
    max_length: int | None
    first_seq: int | None = None


class RoomDetails(RoomSummary):
    """One room as ``parley rooms show`` shows it: its summary and what it is made of."""

    agents: list[str]
    turn: int
    turn_open: bool
    run_turns: int
    stop_detail: str
    answer: str | None
    paused_at: float | None
    posts_waiting: int
    prompt_tokens: int
    completion_tokens: int
    failed_takes: int
    last_error: str
    streams: dict[str, StreamReport]


@dataclass(frozen=True)
class TurnInFlight:
    """The turn in flight: its current phase's calls, who answered them and who has not,
    and every answer of the turn so far (all phases, in arrival order)."""

    turn: int
    run: int
    phase: int
    kind: CallKind | None
    agents: list[str]
    answered: list[str]
    pending: list[str]
    answers: list[Answer] = field(default_factory=list)
    opened_at: float = 0.0
    deadline: float = 0.0


@dataclass(frozen=True)
class TurnReport:
    """A room's turns: those still in its turns stream, oldest first, and the open one."""

    room: str
    turns: list[TurnRecord]
    open_turn: TurnInFlight | None
