"""Random scripted selector rooms (seed 002) for the failover tests, and the selector's own
rules checked on a finished room.

A room's selector plays a random script of picks: participants' names in the shapes models
write them, unknown names, failed calls, the last speaker again (back to back), and now and
then TERMINATE; its participants answer random text, sometimes speaking for another
participant (cut), failing, or ending with TERMINATE. Each room ends one of three ways, by
design: the selector's TERMINATE, a participant's TERMINATE, or the ``max_turns`` cap (a
script that runs out leaves the rotation to choose until the cap).
"""

from __future__ import annotations

import random
from typing import Any, cast

from parley.shared.models import CallKind, Message, RoomSpec, SelectorPolicy, StopReason, TurnRecord

SLEEP_S = (0.01, 0.1)
INVALID_PICKS = ("nobody", "accountant", "agent9", "agent0 and agent1", "?", "")
ENDINGS = ("selector", "participant", "cap")


def pick_shape(rng: random.Random, name: str) -> str:
    """A participant's name as a model may write it (each shape the policy must read)."""
    return rng.choice((name, name, f"**{name}**", f"{name.capitalize()}.", f'"{name}"',
                       f" {name.upper()} ", f"`{name}`"))


def selector_script(rng: random.Random, names: list[str], length: int,
                    terminate_at: int | None) -> list[dict[str, Any]]:
    """``length`` random selector replies, with TERMINATE at ``terminate_at`` if given."""
    script: list[dict[str, Any]] = []
    previous = rng.choice(names)
    for index in range(length):
        draw = rng.random()
        if index == terminate_at:
            entry: dict[str, Any] = {"content": rng.choice(("TERMINATE", "terminate.", "**TERMINATE**"))}
        elif draw < 0.12:
            entry = {"content": rng.choice(INVALID_PICKS) or " "}
        elif draw < 0.18:
            entry = {"error": "selector overloaded"}
        elif draw < 0.35:
            entry = {"content": pick_shape(rng, previous)}  # likely back to back
        else:
            previous = rng.choice(names)
            entry = {"content": pick_shape(rng, previous)}
        script.append({**entry, "sleep": round(rng.uniform(*SLEEP_S), 3)})
    return script


def participant_script(rng: random.Random, name: str, others: list[str], length: int,
                       terminates: bool) -> list[dict[str, Any]]:
    """``length`` random replies of one participant. Its first reply never fails, so a
    run's first turn always has an answer that worked."""
    script: list[dict[str, Any]] = []
    for call in range(1, length + 1):
        text = f"{name} on call {call}: {rng.randrange(10**6)}"
        draw = rng.random()
        if call > 1 and draw < 0.05:
            entry: dict[str, Any] = {"error": f"{name}'s model is down"}
        elif draw < 0.12:
            entry = {"content": f"{text}\n{rng.choice(others)}: I agree, and add {call}."}
        elif terminates and call > 1 and draw < 0.22:
            entry = {"content": f"{text}. TERMINATE"}
        else:
            entry = {"content": text}
        script.append({**entry, "sleep": round(rng.uniform(*SLEEP_S), 3)})
    return script


def random_selector_room(rng: random.Random, queue: str, turns: int, agents: int = 3,
                         call_timeout_s: float = 2.0) -> RoomSpec:
    """A scripted selector room of about ``turns`` participant turns (``max_turns`` caps
    it), ending by the selector's TERMINATE, a participant's, or the cap."""
    names = [f"agent{i}" for i in range(agents)]
    ending = rng.choice(ENDINGS)
    # A turn asks the selector once or twice: a script of turns..2*turns picks may run out.
    length = rng.randint(turns, 2 * turns)
    terminate_at = rng.randint(length // 2, length - 1) if ending == "selector" else None
    return RoomSpec.model_validate({
        "name": "selector-room",
        "policy": {
            "kind": "selector", "call_timeout_s": call_timeout_s,
            "max_turns": turns if ending == "cap" else turns + 5,
            "allow_repeat": rng.random() < 0.2,
            "selector": {"model": "scripted", "queue": queue,
                         "script": selector_script(rng, names, length, terminate_at)},
        },
        "agents": [{"name": name, "role": f"role {name}", "model": "scripted", "queue": queue,
                    "script": participant_script(rng, name, [n for n in names if n != name],
                                                 turns + 6, ending == "participant")}
                   for name in names],
    })


def is_selector_room(spec: RoomSpec) -> bool:
    """True for a room run by the selector policy."""
    return isinstance(spec.policy, SelectorPolicy)


def check_selector_rules(spec: RoomSpec, messages: list[Message], records: list[TurnRecord],
                         stop: StopReason | None) -> None:
    """Assert the selector's rules on a finished one-run room: every turn asked the
    selector first (once, or twice after an invalid pick) and then at most the one
    participant it posted; no participant spoke twice in a row unless allowed; no more than
    ``max_turns`` participant messages; the run ended by TERMINATE or the cap."""
    policy = cast(SelectorPolicy, spec.policy)
    for record in records:
        kinds = [answer.kind for answer in record.bids]
        selects = kinds.count(CallKind.SELECT)
        assert kinds[:selects] == [CallKind.SELECT] * selects and 1 <= selects <= 2, (
            record.turn, kinds)
        assert [answer.phase for answer in record.bids] == list(range(len(record.bids))), (
            record.turn, record.bids)
        speakers = [answer.agent for answer in record.bids if answer.kind is CallKind.SPEAK]
        assert speakers == ([record.winner] if record.winner else []), (record.turn, speakers)
    posted = [message.sender for message in messages[1:]]
    assert len(posted) <= policy.max_turns
    if not policy.allow_repeat:
        assert all(a != b for a, b in zip(posted, posted[1:], strict=False)), posted
    assert stop in (StopReason.TERMINATE, StopReason.MAX_TURNS), stop
    if stop is StopReason.MAX_TURNS:
        assert len(posted) == policy.max_turns
