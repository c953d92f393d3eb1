"""Random scripted handoff rooms for the failover tests, and the handoff rules checked on
a finished room.

A room has 3-4 agents, a random start and, half the time, a random ``handoffs`` map (so
some transfers are refused). Each agent's calls transfer to a random other agent (text
beside it or not), reply, ask the person, or fail; the run ends waiting for the person or
at max_turns.
"""

from __future__ import annotations

import random
from typing import Any, cast

from parley.coordinator.policies import replay
from parley.coordinator.policies.handoff import active_agent
from parley.shared.models import CallKind, HandoffPolicy, Message, RoomSpec, StopReason, TurnRecord

SLEEP_S = (0.02, 0.3)
ENDINGS = frozenset({StopReason.WAITING_FOR_PERSON, StopReason.MAX_TURNS})


def agent_script(rng: random.Random, name: str, others: list[str], calls: int,
                 first: bool) -> list[dict[str, Any]]:
    """One agent's calls, each a group: a transfer (and its text), a reply, a question to
    the person, or a failure (never the start agent's first call: that would end the run
    all_agents_failed)."""
    script: list[dict[str, Any]] = []
    for call in range(1, calls + 1):
        sleep = round(rng.uniform(*SLEEP_S), 3)
        draw = rng.random()
        if draw < 0.4:
            to = rng.choice(others)
            script.append({"tool_calls": [{"name": f"transfer_to_{to}",
                                           "arguments": {"reason": f"{name} {call}"}}],
                           "sleep": sleep})
            script.append({"content": rng.choice(["", f"{name} hands to {to}"])})
        elif draw < 0.47 and not (first and call == 1):
            script.append({"error": f"{name}'s model is down", "sleep": sleep})
        elif draw < 0.55:
            script.append({"content": f"{name} asks {call}: go ahead?", "sleep": sleep})
        else:
            script.append({"content": f"{name} says {rng.randrange(10**6)}", "sleep": sleep})
    return script


def random_handoff_room(rng: random.Random, queue: str, call_timeout_s: float = 2.0
                        ) -> RoomSpec:
    """A scripted handoff room of 3-4 agents."""
    names = [f"agent{i}" for i in range(rng.randint(3, 4))]
    start = rng.choice(names)
    max_turns = rng.randint(4, 14)
    handoffs = None
    if rng.random() < 0.5:
        handoffs = {name: rng.sample([n for n in names if n != name], rng.randint(0, 2))
                    for name in names}
    return RoomSpec.model_validate({
        "name": "handoff-room",
        "policy": {"kind": "handoff", "start": start, "handoffs": handoffs,
                   "max_turns": max_turns, "max_handoffs_per_run": rng.randint(1, 6),
                   "call_timeout_s": call_timeout_s},
        "agents": [{"name": name, "model": "scripted", "queue": queue,
                    "script": agent_script(rng, name, [n for n in names if n != name],
                                           2 * max_turns, name == start)}
                   for name in names],
    })


def is_handoff_room(spec: RoomSpec) -> bool:
    """True for a room run by the handoff policy."""
    return isinstance(spec.policy, HandoffPolicy)


def check_handoff_rules(spec: RoomSpec, messages: list[Message], records: list[TurnRecord],
                        stop: StopReason | None) -> None:
    """Assert the handoff rules on a finished one-run room: each turn's calls went to the
    agent the floor was with (one or two calls: a refusal asks once more); the floor
    moved only by a turn's handoff, to its target; the turns and handoffs stayed within
    their caps; and the run ended one of its ways."""
    policy = cast(HandoffPolicy, spec.policy)
    assert stop in ENDINGS, stop
    holders = [active_agent(spec, record.floor_state) for record in records]
    targets = [replay(spec, record).floor_state.get("to") for record in records]
    for record, holder in zip(records, holders, strict=True):
        asked = [answer for answer in record.bids if answer.kind is CallKind.HANDOFF]
        assert 1 <= len(asked) <= 2, record
        assert {answer.agent for answer in asked} == {holder}, record
    for holder, target, after in zip(holders, targets, holders[1:], strict=False):
        assert after == (target or holder), (holder, target, after)
    assert len(records) <= policy.max_turns
    assert sum(1 for target in targets if target) <= policy.max_handoffs_per_run
    assert all(m.sender in spec.agent_names for m in messages[1:])
