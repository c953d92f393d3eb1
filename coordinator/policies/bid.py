"""The ``bid`` floor policy: swarms GroupChat's speaker selection and loop guard, exactly.

=====================  =================================================================
rule                   behaviour
=====================  =================================================================
empty message          never wins, whatever its score
recency                ``recency_penalty`` is subtracted from each agent among the last
                       ``max(1, recency_window)`` speakers
strict bar             the winner's adjusted score must be > ``threshold``; equal loses
ties                   the agent listed first in the spec keeps the floor
raw score              the posted message carries the raw score, not the adjusted one
lull                   a turn with no winner ends the run
cap                    the run ends once ``max_messages`` (seed included) are posted
failure                a failed or missing bid is (0.0, ""): silent
=====================  =================================================================

``bid_mode: intent`` keeps every rule above and splits the turn in two phases, so that only
one agent pays for a whole reply:

=====================  =================================================================
phase                  behaviour
=====================  =================================================================
0: intents             every agent bids respond(score, intent): one short line of what it
                       would say (``intent_max_tokens``); the rules above pick the winner
                       from these bids, an empty intent never winning
1: the reply           only the winner is asked (``reply``) for its message, given its
                       intent and the transcript; the message posted carries its raw score
failed reply           the winner is silent after all (as a failed bid is): the rules pick
                       again from the other bids, and that winner is asked; nobody left
                       over the bar is a lull
=====================  =================================================================
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

from parley.coordinator.policies.base import (
    Calls,
    Decision,
    FloorPolicy,
    TurnView,
    bids_in_order,
    stopped,
)
from parley.coordinator.policies.common import usable
from parley.coordinator.policies.lines import TurnLine, answer_of, failure_note
from parley.shared.models import (
    Answer,
    AnswerStatus,
    BidPolicy,
    CallKind,
    RoomSpec,
    StopReason,
    TurnRecord,
)


def recent_window(policy: BidPolicy) -> int:
    """How many recent speakers are penalised: never fewer than one."""
    return max(1, policy.recency_window)


def adjusted_scores(policy: BidPolicy, bids: list[Answer], recent: tuple[str, ...]) -> dict[str, float]:
    """Each bid's score after the recency penalty."""
    penalised = set(recent[-recent_window(policy):])
    return {
        bid.agent: bid.score - policy.recency_penalty if bid.agent in penalised else bid.score
        for bid in bids
    }


def select_speaker(policy: BidPolicy, bids: list[Answer], recent: tuple[str, ...]) -> Answer | None:
    """The strict, recency-adjusted argmax over non-empty bids, or None for a lull."""
    adjusted = adjusted_scores(policy, bids, recent)
    best: Answer | None = None
    best_adjusted = policy.threshold
    for bid in bids:
        if not bid.message:
            continue
        if adjusted[bid.agent] <= best_adjusted:
            continue
        best, best_adjusted = bid, adjusted[bid.agent]
    return best


def settings(spec: RoomSpec) -> BidPolicy:
    """The room's bid policy settings."""
    return cast(BidPolicy, spec.policy)  # the policy table dispatches on the kind


def first_calls(spec: RoomSpec, view: TurnView) -> Calls | Decision:
    """Every agent bids, unless swarms' loop guard stops the run first: no turn once the
    run holds ``max_messages`` messages."""
    if view.messages_in_run >= settings(spec).max_messages:
        return stopped(StopReason.MAX_MESSAGES, view.recent)
    return Calls(first_kind(settings(spec)), spec.agent_names)


def first_kind(policy: BidPolicy) -> CallKind:
    """The kind of a turn's first calls: whole bids, or intents."""
    return CallKind.INTENT if policy.bid_mode == "intent" else CallKind.BID


def decide(spec: RoomSpec, view: TurnView, answers: list[Answer]) -> Decision:
    """Pick this turn's speaker from every agent's bid, or end the run on a lull; in intent
    mode, ask the winner for its reply first."""
    policy = settings(spec)
    bids = [answer for answer in answers if answer.kind is first_kind(policy)]
    ordered = bids_in_order(spec.agent_names, bids)
    adjusted = adjusted_scores(policy, ordered, view.recent)
    if policy.bid_mode == "intent":
        replies = {answer.agent: answer for answer in answers if answer.kind is CallKind.REPLY}
        # A winner whose reply failed is silent after all, as a failed bid is.
        ordered = [bid.model_copy(update={"message": ""})
                   if bid.agent in replies and not usable(replies[bid.agent]) else bid
                   for bid in ordered]
    winner = select_speaker(policy, ordered, view.recent)
    if winner is None:
        return Decision(recent=view.recent, adjusted=adjusted, stop=StopReason.LULL)
    message = winner.message
    if policy.bid_mode == "intent":
        if winner.agent not in replies:
            return Decision(recent=view.recent, adjusted=adjusted,
                            next=Calls(CallKind.REPLY, (winner.agent,),
                                       instructions=((winner.agent, winner.message),)))
        message = replies[winner.agent].message
    recent = (*view.recent, winner.agent)[-recent_window(policy):]
    reached_cap = view.messages_in_run + 1 >= policy.max_messages
    return Decision(
        winner=winner.agent,
        score=winner.score,
        message=message,
        recent=recent,
        adjusted=adjusted,
        stop=StopReason.MAX_MESSAGES if reached_cap else None,
        answer=message,
    )


# -- how its turns are told -------------------------------------------------------------

def legend(spec: RoomSpec) -> str:
    """How a bid room gives the floor, with the spec's numbers."""
    policy = settings(spec)
    window = recent_window(policy)
    recent = "the last speaker's" if window == 1 else f"the last {window} speakers'"
    offer, outcome = (("a message", "is posted") if policy.bid_mode == "full" else
                      ("a one-line intent", "takes the floor and only then writes its message"))
    return (f"Each turn every agent bids: a score from 0 to 1 and {offer}. The highest "
            f"score above {policy.threshold:g} {outcome} (a tie goes to the agent listed "
            f"first; {recent} score counts {policy.recency_penalty:g} less); no score "
            "above it ends the run. Under each message: that turn's bids.")


def explain(spec: RoomSpec, record: TurnRecord, earlier: Sequence[TurnRecord] = ()) -> TurnLine:
    """Every agent's bid, and why the winner won where the raw scores do not tell."""
    policy = settings(spec)
    first = first_kind(policy)  # bids, or an intent room's intents
    bids = bids_in_order(spec.agent_names, [b for b in record.bids if b.kind is first])
    answers = tuple(answer_of(b, record.adjusted.get(b.agent)) for b in bids)
    tie = tied_with(record, bids)
    # The order without the penalty (an intent room's winner whose reply failed is silent).
    failed = {b.agent for b in record.bids if b.kind is not first and not usable(b)}
    raw = select_speaker(
        policy, [b.model_copy(update={"message": ""}) if b.agent in failed else b for b in bids],
        ())
    leader = raw.agent if raw is not None and raw.agent != record.winner else None
    notes = []
    if tie:
        notes.append(f"tie at {record.adjusted[record.winner or '']:.2f}: {record.winner} "
                     f"is listed before {', '.join(tie)}")
    if leader and record.winner:
        notes.append(f"the recency penalty put {record.winner} ahead of {leader}")
    elif leader:
        notes.append(f"the recency penalty took {leader} to "
                     f"{record.adjusted.get(leader, 0.0):.2f}, not above {policy.threshold:g}")
    notes += [failure_note(b) for b in record.bids if b.kind is not first and not usable(b)]
    return TurnLine(record.turn, record.run, "bid", record.winner, answers, tuple(notes),
                    {"tie_with": tie, "leader_without_penalty": leader})


def tied_with(record: TurnRecord, bids: list[Answer]) -> list[str]:
    """The agents listed after the winner whose adjusted score shows as the winner's: it
    won the tie by being listed first."""
    winner = record.winner
    if winner is None or winner not in record.adjusted:
        return []
    shown = f"{record.adjusted[winner]:.2f}"
    return [b.agent for b in bids if b.agent != winner and b.message
            and b.status is AnswerStatus.OK and f"{record.adjusted.get(b.agent, -1):.2f}" == shown]


def lull_words(spec: RoomSpec, last: TurnRecord | None) -> str:
    """A lull, with the room's threshold."""
    return f"no bid cleared the {settings(spec).threshold:g} threshold"


def cap_words(spec: RoomSpec, last: TurnRecord | None) -> str:
    """The message cap, with the room's number."""
    return f"{settings(spec).max_messages} messages posted (the cap, the task included)"


def said_nothing(spec: RoomSpec, answer: Answer) -> bool:
    """A bid or an intent that worked and carries no message."""
    return (answer.kind in (CallKind.BID, CallKind.INTENT)
            and answer_of(answer).outcome == "silent")


POLICY = FloorPolicy(
    kind="bid",
    calls=frozenset({CallKind.BID, CallKind.INTENT, CallKind.REPLY}),
    first_calls=first_calls,
    decide=decide,
    explain=explain,
    legend=legend,
    stop_words={StopReason.LULL: lull_words, StopReason.MAX_MESSAGES: cap_words},
    scored=frozenset({CallKind.BID, CallKind.INTENT}),
    scores_messages=True,
    silent=said_nothing,
    replayable=("threshold", "recency_penalty", "recency_window", "max_messages"),
)
