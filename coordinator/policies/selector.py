"""The ``selector`` floor policy: an LLM picks who speaks next (seed 002, to the letter).

=====================  =================================================================
rule                   behaviour
=====================  =================================================================
phases                 ask the selector; then ask the chosen participant to speak; post
                       its reply under its name
reading a choice       trimmed, case-insensitive, surrounding quotes, ``*`` and
                       backticks and a final period ignored; spacing inside a name too
invalid choice         not a participant, or the last speaker while ``allow_repeat`` is
                       false: ask the selector once more
still invalid          the next participant after the last speaker in spec order (the
                       first when nobody has spoken); never the last speaker
selector TERMINATE     the run ends, ``terminate``, nothing posted
participant TERMINATE  a reply ending with TERMINATE is posted, then the run ends
cap                    the run ends, ``max_turns``, once ``max_turns`` participant
                       messages were posted
failed reply           posted as ``(<name> could not respond: <error>)``, so the cap
                       still counts it and the others see what happened
answer                 the last substantive reply, trailing TERMINATE removed
=====================  =================================================================
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, cast

from parley.coordinator.policies.base import Calls, Decision, FloorPolicy, TurnView, stopped
from parley.coordinator.policies.common import could_not_respond, usable
from parley.coordinator.policies.lines import OUTCOMES, TurnLine, failure_note
from parley.shared.models import (
    SELECTOR_NAME,
    Answer,
    AnswerStatus,
    CallKind,
    RoomSpec,
    SelectorPolicy,
    StopReason,
    TurnRecord,
    name_key,
)

TERMINATE = "TERMINATE"
SPOKEN = "spoken"  # policy state: participant messages posted in this run
_STRIP = " \t\r\n\"'`*“”‘’"
# The word TERMINATE at the very end, whatever punctuation or markup follows it.
_TRAILING_TERMINATE = re.compile(r"(?<!\w)TERMINATE[\W_]*$")


def read_choice(text: str) -> str:
    """The selector's reply as a bare word: trimmed, unquoted, without a final period."""
    word = text.strip().strip(_STRIP)
    if word.endswith("."):
        word = word[:-1].strip(_STRIP)
    return word


def valid_choice(policy: SelectorPolicy, names: tuple[str, ...], answer: Answer,
                 last: str | None) -> str | None:
    """The participant (or TERMINATE) the answer names, or None when it names nobody the
    rules allow."""
    if answer.status is not AnswerStatus.OK:
        return None
    word = name_key(read_choice(answer.message))
    if word == TERMINATE.casefold():
        return TERMINATE
    chosen = next((name for name in names if name_key(name) == word), None)
    if chosen is not None and chosen == last and not policy.allow_repeat:
        return None
    return chosen


def rotation(names: tuple[str, ...], last: str | None) -> str:
    """The next participant after ``last`` in spec order; the first when nobody spoke."""
    if last not in names:
        return names[0]
    return names[(names.index(last) + 1) % len(names)]


def ends_with_terminate(message: str) -> bool:
    """True when the message's last word is TERMINATE (in capitals, as the prompt asks)."""
    return _TRAILING_TERMINATE.search(message) is not None


def without_terminate(message: str) -> str:
    """The message with a trailing TERMINATE removed."""
    return _TRAILING_TERMINATE.sub("", message).rstrip()


def settings(spec: RoomSpec) -> SelectorPolicy:
    """The room's selector policy settings."""
    return cast(SelectorPolicy, spec.policy)  # the policy table dispatches on the kind


def first_calls(spec: RoomSpec, view: TurnView) -> Calls | Decision:
    """Every turn starts by asking the selector, unless the run already hit its cap."""
    if spoken(view) >= settings(spec).max_turns:
        return stopped(StopReason.MAX_TURNS, view.recent)
    return Calls(CallKind.SELECT, (SELECTOR_NAME,))


def decide(spec: RoomSpec, view: TurnView, answers: list[Answer]) -> Decision:
    """The next phase (a retry, the participant's reply) or the turn's outcome."""
    policy = settings(spec)
    names = spec.agent_names
    last = view.recent[-1] if view.recent else None
    selects = [answer for answer in answers if answer.kind is CallKind.SELECT]
    choice = next((found for found in (valid_choice(policy, names, answer, last)
                                       for answer in selects) if found), None)
    if choice == TERMINATE:
        return stopped(StopReason.TERMINATE, view.recent)
    if choice is None:
        if len(selects) < 2:
            return Decision(recent=view.recent, next=Calls(CallKind.SELECT, (SELECTOR_NAME,)))
        choice = rotation(names, last)
    reply = next((answer for answer in answers
                  if answer.kind is CallKind.SPEAK and answer.agent == choice), None)
    if reply is None:
        return Decision(recent=view.recent, next=Calls(CallKind.SPEAK, (choice,)))
    return post(spec, view, reply)


def post(spec: RoomSpec, view: TurnView, reply: Answer) -> Decision:
    """Post the participant's reply and check the stop rules."""
    worked = usable(reply)
    message = reply.message if worked else could_not_respond(reply)
    count = spoken(view) + 1
    stop = None
    if worked and ends_with_terminate(message):
        stop = StopReason.TERMINATE
    elif count >= settings(spec).max_turns:
        stop = StopReason.MAX_TURNS
    answer = without_terminate(message) if worked else ""
    return Decision(
        winner=reply.agent, message=message, recent=(reply.agent,), stop=stop,
        policy_state={SPOKEN: str(count)}, answer=answer or None,
    )


def spoken(view: TurnView) -> int:
    """Participant messages posted so far in this run."""
    return int(view.policy_state.get(SPOKEN, "0") or 0)


# -- how its turns are told -------------------------------------------------------------

def legend(spec: RoomSpec) -> str:
    """How a selector room gives the floor."""
    return ("Each turn a selector model picks who speaks next, or TERMINATE. Under each "
            "message: the selector's pick.")


def explain(spec: RoomSpec, record: TurnRecord, earlier: Sequence[TurnRecord] = ()) -> TurnLine:
    """The selector's picks (a refused one, the retry), the rotation, TERMINATE, and a
    reply that failed."""
    policy = settings(spec)
    last = record.recent[-1] if record.recent else None
    selects = sorted((b for b in record.bids if b.kind is CallKind.SELECT),
                     key=lambda b: b.phase)
    picks = [pick_of(policy, spec.agent_names, answer, last) for answer in selects]
    notes = [("asked again: " if i else "selector ") + pick["text"]
             for i, pick in enumerate(picks)]
    rotated = bool(picks) and record.winner is not None and not any(p["allowed"] for p in picks)
    if rotated:
        notes.append(f"no allowed pick: the rotation gave {record.winner} the turn")
    for reply in (b for b in record.bids if b.kind is CallKind.SPEAK):
        if not usable(reply):
            notes.append(failure_note(reply))
        elif ends_with_terminate(reply.message):
            notes.append(f"{reply.agent} ended with TERMINATE")
    for pick in picks:
        del pick["text"]
    return TurnLine(record.turn, record.run, "selector", record.winner, (), tuple(notes),
                    {"picks": picks, "rotation": rotated})


def pick_of(policy: SelectorPolicy, names: tuple[str, ...], answer: Answer,
            last: str | None) -> dict[str, Any]:
    """One selector answer: what it said, whether the rules allowed it, and why not."""
    if answer.status is not AnswerStatus.OK:
        why = f"{OUTCOMES[answer.status]} ({answer.error_kind.value or answer.status.value})"
        return {"said": None, "allowed": False, "why": why, "text": why}
    said = read_choice(answer.message)
    chosen = valid_choice(policy, names, answer, last)
    if chosen == TERMINATE:
        return {"said": said, "allowed": True, "why": "", "text": "said TERMINATE"}
    if chosen is not None:
        return {"said": said, "allowed": True, "why": "", "text": f"picked {chosen}"}
    known = any(name_key(name) == name_key(said) for name in names)
    why = "spoke last, and allow_repeat is off" if known else "not a participant"
    return {"said": said, "allowed": False, "why": why, "text": f"picked {said!r} ({why})"}


def terminate_words(spec: RoomSpec, last: TurnRecord | None) -> str:
    """Who said TERMINATE: the participant that ended its message with it, or the selector."""
    who = last.winner if last is not None and last.winner else None
    return f"{who} ended its message with TERMINATE" if who else "the selector said TERMINATE"


def cap_words(spec: RoomSpec, last: TurnRecord | None) -> str:
    """The cap of participant messages, with the room's number."""
    return f"{settings(spec).max_turns} participant messages posted (max_turns)"


POLICY = FloorPolicy(
    kind="selector",
    calls=frozenset({CallKind.SELECT, CallKind.SPEAK}),
    first_calls=first_calls,
    decide=decide,
    explain=explain,
    legend=legend,
    stop_words={StopReason.TERMINATE: terminate_words, StopReason.MAX_TURNS: cap_words},
    replayable=("allow_repeat", "max_turns"),
)
