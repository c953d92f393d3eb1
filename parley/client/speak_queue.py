"""A mention room's speak queue from the front door: reading it as operators do
(``parley queue``), and changing it (listen, talk, instruct, regenerate).

Changes are queued for the room's coordinator, which applies them with its next fenced
write: nothing here writes the queue itself, so a change never races a turn's commit.
"""

from __future__ import annotations

from typing import Any

from parley.coordinator.policies import mention
from parley.coordinator.policies.base import FloorOp, Posted, TurnView
from parley.shared.models import MentionPolicy, RoomSpec, name_key
from parley.shared.store import RoomStore


class DiscussionOver(ValueError):
    """The discussion used its max_turns: instructions and regenerations are refused."""


def mention_spec(store: RoomStore, room: str) -> RoomSpec:
    """The room's spec; ValueError (one line) unless it is a mention room."""
    _version, spec = store.read_spec(room)
    if not isinstance(spec.policy, MentionPolicy):
        raise ValueError(f"room {room} has the {spec.policy.kind} policy: listen, talk, "
                         "instruct, regenerate and queue need a mention room")
    return spec


def agent_of(spec: RoomSpec, room: str, agent: str) -> str:
    """The room's agent called ``agent`` (case and spacing aside); ValueError if none."""
    found = next((name for name in spec.agent_names if name_key(name) == name_key(agent)), None)
    if found is None:
        raise ValueError(f"room {room} has no agent {agent!r} (its agents: "
                         f"{', '.join(spec.agent_names)})")
    return found


def current_floor(store: RoomStore, room: str, spec: RoomSpec) -> mention.Plan:
    """The floor as the room's next (or open) turn reads it: the committed fields with
    the posts and changes not yet read applied."""
    state = store.read_state(room)
    floor = mention.Floor.read(state.floor_state)
    upto = state.turn_snapshot_seq if state.turn_open else state.last_seq
    posted = tuple(Posted(m.seq, m.sender, m.content)
                   for m in store.read_messages(room, floor.read_seq, upto)
                   if m.sender not in spec.agent_names)
    ops = tuple(FloorOp(c.id, c.op, c.agent, c.text)
                for c in store.read_floor_ops(room, floor.ops_id))
    view = TurnView(turn=state.turn, run=state.run, run_turns=state.run_turns,
                    messages_in_run=state.messages_in_run, recent=tuple(state.recent),
                    snapshot_seq=upto, floor_state=state.floor_state, unread=posted, ops=ops)
    return mention.plan(spec, view)


def speak_queue(store: RoomStore, room: str) -> dict[str, Any]:
    """``{speaking, queue, listening, asked, waiting, over}``: the agent whose turn runs
    (None between turns), the agents owed a turn in order, those that only listen, the
    (agent, person) pairs waiting for a person's answer, whether the room waits for a
    person, and whether the discussion is over."""
    spec = mention_spec(store, room)
    state = store.read_state(room)
    planned = current_floor(store, room, spec)
    speaking = (planned.speaker or None) if state.turn_open else None
    return mention.queue_view(planned.floor, speaking)


def change(store: RoomStore, room: str, op: str, agent: str = "", text: str = "") -> str:
    """Queue a floor change after checking it (one-line ValueError when it is wrong)."""
    spec = mention_spec(store, room)
    if op in ("instruct", "regenerate") and mention.Floor.read(
            store.read_state(room).floor_state).over:
        raise DiscussionOver(f"room {room}'s discussion is over (max_turns): no {op} "
                             "is given")
    if op == "instruct" and not text.strip():
        raise ValueError("an instruction needs text")
    name = agent_of(spec, room, agent) if agent else ""
    return store.floor_op(room, op, name, text)
