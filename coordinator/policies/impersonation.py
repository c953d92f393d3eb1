"""Seed 002's impersonation rule, for every policy: an agent speaks only for itself.

=====================  =================================================================
rule                   behaviour
=====================  =================================================================
cut                    a reply is cut at its first line that speaks as another
                       participant (``Name:``, see shared.speakers); what precedes it is
                       kept, stripped
participants           the room's agents and the person who posts the task (``User``);
                       names match as a reader confuses them (shared.speakers'
                       name_skeleton), with spaces and emphasis around
own name               a line under the agent's own name is not cut
nothing left           a reply cut to nothing is empty: it cannot take the floor
recorded               each cut reply's agent and the name it was cut at
=====================  =================================================================

The cut is applied to the answers before any policy sees them, and recomputed on replay from
the recorded (uncut) answers. One matcher serves the whole room (built once per set of
participants), so a turn's cuts cost the length of its replies, whatever the number of
agents.
"""

from __future__ import annotations

from parley.shared.models import SEED_SENDER, Answer, RoomSpec
from parley.shared.speakers import SpeakerLines, speaker_lines


def participants(spec: RoomSpec) -> SpeakerLines:
    """The speaker lines of the room's participants: its agents and the seed sender."""
    return speaker_lines((*spec.agent_names, SEED_SENDER))


def cut_reply(message: str, lines: SpeakerLines, agent: str | None = None
              ) -> tuple[str, str | None]:
    """``message`` up to its first line that speaks as a participant other than ``agent``
    (stripped), and that participant's name; the message unchanged and None when no line
    does."""
    found = lines.first(message, besides=agent)
    if found is None:
        return message, None
    start, name = found
    return message[:start].strip(), name


def cut_answers(spec: RoomSpec, answers: list[Answer]) -> tuple[list[Answer], dict[str, str]]:
    """Every answer with its message cut, and for each cut one its agent -> the name it was
    cut at."""
    lines = participants(spec)
    kept: list[Answer] = []
    cuts: dict[str, str] = {}
    for answer in answers:
        message, name = cut_reply(answer.message, lines, answer.agent)
        if name is None:
            kept.append(answer)
            continue
        kept.append(answer.model_copy(update={"message": message}))
        cuts.setdefault(answer.agent, name)
    return kept, cuts
