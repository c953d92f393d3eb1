"""What every floor policy takes and returns. No I/O here or in any policy."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from parley.shared.models import Answer, CallKind, RoomStatus, StopReason, Usage


@dataclass(frozen=True)
class Posted:
    """A message someone other than the room's agents posted, as a policy reads it."""

    seq: int
    sender: str
    content: str


@dataclass(frozen=True)
class FloorOp:
    """An operator's change of the floor (listen, talk, instruct, regenerate), by its
    stream id."""

    id: str
    op: str
    agent: str = ""
    text: str = ""


@dataclass(frozen=True)
class TurnView:
    """The room as a policy sees it when a turn opens: all a decision may depend on."""

    turn: int
    run: int
    run_turns: int  # 1 on the first turn of a run
    messages_in_run: int  # the seed and posted messages included
    recent: tuple[str, ...]  # recent speakers, oldest first
    snapshot_seq: int
    policy_state: Mapping[str, str] = field(default_factory=dict)  # the policy's own fields
    run_usage: Usage = field(default_factory=Usage)  # every committed call of this run: tokens and cost
    room_usage: Usage = field(default_factory=Usage)  # every committed call of the room, all runs
    # Room-scoped fields of the policy (``floor:<field>``): they outlive runs.
    floor_state: Mapping[str, str] = field(default_factory=dict)
    # Messages posted by others than the agents and not yet read by the policy, oldest first.
    unread: tuple[Posted, ...] = ()
    ops: tuple[FloorOp, ...] = ()  # operators' floor changes not yet applied, oldest first


@dataclass(frozen=True)
class Calls:
    """Calls a turn needs next: one kind, to these agents (in spec order)."""

    kind: CallKind
    agents: tuple[str, ...]
    # (agent, instruction) pairs: the input an instructed agent's turn takes
    instructions: tuple[tuple[str, str], ...] = ()


# Stops that mean the room cannot work as configured: the run ends failed.
FAILED_STOPS = frozenset({StopReason.NO_BIDS, StopReason.ALL_FAILED,
                          StopReason.MODERATOR_FAILED})


# The key of a turn's own message in Decision.addressed (its seq is given at commit).
POSTED = "posted"


@dataclass(frozen=True)
class LogLine:
    """A warning a decision asks the turn loop to log once its turn is committed (a
    policy logs nothing itself)."""

    event: str
    fields: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Decision:
    """What the answers so far decide: another phase of calls (``next``), or who takes
    the floor (if anyone) and whether the run ends with this turn."""

    winner: str | None = None
    score: float | None = None
    message: str = ""
    recent: tuple[str, ...] = ()
    adjusted: dict[str, float] = field(default_factory=dict)
    stop: StopReason | None = None
    detail: str = ""
    cuts: dict[str, str] = field(default_factory=dict)  # agent -> the name its reply was cut at
    next: Calls | None = None
    policy_state: dict[str, str] = field(default_factory=dict)  # fields to update
    floor_state: dict[str, str] = field(default_factory=dict)  # room-scoped fields to update
    answer: str | None = None  # the run's answer so far, when this turn changes it
    log_lines: tuple[LogLine, ...] = ()  # warnings to log once the turn is committed
    # Whom messages addressed, by seq ("posted": the winner's message): recorded with the
    # turn, and the posted message's own list in its log entry.
    addressed: dict[str, list[str]] = field(default_factory=dict)

    @property
    def status(self) -> RoomStatus:
        """The room's status after this decision: a room nobody could bid in has failed."""
        if self.stop is None:
            return RoomStatus.RUNNING
        if self.stop in FAILED_STOPS:
            return RoomStatus.FAILED
        return RoomStatus.IDLE


def stopped(reason: StopReason, recent: tuple[str, ...], detail: str = "") -> Decision:
    """A decision that ends the run with no winner."""
    return Decision(recent=recent, stop=reason, detail=detail)


def bids_in_order(agents: tuple[str, ...], bids: list[Answer]) -> list[Answer]:
    """One bid per agent in spec order (the first bid per agent counts)."""
    by_agent: dict[str, Answer] = {}
    for bid in bids:
        by_agent.setdefault(bid.agent, bid)
    return [by_agent[name] for name in agents if name in by_agent]
