"""The ``roundtable`` floor policy: a fixed panel debates, then a moderator gives the
verdict (seed 004).

=====================  =================================================================
rule                   behaviour
=====================  =================================================================
panel                  every agent but the moderator, in spec order
turn                   one call: the next panelist (``panel``); once each panelist has
                       spoken ``rounds`` times, the moderator (``moderate``)
position               ``policy:spoken``, the panelist turns posted in this run: panelist
                       number ``spoken mod panel size`` speaks next
panelist reply         posted under its name (cut where it speaks for someone else)
failed panelist        an error, a timeout, an empty or unreadable reply: posted as
                       ``(<name> could not respond: <error>)`` and a ``panelist_failed``
                       line logged with the error's kind (``empty_reply`` when the call
                       worked but left nothing); the debate goes on
verdict                the moderator's reply is posted under its name and is the run's
                       answer; the run ends, ``verdict``
failed moderator       nothing posted; the run ends ``failed``, ``moderator_failed``,
                       the error and its likely fix as the detail
people posting         their messages join the transcript at the next turn boundary; the
                       panel order does not change
shared stops           none: a panelist's failure never ends the run (``no_bids`` and
                       ``all_agents_failed`` do not apply), the moderator's always does
=====================  =================================================================
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

from parley.coordinator.policies.base import Calls, Decision, FloorPolicy, LogLine, TurnView
from parley.coordinator.policies.common import (
    could_not_respond,
    failure_line,
    failure_reason,
    usable,
)
from parley.coordinator.policies.lines import TurnLine, failure_note
from parley.shared.models import (
    Answer,
    AnswerStatus,
    CallKind,
    ErrorKind,
    RoomSpec,
    RoundtablePolicy,
    StopReason,
    TurnRecord,
)

SPOKEN = "spoken"  # policy state: panelist turns posted in this run
PANELIST_FAILED = "panelist_failed"  # the event logged for a panelist's failed call
EMPTY_REPLY = "empty_reply"  # its error kind when the call worked but left nothing to post


def settings(spec: RoomSpec) -> RoundtablePolicy:
    """The room's round-table policy settings."""
    return cast(RoundtablePolicy, spec.policy)  # the policy table dispatches on the kind


def panelists(spec: RoomSpec) -> tuple[str, ...]:
    """The panel in speaking order: every agent except the moderator."""
    moderator = settings(spec).moderator
    return tuple(name for name in spec.agent_names if name != moderator)


def spoken(view: TurnView) -> int:
    """Panelist turns posted so far in this run."""
    return int(view.policy_state.get(SPOKEN, "0") or 0)


def turn_calls(spec: RoomSpec, view: TurnView) -> Calls:
    """The one call this turn makes: the next panelist's, or the moderator's."""
    panel = panelists(spec)
    done = spoken(view)
    if done < settings(spec).rounds * len(panel):
        return Calls(CallKind.PANEL, (panel[done % len(panel)],))
    return Calls(CallKind.MODERATE, (settings(spec).moderator,))


def first_calls(spec: RoomSpec, view: TurnView) -> Calls | Decision:
    """Every turn is one call: a run ends with its verdict, so there is always a next."""
    return turn_calls(spec, view)


def decide(spec: RoomSpec, view: TurnView, answers: list[Answer]) -> Decision:
    """Post the panelist's turn, or the moderator's verdict; a failed moderator ends the
    run failed."""
    calls = turn_calls(spec, view)
    answer = next((found for found in answers
                   if found.kind is calls.kind and found.agent == calls.agents[0]), None)
    if answer is None:  # only a record without the turn's call: make it
        return Decision(recent=view.recent, next=calls)
    if calls.kind is CallKind.MODERATE:
        return verdict(spec, answer, view)
    return panel_turn(answer, view)


def panel_turn(answer: Answer, view: TurnView) -> Decision:
    """The panelist's turn as posted: its reply, or a note saying why it has none."""
    state = {SPOKEN: str(spoken(view) + 1)}
    if usable(answer):
        return Decision(winner=answer.agent, message=answer.message, recent=(answer.agent,),
                        policy_state=state)
    failed = LogLine(PANELIST_FAILED, {"agent": answer.agent, "error": failure_reason(answer),
                                       "error_kind": failure_kind(answer)})
    return Decision(winner=answer.agent, message=could_not_respond(answer),
                    recent=(answer.agent,), policy_state=state, log_lines=(failed,))


def verdict(spec: RoomSpec, answer: Answer, view: TurnView) -> Decision:
    """The moderator's verdict ends the run; without one the run ends failed."""
    if not usable(answer):
        return Decision(recent=view.recent, stop=StopReason.MODERATOR_FAILED,
                        detail=failure_line(spec, answer))
    return Decision(winner=answer.agent, message=answer.message, recent=(answer.agent,),
                    stop=StopReason.VERDICT, answer=answer.message)


def failure_kind(answer: Answer) -> str:
    """The failure's kind as logged: the answer's ``ErrorKind``, or ``empty_reply`` for a
    call that worked but left nothing to post."""
    if answer.error_kind is not ErrorKind.NONE:
        return answer.error_kind.value
    return EMPTY_REPLY if answer.status is AnswerStatus.OK else ErrorKind.OTHER.value


# -- how its turns are told, and what the dashboard shows -------------------------------

def legend(spec: RoomSpec) -> str:
    """How a round-table gives the floor, with the spec's rounds and moderator."""
    policy = settings(spec)
    return (f"The panelists speak in order, {policy.rounds} round(s); then "
            f"{policy.moderator} gives the verdict. Under each message: its place.")


def explain(spec: RoomSpec, record: TurnRecord, earlier: Sequence[TurnRecord] = ()) -> TurnLine:
    """The panelist's position and round, or the moderator's verdict."""
    policy = settings(spec)
    panel = panelists(spec)
    done = int(record.policy_state.get(SPOKEN) or 0)
    answer = next(iter(record.bids), None)
    if done < policy.rounds * len(panel):
        position, round_ = done % len(panel) + 1, done // len(panel) + 1
        facts = {"role": "panelist", "position": position, "panel_size": len(panel),
                 "round": round_, "rounds": policy.rounds}
        notes = [f"panelist {position} of {len(panel)}, round {round_} of {policy.rounds}"]
        if answer is not None and not usable(answer):
            notes.append(failure_note(answer) + ": the debate goes on")
    else:
        facts = {"role": "moderator", "panel_size": len(panel), "rounds": policy.rounds}
        notes = [f"the moderator's verdict, after {policy.rounds} round(s) of "
                 f"{len(panel)} panelists"]
        if answer is not None and not usable(answer):
            notes.append(failure_note(answer))
    return TurnLine(record.turn, record.run, "roundtable", record.winner, (), tuple(notes),
                    facts)


def verdict_words(spec: RoomSpec, last: TurnRecord | None) -> str:
    """Who gave the verdict."""
    return f"{settings(spec).moderator} gave the verdict"


def panel_position(spec: RoomSpec, policy_state: Mapping[str, str],
                   ended: StopReason | None = None) -> dict[str, Any]:
    """The panel as the dashboard shows it: its order, the panelist turns posted in this
    run, who speaks next (the moderator once every round is done; nobody once the run ended,
    ``ended`` saying why: after a verdict, the debate is over), and that as a line."""
    policy = settings(spec)
    panel = list(panelists(spec))
    spoken = int(policy_state.get(SPOKEN) or 0)
    done = not panel or spoken >= policy.rounds * len(panel)
    upcoming = None if ended else policy.moderator if done else panel[spoken % len(panel)]
    if upcoming is not None:
        after = f"next {upcoming}"
    else:
        after = f"{policy.moderator} gave the verdict" if ended is StopReason.VERDICT else "run over"
    return {"panel": panel, "moderator": policy.moderator, "spoken": spoken,
            "rounds": policy.rounds, "next": upcoming,
            "ended": ended.value if ended else None,
            "note": f"panel: {spoken} of {policy.rounds * len(panel)} spoken, {after}"}


POLICY = FloorPolicy(
    kind="roundtable",
    calls=frozenset({CallKind.PANEL, CallKind.MODERATE}),
    first_calls=first_calls,
    decide=decide,
    explain=explain,
    legend=legend,
    stop_words={StopReason.VERDICT: verdict_words},
    contains_failures=True,
    dashboard_state=panel_position,
    replayable=("rounds",),
)
