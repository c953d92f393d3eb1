"""How a turn and a stop are told, in one place: why each turn went as it did, in one
compact line under the message a turn posted (``parley run``, ``parley demo``), the same
facts as fields (``--json``), a turn's heading and its calls' outcomes (``parley turns``,
the API, the dashboard), and why a run ended. Pure: a function of the turn's record and
the room's spec, so what is shown is what was recorded, for every policy. Every turn's
line also tells the tool calls its answers made, whatever its policy
(``Investigator used search_logs(service=checkout) → 12 lines``), and so does the
transcript under each message written from them.

Each policy's record (coordinator/policies/) tells its own turns, gives its legend and
words the stops it decides; this module words the stops every policy shares and says what
to do next. A kind without a record fails loudly (``UnknownPolicy``).
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from parley.client.results import TurnInFlight
from parley.coordinator.policies import record_of
from parley.coordinator.policies.lines import ShownAnswer, TurnLine
from parley.shared.logs import one_line
from parley.shared.models import Answer, RoomSpec, StopReason, TurnRecord
from parley.shared.tasks import SHORT_ID
from parley.views.tool_calls import tool_call_line, turn_tool_calls

__all__ = ["ShownAnswer", "TurnLine", "is_silent_answer", "legend", "next_steps",
           "people_asked", "stop_line", "stop_words", "tool_call_line", "turn_line"]

def turn_line(spec: RoomSpec, record: TurnRecord, earlier: Sequence[TurnRecord] = ()
              ) -> TurnLine:
    """The line of a recorded turn of a room of ``spec``, as its policy tells it, then the
    tool calls its answers made; ``earlier``, the turns before it (oldest first), may tell
    why it went so (who queued its speaker)."""
    line = relay_line(spec, record) if record.relay else record_of(spec).explain(
        spec, record, earlier)
    return replace(line, tools=tuple(tool_call_line(call) for call in turn_tool_calls(record)))


def relay_line(spec: RoomSpec, record: TurnRecord) -> TurnLine:
    """A relay turn's line: the agent said a background task's result in a turn the
    coordinator gave it, its policy not asked (coordinator/relay.py)."""
    short = record.relay[:SHORT_ID]
    return TurnLine(record.turn, record.run, spec.policy.kind, record.winner, (),
                    (f"relayed the result of background task {short}, in a turn of its own",),
                    {"role": "relay", "task_id": record.relay})


def is_silent_answer(spec: RoomSpec, answer: Answer) -> bool:
    """True when the call worked and its agent chose to say nothing, as the room's policy
    has it (a bid or intent with no message, a discussion turn answering the silent
    token)."""
    return record_of(spec).silent(spec, answer)


def legend(spec: RoomSpec) -> str:
    """How the room's policy gives the floor, in a sentence, for a first-time reader."""
    return record_of(spec).legend(spec)


# -- the run's end --------------------------------------------------------------------

def stop_words(spec: RoomSpec, reason: StopReason, detail: str = "",
               last: TurnRecord | None = None) -> str:
    """Why the run ended, in words: the policy's own for the stops it decides (with the
    spec's numbers), else the stop's words and its detail."""
    own = record_of(spec).stop_words.get(reason)
    if own is not None:
        return own(spec, last)
    words = STOP_WORDS[reason]
    if reason in DETAIL_SAYS_ALL:
        return detail or words
    return f"{words}: {detail}" if detail else words


# The words of stops whose numbers are not the spec's.
STOP_WORDS = {
    StopReason.LULL: "no bid cleared the threshold",
    StopReason.MAX_MESSAGES: "the run posted its max_messages",
    StopReason.NO_BIDS: "no agent answered in time: is a parley worker running?",
    StopReason.ALL_FAILED: "every agent's call failed on the run's first turn",
    StopReason.TERMINATE: "TERMINATE was said",
    StopReason.MAX_TURNS: "the run reached max_turns",
    StopReason.VERDICT: "the moderator gave the verdict",
    StopReason.MODERATOR_FAILED: "the moderator could not give a verdict",
    StopReason.ROOM_ERROR: "every take of the room failed with an error",
    StopReason.CANCELLED: "the run was cancelled",
    StopReason.BUDGET: "a spending limit was reached",
    StopReason.WAITING_FOR_PERSON: "waiting for a person's answer",
    StopReason.QUEUE_EMPTY: "nobody is queued to speak",
    StopReason.MAX_DEPTH: "an agent's turn would pass max_depth",
}
# Stops whose detail is a whole sentence already: it replaces the words.
DETAIL_SAYS_ALL = frozenset({StopReason.NO_BIDS, StopReason.BUDGET, StopReason.MAX_DEPTH})


def stop_line(spec: RoomSpec, reason: StopReason | None, detail: str = "",
              last: TurnRecord | None = None) -> str:
    """``lull: no bid cleared the 0.5 threshold``: the stop reason's code, then words."""
    if reason is None:
        return "-"
    return f"{reason.value}: {stop_words(spec, reason, detail, last)}"


# What to do next, by stop: ``{room}`` is the room's id.
NEW_RUN = 'post again to start a new run (parley post {room} "...")'
DETAILS = "see every turn with parley turns {room}"
NEXT_STEPS: dict[StopReason, tuple[str, ...]] = {
    StopReason.LULL: (NEW_RUN, DETAILS),
    StopReason.MAX_MESSAGES: (NEW_RUN, DETAILS),
    StopReason.TERMINATE: (NEW_RUN, DETAILS),
    StopReason.MAX_TURNS: (NEW_RUN, DETAILS),
    StopReason.VERDICT: (NEW_RUN,),
    StopReason.NO_BIDS: ("start one: parley worker", DETAILS),
    StopReason.ALL_FAILED: ("fix the agents as above, then post again", DETAILS),
    StopReason.MODERATOR_FAILED: ("fix the moderator as above, then post again", DETAILS),
    StopReason.ROOM_ERROR: ("the last error: parley rooms show {room}",),
    StopReason.BUDGET: ("what the room spent: parley rooms show {room}",),
    StopReason.WAITING_FOR_PERSON: ('answer: parley post {room} --as NAME "..."',),
    StopReason.QUEUE_EMPTY: ('name an agent: parley post {room} "@agent ..."',),
    StopReason.MAX_DEPTH: ('post again to start a new chain: parley post {room} "..."',),
    StopReason.CANCELLED: (),
}


def next_steps(spec: RoomSpec, reason: StopReason | None, room: str,
               asked: Sequence[str] = ()) -> list[str]:
    """What to do after a run that ended for ``reason``, in room ``room`` (the policy's
    own steps first; ``asked``: the people a waiting room owes an answer, in the order
    asked)."""
    if reason is None:
        return []
    if reason is StopReason.WAITING_FOR_PERSON and asked:
        also = f" (also asked: {', '.join(asked[1:])})" if asked[1:] else ""
        return [f'answer: parley post {room} --as {shlex.quote(asked[0])} "..."{also}']
    steps = record_of(spec).next_steps.get(reason)
    if steps is None:
        steps = NEXT_STEPS[reason]
    return [step.format(room=room) for step in steps]


def people_asked(spec: RoomSpec, floor_state: dict[str, str]) -> list[str]:
    """The people a room with these floor fields owes an answer, in the order asked (none
    for a policy that asks nobody)."""
    return record_of(spec).people_asked(floor_state)


# -- a turn's heading, a call's outcome, a stop's code ----------------------------------

def decided_turn_line(turn: TurnRecord) -> str:
    """``turn 3 · run 1 · agent1 spoke (0.90) · 4.20 ms``, and the run's end if it stopped."""
    parts = [f"turn {turn.turn}", f"run {turn.run}"]
    if turn.winner is not None:
        score = "" if turn.score is None else f" ({turn.score:.2f})"
        parts.append(f"{turn.winner} spoke{score}")
    else:
        parts.append("nobody spoke")
    if turn.stop_reason is not None:
        parts.append(f"run ended: {stop_code(turn.stop_reason, one_line(turn.stop_detail, 200))}")
    ms = turn_ms(turn)
    if ms is not None:
        parts.append(f"{ms:.2f} ms")
    return " · ".join(parts)


def open_turn_line(turn: TurnInFlight) -> str:
    """``turn 6 · run 2 · open · phase 0 (bid) · answered 2 of 4 · pending: agent2, agent3``."""
    kind = f" ({turn.kind.value})" if turn.kind else ""
    pending = ", ".join(turn.pending) or "nobody"
    return (f"turn {turn.turn} · run {turn.run} · open · phase {turn.phase}{kind} · "
            f"answered {len(turn.answered)} of {len(turn.agents)} · pending: {pending}")


def turn_ms(turn: TurnRecord) -> float | None:
    """How long the turn took, from its opening to its decision (None: not recorded)."""
    if not (turn.opened_at and turn.decided_at):
        return None
    return round((turn.decided_at - turn.opened_at) * 1000, 2)


def call_outcome(answer: Answer) -> dict[str, Any]:
    """How a call ended, as every JSON document gives it: its status, and the kind and text
    of its error (None when it has none)."""
    return {"status": answer.status.value, "error_kind": answer.error_kind.value or None,
            "error": answer.error or None}


def stop_code(reason: StopReason | None, detail: str = "") -> str:
    """``lull: no bid cleared the threshold``: the stop reason's code (``-`` when there is
    none) and its detail as recorded, where a line has no room for words."""
    code = reason.value if reason is not None else "-"
    return f"{code}: {detail}" if detail else code
