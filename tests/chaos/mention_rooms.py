"""Random scripted discussion rooms (seed 003's mention policy) for the failover tests,
and the discussion's own rules checked on a finished room.

A room has 3-4 agents, ``everyone`` all of them in a random order, and the task's poster
(``User``) as its person. Each agent's answers name other agents at random, sometimes ask
the person (``@User``), stay silent, or fail; the run ends waiting for the person, with
an empty queue, at max_depth or at max_turns.
"""

from __future__ import annotations

import random
from typing import Any, cast

from parley.shared.models import CallKind, MentionPolicy, Message, RoomSpec, StopReason, TurnRecord

SLEEP_S = (0.02, 0.3)
ENDINGS = frozenset({StopReason.WAITING_FOR_PERSON, StopReason.QUEUE_EMPTY,
                     StopReason.MAX_DEPTH, StopReason.MAX_TURNS})


def agent_script(rng: random.Random, name: str, others: list[str], calls: int
                 ) -> list[dict[str, Any]]:
    """One agent's answers: text naming 0-2 others, now and then asking the person,
    silence, or a failure."""
    script: list[dict[str, Any]] = []
    for call in range(1, calls + 1):
        named = " ".join(f"@{other}" for other in rng.sample(others, rng.randint(0, 2)))
        draw = rng.random()
        if draw < 0.06:
            entry: dict[str, Any] = {"error": f"{name}'s model is down"}
        elif draw < 0.18:
            entry = {"content": "(silent)"}
        elif draw < 0.26:
            entry = {"content": f"@User {name} asks {call}: go ahead? {named}"}
        else:
            entry = {"content": f"{name} says {rng.randrange(10**6)} {named}".strip()}
        script.append({**entry, "sleep": round(rng.uniform(*SLEEP_S), 3)})
    return script


def random_mention_room(rng: random.Random, queue: str, call_timeout_s: float = 2.0
                        ) -> RoomSpec:
    """A scripted discussion of 3-4 agents, ending one of the four ways a run ends."""
    names = [f"agent{i}" for i in range(rng.randint(3, 4))]
    everyone = rng.sample(names, len(names))
    max_turns = rng.randint(4, 16)
    return RoomSpec.model_validate({
        "name": "mention-room",
        "policy": {"kind": "mention", "everyone": everyone, "max_depth": rng.randint(3, 12),
                   "max_turns": max_turns, "call_timeout_s": call_timeout_s},
        "agents": [{"name": name, "role": f"role {name}", "model": "scripted", "queue": queue,
                    "script": agent_script(rng, name, [n for n in names if n != name],
                                           max_turns)} for name in names],
    })


def is_mention_room(spec: RoomSpec) -> bool:
    """True for a room run by the mention policy."""
    return isinstance(spec.policy, MentionPolicy)


def check_mention_rules(spec: RoomSpec, messages: list[Message], records: list[TurnRecord],
                        stop: StopReason | None) -> None:
    """Assert the discussion's rules on a finished one-run room: one call a turn, to an
    agent; a silent answer posted nothing; no agent took two turns in a row while the
    queue held another (checked on the record's floor); the turns stayed within
    max_turns; and the run ended one of the four ways."""
    policy = cast(MentionPolicy, spec.policy)
    assert stop in ENDINGS, stop
    for record in records:
        speaks = [answer for answer in record.bids if answer.kind is CallKind.DISCUSS]
        assert len(speaks) == 1, record
        (answer,) = speaks
        if answer.message.strip() == "(silent)":
            assert record.winner is None, record
    assert policy.max_turns is not None and len(records) <= policy.max_turns
    spoken = [m.sender for m in messages[1:]]
    assert all(sender in spec.agent_names for sender in spoken), spoken
