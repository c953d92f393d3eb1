"""What every floor policy takes and returns, and the record each one exports. No I/O
here or in any policy."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from parley.coordinator.policies.lines import TurnLine
from parley.shared.models import Answer, CallKind, RoomSpec, RoomStatus, StopReason, TurnRecord, Usage


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
    run_usage: Usage = field(default_factory=Usage)  # every answer of this run so far: tokens and cost
    room_usage: Usage = field(default_factory=Usage)  # every answer of the room, all runs
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
    # The background task whose result this turn relays: set by the turn loop's relay
    # turns (coordinator/relay.py), never by a policy.
    relay: str = ""

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


def record_view(record: TurnRecord) -> TurnView:
    """The room as the recorded turn's policy saw it when the turn opened."""
    return TurnView(
        turn=record.turn,
        run=record.run,
        run_turns=record.run_turns,
        messages_in_run=record.messages_in_run,
        recent=tuple(record.recent),
        snapshot_seq=record.snapshot_seq,
        policy_state=dict(record.policy_state),
        floor_state=dict(record.floor_state),
        unread=tuple(Posted(m.seq, m.sender, m.content) for m in record.unread),
        ops=tuple(FloorOp(op.id, op.op, op.agent, op.text) for op in record.ops),
    )


@dataclass(frozen=True)
class WatchedState:
    """A policy's room-scoped fields (``floor:<field>``) that followers see change: the
    event the commit (or the run's end) that changes one writes, with every field as it is
    afterwards, and each field's value when absent."""

    event: str
    fields: tuple[tuple[str, str], ...]  # (field, value when absent), in the event's order


def no_dashboard_state(spec: RoomSpec, policy_state: Mapping[str, str],
                       ended: StopReason | None = None) -> dict[str, Any] | None:
    """A policy whose state the dashboard does not show."""
    return None


def never_silent(spec: RoomSpec, answer: Answer) -> bool:
    """A policy none of whose calls can answer by saying nothing."""
    return False


def nobody_asked(floor_state: Mapping[str, str]) -> list[str]:
    """A policy that never waits on a person's answer."""
    return []


FirstCalls = Callable[[RoomSpec, TurnView], Calls | Decision]
Decide = Callable[[RoomSpec, TurnView, list[Answer]], Decision]
# A recorded turn told (the room's earlier turns, oldest first, may tell why it went so).
Explain = Callable[[RoomSpec, TurnRecord, Sequence[TurnRecord]], TurnLine]
# A stop told with the spec's numbers (the run's last turn, if any, may name who stopped it).
StopWording = Callable[[RoomSpec, TurnRecord | None], str]
# What the page shows of the policy's state (its per-run fields by name, its room-scoped
# ones as ``floor:<field>``); ``ended``: why the run ended, None while it runs.
DashboardState = Callable[[RoomSpec, Mapping[str, str], StopReason | None],
                          dict[str, Any] | None]


@dataclass(frozen=True)
class FloorPolicy:
    """One floor policy as the rest of parley reads it: each policy module exports one
    (``POLICY``), and nothing outside the module names the policy.

    ``dashboard_state`` gives what the room page shows of the policy's state (None for
    nothing): facts for JSON readers, a ``note`` line shown with the turn, and
    ``speak_queue`` true when the page follows the room's speak queue.
    """

    kind: str  # the spec's policy.kind
    calls: frozenset[CallKind]  # the kinds of call its turns make
    first_calls: FirstCalls
    decide: Decide
    explain: Explain
    legend: Callable[[RoomSpec], str]  # how it gives the floor, in a sentence
    # Its own words for the stops it decides (the others are told alike for every policy).
    stop_words: Mapping[StopReason, StopWording] = field(default_factory=dict)
    next_steps: Mapping[StopReason, tuple[str, ...]] = field(default_factory=dict)
    # It rules on failed calls itself: the shared no_bids and all_agents_failed stops do
    # not apply.
    contains_failures: bool = False
    reads_posted: bool = False  # it reads what others than the agents post (TurnView.unread)
    # Calls cut when their agent is set to only listen while they run.
    cut_on_listen: frozenset[CallKind] = frozenset()
    watched: WatchedState | None = None
    dashboard_state: DashboardState = no_dashboard_state
    # Calls whose answers carry a score the dashboard shows.
    scored: frozenset[CallKind] = frozenset()
    scores_messages: bool = False  # its posted messages carry their winner's score
    # True for an answer of a call that worked whose agent chose to say nothing.
    silent: Callable[[RoomSpec, Answer], bool] = never_silent
    # The people a waiting room owes an answer, in the order asked, from its floor fields.
    people_asked: Callable[[Mapping[str, str]], list[str]] = nobody_asked
    # What if (coordinator/policies/what_if.py): the settings that only change how the
    # recorded answers are decided, so a recorded run replays under other values of them;
    # or why none can (its turns follow what new settings would change).
    replayable: tuple[str, ...] = ()
    not_replayable: str = ""
