"""Random scripted round-table rooms (seed 004) for the failover tests, and the
round-table's own rules checked on a finished room.

A room seats 2-4 panelists and a moderator listed anywhere among them, for 1-3 rounds.
Panelists answer random text, sometimes failing, speaking for another participant (cut),
or saying nothing but another's line (an empty reply); the moderator gives a verdict, or
fails (the run ends ``moderator_failed``).
"""

from __future__ import annotations

import random
from typing import Any, cast

from parley.shared.models import (
    CallKind,
    Message,
    RoomSpec,
    RoundtablePolicy,
    StopReason,
    TurnRecord,
)

# One call a turn: longer sleeps than the other rooms' keep a round-table running for
# seconds, long enough for kills to land in it.
SLEEP_S = (0.05, 0.4)
MODERATOR = "moderator"
ENDINGS = ("verdict", "verdict", "verdict", "moderator_failed")


def panelist_script(rng: random.Random, name: str, others: list[str], rounds: int
                    ) -> list[dict[str, Any]]:
    """One panelist's turns, one per round: random text, now and then a failure, a reply
    cut where it speaks for someone else, or one that is nothing but another's line."""
    script: list[dict[str, Any]] = []
    for call in range(1, rounds + 1):
        text = f"{name} in round {call}: {rng.randrange(10**6)}"
        draw = rng.random()
        if draw < 0.08:
            entry: dict[str, Any] = {"error": f"{name}'s model is down"}
        elif draw < 0.16:
            entry = {"content": f"{text}\n{rng.choice(others)}: I agree, and add {call}."}
        elif draw < 0.2:
            entry = {"content": f"{rng.choice(others)}: you are all wrong."}
        else:
            entry = {"content": text}
        script.append({**entry, "sleep": round(rng.uniform(*SLEEP_S), 3)})
    return script


def random_roundtable_room(rng: random.Random, queue: str, call_timeout_s: float = 2.0
                           ) -> RoomSpec:
    """A scripted round-table of 2-4 panelists over 1-3 rounds, ending with the
    moderator's verdict or its failure."""
    panel = [f"agent{i}" for i in range(rng.randint(2, 4))]
    rounds = rng.randint(1, 3)
    seated = list(panel)
    seated.insert(rng.randint(0, len(panel)), MODERATOR)
    ending = rng.choice(ENDINGS)
    verdict = (f"Verdict {rng.randrange(10**6)}: the panel's strongest case wins."
               if ending == "verdict" else None)
    moderator_script = [{"content": verdict} if verdict else {"error": "the moderator is down"}]

    def script(name: str) -> list[dict[str, Any]]:
        if name == MODERATOR:
            return [{**entry, "sleep": round(rng.uniform(*SLEEP_S), 3)}
                    for entry in moderator_script]
        return panelist_script(rng, name, [n for n in seated if n != name], rounds)

    return RoomSpec.model_validate({
        "name": "roundtable-room",
        "policy": {"kind": "roundtable", "moderator": MODERATOR, "rounds": rounds,
                   "call_timeout_s": call_timeout_s},
        "agents": [{"name": name, "role": f"role {name}", "model": "scripted", "queue": queue,
                    "script": script(name)} for name in seated],
    })


def is_roundtable_room(spec: RoomSpec) -> bool:
    """True for a room run by the roundtable policy."""
    return isinstance(spec.policy, RoundtablePolicy)


def check_roundtable_rules(spec: RoomSpec, messages: list[Message], records: list[TurnRecord],
                           stop: StopReason | None) -> None:
    """Assert the round-table's rules on a finished one-run room with no people posting:
    every turn made one call, to the panelists in spec order ``rounds`` times over and
    then the moderator; each panelist turn posted under the panelist's name (its reply or
    a note), the position counting them; the run ended with the verdict (the moderator's
    post, last) or the moderator's failure (nothing posted)."""
    policy = cast(RoundtablePolicy, spec.policy)
    panel = [name for name in spec.agent_names if name != policy.moderator]
    order = panel * policy.rounds
    called = [(answer.kind, answer.agent) for record in records for answer in record.bids]
    assert called == [(CallKind.PANEL, name) for name in order] + [
        (CallKind.MODERATE, policy.moderator)], called
    assert [int(record.policy_state.get("spoken", "0")) for record in records] == list(
        range(len(records))), [record.policy_state for record in records]
    posted = [message.sender for message in messages[1:]]
    assert stop in (StopReason.VERDICT, StopReason.MODERATOR_FAILED), stop
    verdict = [policy.moderator] if stop is StopReason.VERDICT else []
    assert posted == order + verdict, posted
    assert records[-1].winner == (policy.moderator if verdict else None)
