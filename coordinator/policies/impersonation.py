"""Seed 002's impersonation rule, for every policy: an agent speaks only for itself.

=====================  =================================================================
rule                   behaviour
=====================  =================================================================
cut                    a reply is cut at its first line that speaks as another
                       participant (``Name:``, see shared.speakers); what precedes it is
                       kept, stripped
participants           the room's agents and the person who posts the task (``User``);
                       names match case-insensitively, with spaces and emphasis around
own name               a line under the agent's own name is not cut
nothing left           a reply cut to nothing is empty: it cannot take the floor
recorded               each cut reply's agent and the name it was cut at
=====================  =================================================================

The cut is applied to the answers before any policy sees them, and recomputed on replay from
the recorded (uncut) answers.
"""

from __future__ import annotations

from parley.shared.models import SEED_SENDER, Answer, RoomSpec
from parley.shared.speakers import first_speaker_line


def other_participants(spec: RoomSpec, agent: str) -> list[str]:
    """Everyone ``agent`` must not speak for: the room's other agents and the seed sender."""
    return [name for name in spec.agent_names if name != agent] + [SEED_SENDER]


def cut_reply(message: str, others: list[str]) -> tuple[str, str | None]:
    """``message`` up to its first line that speaks as one of ``others`` (stripped), and
    that participant's name; the message unchanged and None when no line does."""
    found = first_speaker_line(message, others)
    if found is None:
        return message, None
    start, name = found
    return message[:start].strip(), name


def cut_answers(spec: RoomSpec, answers: list[Answer]) -> tuple[list[Answer], dict[str, str]]:
    """Every answer with its message cut, and for each cut one its agent -> the name it was
    cut at."""
    kept: list[Answer] = []
    cuts: dict[str, str] = {}
    for answer in answers:
        message, name = cut_reply(answer.message, other_participants(spec, answer.agent))
        if name is None:
            kept.append(answer)
            continue
        kept.append(answer.model_copy(update={"message": message}))
        cuts.setdefault(answer.agent, name)
    return kept, cuts
