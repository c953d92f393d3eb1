"""The ``handoff`` floor policy: the active agent keeps the floor until it hands it on (the
swarm shape of AutoGen, the OpenAI Agents SDK and RoomKit).

=====================  =================================================================
rule                   behaviour
=====================  =================================================================
the active agent       ``start`` until a handoff; then the agent handed to, kept in the
                       room's floor fields: it outlives runs and takeovers, and a
                       person's post starts a run with it
each turn              one call to the active agent, its tools offered with one
                       ``transfer_to_<agent>`` (argument ``reason``) per agent it may
                       hand to (``handoffs``; unset, everyone to everyone; an agent not
                       listed hands to nobody)
a transfer             its text, if any, is posted; the handoff (from, to, reason) is
                       recorded and told (``handoff`` event); the target takes the next
                       turn
refused transfer       to an agent not allowed, or past ``max_handoffs_per_run``: the
                       refusal is told to the model once (a second call); its next
                       answer's text is posted, a transfer in it ruled again but not
                       refused twice
no transfer            the reply is posted; a reply that asks a question (ends with
                       ``?``) ends the run ``waiting_for_person``, any other goes on to
                       the next turn with the same agent
failed reply           posted as ``(<name> could not respond: <error>)``
cap                    the run ends ``max_turns`` once ``max_turns`` agent turns were
                       taken
answer                 the last substantive reply
=====================  =================================================================
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import orjson

from parley.coordinator.policies.base import (
    Calls,
    Decision,
    FloorPolicy,
    TurnView,
    WatchedState,
    record_view,
    stopped,
)
from parley.coordinator.policies.common import could_not_respond, usable
from parley.coordinator.policies.lines import TurnLine, failure_note
from parley.shared.models import (
    Answer,
    AnswerStatus,
    CallKind,
    HandoffPolicy,
    RoomSpec,
    StopReason,
    TurnRecord,
    transfer_tool,
)

TURNS = "turns"  # policy state: agent turns taken in this run
HANDOFFS = "handoffs"  # policy state: handoffs made in this run
# Floor fields (the room's, kept across runs): the last handoff, and the chain of them.
FROM, TO, REASON, CHAIN = "from", "to", "reason", "chain"
CHAIN_KEPT = 20  # handoffs the chain keeps, newest last
REASON_CHARS = 200  # a model's reason is cut to this many characters
HANDOFF_EVENT = "handoff"
_TRAILING = " \t\r\n\"'`*_)]”’"


@dataclass(frozen=True)
class Ruling:
    """What the policy makes of an answer's transfer: the agent handed to, or why not."""

    asked: str = ""  # the agent (or tool) the transfer named; "" for no transfer
    target: str | None = None  # the agent handed to, when allowed
    refused: str = ""  # why the transfer is refused


def settings(spec: RoomSpec) -> HandoffPolicy:
    """The room's handoff policy settings."""
    return cast(HandoffPolicy, spec.policy)  # the policy table dispatches on the kind


def active_agent(spec: RoomSpec, floor_state: Mapping[str, str]) -> str:
    """Who holds the floor: the last handoff's target, else ``start``."""
    handed = floor_state.get(TO, "")
    return handed if handed in spec.agent_names else settings(spec).start


def count(view: TurnView, name: str) -> int:
    """One of the policy's per-run counters."""
    return int(view.policy_state.get(name, "0") or 0)


def first_calls(spec: RoomSpec, view: TurnView) -> Calls | Decision:
    """Every turn asks the active agent, unless the run already took its turns."""
    if count(view, TURNS) >= settings(spec).max_turns:
        return stopped(StopReason.MAX_TURNS, view.recent)
    return Calls(CallKind.HANDOFF, (active_agent(spec, view.floor_state),))


def rule(spec: RoomSpec, view: TurnView, answer: Answer) -> Ruling:
    """The answer's transfer: allowed (its target), refused (why), or none."""
    call = answer.policy_call
    if call is None or answer.status is not AnswerStatus.OK:
        return Ruling()
    named = next((name for name in spec.agent_names if transfer_tool(name) == call.name), None)
    if named is None:
        return Ruling(call.name, None, f"{call.name} names no agent of the room")
    policy = settings(spec)
    allowed = policy.targets(answer.agent, spec.agent_names)
    if named not in allowed:
        to = ", ".join(allowed) or "nobody"
        return Ruling(named, None, f"{answer.agent} may hand the conversation to {to} only")
    if count(view, HANDOFFS) >= policy.max_handoffs_per_run:
        return Ruling(named, None, f"this run's {policy.max_handoffs_per_run} handoffs are "
                                   "spent (max_handoffs_per_run)")
    return Ruling(named, named)


def refusal_text(ruling: Ruling) -> str:
    """What the model is told of its refused transfer, for its second call."""
    return (f"Your transfer to {ruling.asked} was refused: {ruling.refused}. Answer the "
            "people yourself, or hand to an agent you may hand to.")


def replies(answers: list[Answer]) -> list[Answer]:
    """The active agent's answers of the turn, by phase."""
    return sorted((a for a in answers if a.kind is CallKind.HANDOFF), key=lambda a: a.phase)


def decide(spec: RoomSpec, view: TurnView, answers: list[Answer]) -> Decision:
    """The refused transfer's second call, or the turn's outcome."""
    asked = replies(answers)
    if not asked:
        return Decision(recent=view.recent,
                        next=Calls(CallKind.HANDOFF, (active_agent(spec, view.floor_state),)))
    reply = asked[-1]
    ruling = rule(spec, view, reply)
    if ruling.refused and len(asked) == 1:
        return Decision(recent=view.recent, next=Calls(
            CallKind.HANDOFF, (reply.agent,), ((reply.agent, refusal_text(ruling)),)))
    return outcome(spec, view, reply, ruling.target)


def reason_of(answer: Answer) -> str:
    """The transfer's reason, on one line and cut (a model's words: untrusted)."""
    reason = answer.policy_call.arguments.get("reason", "") if answer.policy_call else ""
    text = " ".join(str(reason if isinstance(reason, str) else orjson.dumps(reason).decode())
                    .split())
    return text if len(text) <= REASON_CHARS else text[:REASON_CHARS - 3] + "..."


def asks_person(message: str) -> bool:
    """True when the message ends with a question (markup and quotes aside)."""
    return message.rstrip(_TRAILING).endswith("?")


def outcome(spec: RoomSpec, view: TurnView, reply: Answer, target: str | None) -> Decision:
    """Post the reply (its text, or the note of its failure), hand the floor on when
    ``target`` is set, and check the stop rules."""
    turns = count(view, TURNS) + 1
    worked = usable(reply)
    message = reply.message if worked else ("" if reply.status is AnswerStatus.OK
                                            else could_not_respond(reply))
    stop = None
    if target is None and worked and asks_person(message):
        stop = StopReason.WAITING_FOR_PERSON
    elif turns >= settings(spec).max_turns:
        stop = StopReason.MAX_TURNS
    policy_state = {TURNS: str(turns)}
    floor_state: dict[str, str] = {}
    if target is not None:
        policy_state[HANDOFFS] = str(count(view, HANDOFFS) + 1)
        reason = reason_of(reply)
        chain = [*read_chain(view.floor_state), [view.run, reply.agent, target, reason]]
        floor_state = {FROM: reply.agent, TO: target, REASON: reason,
                       CHAIN: orjson.dumps(chain[-CHAIN_KEPT:]).decode()}
    return Decision(
        winner=reply.agent if message else None, message=message,
        recent=(reply.agent,) if message else view.recent, stop=stop,
        policy_state=policy_state, floor_state=floor_state,
        answer=message if worked else None,
    )


def read_chain(floor_state: Mapping[str, str]) -> list[list[Any]]:
    """The room's handoffs, oldest first: [run, from, to, reason] each."""
    chain = orjson.loads(floor_state.get(CHAIN) or "[]")
    return chain if isinstance(chain, list) else []


# -- how its turns are told -------------------------------------------------------------

def legend(spec: RoomSpec) -> str:
    """How a handoff room gives the floor."""
    return ("The active agent keeps the floor, turn after turn, until it hands it on with "
            "a transfer_to_<agent> call. Under each message: who handed to whom, and why.")


def explain(spec: RoomSpec, record: TurnRecord, earlier: Sequence[TurnRecord] = ()) -> TurnLine:
    """Who held the floor, a refused transfer, the handoff and its reason, a question to
    a person, and a reply that failed."""
    view = record_view(record)
    notes: list[str] = []
    refused: list[dict[str, str]] = []
    handoff: dict[str, str] | None = None
    asked = replies(record.bids)
    for i, reply in enumerate(asked):
        ruling = rule(spec, view, reply)
        if ruling.refused and i < len(asked) - 1:
            refused.append({"agent": reply.agent, "to": ruling.asked, "why": ruling.refused})
            notes.append(f"{reply.agent} tried to hand to {ruling.asked}: refused "
                         f"({ruling.refused})")
        elif ruling.refused:
            notes.append(f"{reply.agent} tried to hand to {ruling.asked} again: refused, its "
                         "text posted without the transfer")
        elif ruling.target is not None:
            handoff = {"from": reply.agent, "to": ruling.target, "reason": reason_of(reply)}
            why = f": {handoff['reason']}" if handoff["reason"] else ""
            notes.append(f"{reply.agent} handed to {ruling.target}{why}")
    last = asked[-1] if asked else None
    if last is not None and not usable(last) and last.status is not AnswerStatus.OK:
        notes.append(failure_note(last))
    if record.stop_reason is StopReason.WAITING_FOR_PERSON:
        notes.append(f"{record.winner} asked a question: waiting for a person")
    active = active_agent(spec, record.floor_state)
    return TurnLine(record.turn, record.run, "handoff", record.winner, (), tuple(notes),
                    {"active": active, "handoff": handoff, "refused": refused})


def waiting_words(spec: RoomSpec, last: TurnRecord | None) -> str:
    """Who asked the person."""
    who = last.winner if last is not None and last.winner else "the active agent"
    return f"{who} asked a question: the room waits for a person's answer"


def cap_words(spec: RoomSpec, last: TurnRecord | None) -> str:
    """The cap of agent turns, with the room's number."""
    return f"{settings(spec).max_turns} agent turns taken (max_turns)"


def handoff_chain(spec: RoomSpec, fields: Mapping[str, str],
                  ended: StopReason | None = None) -> dict[str, Any]:
    """The active agent and the room's handoffs, and the line the page shows of them
    (``fields``: the room-scoped ones as ``floor:<field>``)."""
    floor = {name.removeprefix("floor:"): value for name, value in fields.items()
             if name.startswith("floor:")}
    active = active_agent(spec, floor)
    chain = [{"run": run, "from": source, "to": target, "reason": reason}
             for run, source, target, reason in read_chain(floor)]
    note = f"active: {active}"
    if chain:
        note += " · handoffs: " + " → ".join(
            [chain[0]["from"], *(f"{hop['to']}" + (f" ({hop['reason']})" if hop["reason"]
                                                  else "") for hop in chain)])
    return {"active": active, "chain": chain, "note": note}


POLICY = FloorPolicy(
    kind="handoff",
    calls=frozenset({CallKind.HANDOFF}),
    first_calls=first_calls,
    decide=decide,
    explain=explain,
    legend=legend,
    stop_words={StopReason.WAITING_FOR_PERSON: waiting_words,
                StopReason.MAX_TURNS: cap_words},
    next_steps={StopReason.WAITING_FOR_PERSON: (
        'answer: parley post {room} --as NAME "..." (the active agent takes it)',)},
    # The last handoff as followers see it (the handoff event's fields).
    watched=WatchedState(HANDOFF_EVENT, ((FROM, ""), (TO, ""), (REASON, ""))),
    dashboard_state=handoff_chain,
    not_replayable="a handoff room's handoffs cannot be replayed under other settings: "
                   "each one is the active agent's own tool call, which new settings would "
                   "change",
)
