"""What if: a recorded run decided again, turn by turn, under other policy settings.

Every turn record holds every answer the turn was decided from, so the room's own policy
code, given the same answers under new settings, tells who would have won: for free, with
no model call. The replay stops at the first turn whose outcome (its winner or its stop)
differs, since the transcript after it would differ and the recorded answers no longer
apply; and at a turn that would need a call the record does not hold (a selector asked
again, another agent's reply).

=====================  =================================================================
rule                   behaviour
=====================  =================================================================
settings               only those its record names ``replayable``; any other of its
                       settings changes what the models are asked: refused
no replayable setting  refused, in the record's words (``not_replayable``): a room whose
                       turns follow tool calls or what people post
view                   each turn's recorded view, with the recent speakers carried from
                       the replayed decisions (a longer recency window sees further back)
divergence             the winner or the stop differs, or the turn needs a new call
floor share            winners over the replayed turns, then and now
=====================  =================================================================
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any

from pydantic import ValidationError

from parley.coordinator import policies
from parley.coordinator.policies.base import Calls, Decision, record_view
from parley.shared.models import CallKind, RoomSpec, StopReason, TurnRecord

# Calls whose answer is the message posted: asked of one agent, that agent takes the floor.
POSTED_CALLS = frozenset({CallKind.SPEAK, CallKind.REPLY, CallKind.PANEL, CallKind.MODERATE})

class NotReplayable(ValueError):
    """The room or a setting cannot be worked out again from the recorded answers."""


@dataclass(frozen=True)
class Outcome:
    """How one turn ends: who takes the floor and whether the run stops.

    ``needs`` names the call the turn would make that the record does not hold (then the
    outcome is only known as far as ``winner``: the agent who would be asked to speak)."""

    winner: str | None
    stop: StopReason | None
    needs: str = ""

    def as_json(self) -> dict[str, Any]:
        """The outcome as the replay's JSON."""
        return {"winner": self.winner, "stop": self.stop.value if self.stop else None,
                "needs_calls": self.needs or None}


@dataclass(frozen=True)
class ReplayedTurn:
    """A recorded turn, then and now, with the scores it was decided on now."""

    turn: int
    then: Outcome
    now: Outcome
    adjusted: dict[str, float] = field(default_factory=dict)

    @property
    def changed(self) -> bool:
        """The outcome differs, or cannot be known without a new call."""
        return self.then != self.now


@dataclass(frozen=True)
class Replay:
    """A run replayed under ``settings`` (name -> (then, now)), up to its first divergence."""

    room: str
    run: int
    policy: str
    settings: dict[str, tuple[Any, Any]]
    turns: list[ReplayedTurn]
    recorded: int  # the run's recorded turns

    @property
    def divergence(self) -> ReplayedTurn | None:
        """The first turn whose outcome differs, if any."""
        return next((turn for turn in self.turns if turn.changed), None)

    def floor_share(self, when: str) -> dict[str, int]:
        """Messages each agent posted over the replayed turns, ``then`` or ``now``."""
        winners = (getattr(turn, when).winner for turn in self.turns)
        return dict(Counter(name for name in winners if name))

    def stop(self, when: str) -> dict[str, Any] | None:
        """The stop over the replayed turns (reason and turn), ``then`` or ``now``; None
        while none is known (the run went on, or would go past what was recorded)."""
        for turn in self.turns:
            outcome: Outcome = getattr(turn, when)
            if outcome.stop is not None:
                return {"reason": outcome.stop.value, "turn": turn.turn}
        return None

    def as_json(self) -> dict[str, Any]:
        """The replay as ``parley replay --json`` and ``GET /rooms/{room}/replay`` give it."""
        first = self.divergence
        return {
            "room": self.room, "run": self.run, "policy": self.policy,
            "settings": {name: {"then": then, "now": now}
                         for name, (then, now) in self.settings.items()},
            "turns": [{"turn": t.turn, "then": t.then.as_json(), "now": t.now.as_json(),
                       "changed": t.changed, "adjusted": t.adjusted} for t in self.turns],
            "summary": {
                "turns_replayed": len(self.turns),
                "turns_recorded": self.recorded,
                "first_divergence": first.turn if first else None,
                "floor_share": {"then": self.floor_share("then"), "now": self.floor_share("now")},
                "stop": {"then": self.stop("then"), "now": self.stop("now")},
            },
        }


def respecified(spec: RoomSpec, changes: dict[str, Any]) -> RoomSpec:
    """The spec with its policy's settings changed; NotReplayable naming the setting or
    the value that cannot be replayed."""
    kind = spec.policy.kind
    record = policies.record_of(spec)
    replayable = record.replayable
    if not replayable:
        raise NotReplayable(record.not_replayable or f"a {kind} room cannot be replayed "
                            "under other settings")
    current = spec.policy.model_dump()
    for name in changes:
        if name in replayable:
            continue
        if name in current and name != "kind":
            raise NotReplayable(f"{name} cannot be replayed: it changes what the models are "
                                "asked, so it would need new model calls (run the room again)")
        raise NotReplayable(f"{name!r} is not a setting a {kind} room can replay; these can: "
                            f"{', '.join(replayable)}")
    try:
        policy = type(spec.policy).model_validate({**current, **changes})
    except ValidationError as error:
        problem = error.errors()[0]
        where = ".".join(str(part) for part in problem["loc"])
        raise NotReplayable(f"{where}: {problem['msg']}") from None
    return spec.model_copy(update={"policy": policy})


def replay_run(room: str, spec: RoomSpec, records: list[TurnRecord],
               changes: dict[str, Any], run: int | None = None) -> Replay:
    """The run's recorded turns (the newest run's by default) decided again under
    ``changes``, up to and including the first that would go otherwise."""
    changed = respecified(spec, changes)
    run = run if run is not None else max((r.run for r in records), default=0)
    turns_of_run = sorted((r for r in records if r.run == run), key=lambda r: r.turn)
    if not turns_of_run:
        raise NotReplayable(f"room {room} has no recorded turns for run {run}" if records
                            else f"room {room} has no recorded turns yet")
    before = spec.policy.model_dump()
    replay = Replay(room, run, spec.policy.kind,
                    {name: (before[name], getattr(changed.policy, name)) for name in changes},
                    [], len(turns_of_run))
    recent = tuple(turns_of_run[0].recent)
    for record in turns_of_run:
        view = replace(record_view(record), recent=recent)
        decision = decided(changed, view, record)
        now = outcome(decision)
        turn = ReplayedTurn(record.turn, Outcome(record.winner, record.stop_reason), now,
                            dict(decision.adjusted) if isinstance(decision, Decision) else {})
        replay.turns.append(turn)
        if turn.changed:
            break
        recent = decision.recent
    return replay


def decided(spec: RoomSpec, view: Any, record: TurnRecord) -> Decision:
    """The turn decided by the room's policy code from its recorded answers: a stop
    before any call, the outcome, or the next calls it would need. A relay turn is not
    the policy's to decide: it goes as recorded under any settings."""
    if record.relay:
        return replace(policies.relayed(record), recent=view.recent)
    first = policies.first_calls(spec, view)
    if isinstance(first, Decision):
        return first
    return policies.decide(spec, view, record.bids)


def outcome(decision: Decision) -> Outcome:
    """A decision's outcome; a decision asking for more calls names them (and, for a
    call to one agent to speak, that agent as who would take the floor)."""
    if decision.next is None:
        return Outcome(decision.winner, decision.stop)
    return Outcome(speaker_asked(decision.next), None, needed(decision.next))


def speaker_asked(calls: Calls) -> str | None:
    """The agent a call asks for the message to post, if it is one agent's."""
    return calls.agents[0] if calls.kind in POSTED_CALLS and len(calls.agents) == 1 else None


def needed(calls: Calls) -> str:
    """The calls the record lacks, in words."""
    return f"a new {calls.kind.value} call to {', '.join(calls.agents)}"


def setting_value(text: str) -> Any:
    """A setting's value as typed (``--set threshold=0.7``, ``?threshold=0.7``): true or
    false, a whole number, a decimal, else the text as it is."""
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            continue
    return text


def parse_settings(pairs: list[str]) -> dict[str, Any]:
    """``name=value`` pairs as settings; NotReplayable naming a pair that is not one, or
    a name given twice."""
    changes: dict[str, Any] = {}
    for pair in pairs:
        name, equals, value = pair.partition("=")
        name = name.strip()
        if not equals or not name or not value.strip():
            raise NotReplayable(f"--set {pair!r} is not name=value (like threshold=0.7)")
        if name in changes:
            raise NotReplayable(f"--set {name} is given twice")
        changes[name] = setting_value(value.strip())
    if not changes:
        raise NotReplayable("nothing to replay: give at least one --set name=value "
                            "(like threshold=0.7)")
    return changes
