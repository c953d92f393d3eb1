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
from typing import cast

from parley.coordinator.policies.base import Calls, Decision, TurnView, stopped
from parley.coordinator.policies.common import could_not_respond, usable
from parley.shared.models import (
    SELECTOR_NAME,
    Answer,
    AnswerStatus,
    CallKind,
    RoomSpec,
    SelectorPolicy,
    StopReason,
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
