"""Why each turn went as it did, in words: one compact line under the message a turn
posted (``parley run``, ``parley demo``), the same facts as fields (``--json``), and why a
run ended. Pure: a function of the turn's record and the room's spec, so what is shown is
what was recorded, for every policy.

==============  =================================================================
policy          the turn's line shows
==============  =================================================================
bid             each agent's raw score in spec order; the recency adjustment where
                one applied; silent (no message), failed, unparsed and timed-out
                agents with their error's kind; why the winner won when the raw
                scores do not tell (a tie goes to the agent listed first; the recency
                penalty put another agent ahead, or below the threshold)
selector        the selector's pick; a pick that was not allowed, why, and the
                retry; the rotation when both failed; TERMINATE
roundtable      the panelist's position in the panel and the round, or the verdict
mention         why the speaker had the turn (named by a person, the classifier, an
                instruction, the queue), whom its message queued or asked, silence,
                and the queue after it
==============  =================================================================
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from parley.coordinator import policies
from parley.coordinator.policies import bid as bid_policy
from parley.coordinator.policies import mention, roundtable, selector
from parley.coordinator.policies.base import POSTED, bids_in_order
from parley.coordinator.policies.common import usable
from parley.shared.models import (
    Answer,
    AnswerStatus,
    BidPolicy,
    CallKind,
    ErrorKind,
    MentionPolicy,
    RoomSpec,
    RoundtablePolicy,
    SelectorPolicy,
    StopReason,
    TurnRecord,
    name_key,
)

# What became of a call, as the line says it.
OUTCOMES = {AnswerStatus.ERROR: "failed", AnswerStatus.UNPARSED: "unparsed",
            AnswerStatus.TIMEOUT: "timed out"}


@dataclass(frozen=True)
class ShownAnswer:
    """One call's answer as the line shows it: a raw score (and the adjusted one where the
    recency penalty applied), or why there is none."""

    agent: str
    kind: str
    outcome: str  # bid, silent (no message), failed, unparsed, timed out
    score: float | None = None
    adjusted: float | None = None
    error_kind: str | None = None

    def text(self) -> str:
        """``Skeptic 0.75→0.45 (recency)``, ``Economist silent``, ``Ethicist failed
        (scripted)``."""
        if self.outcome != "bid":
            return f"{self.agent} {self.outcome}" + (f" ({self.error_kind})"
                                                     if self.error_kind else "")
        shown = f"{self.agent} {self.score:.2f}"
        if self.adjusted is not None:
            shown += f"→{self.adjusted:.2f} (recency)"
        return shown


@dataclass(frozen=True)
class TurnLine:
    """A decided turn's facts: who spoke, each answer, and the policy's decision in words
    (``notes``) and as fields (``decision``)."""

    turn: int
    run: int
    policy: str
    winner: str | None
    answers: tuple[ShownAnswer, ...] = ()
    notes: tuple[str, ...] = ()
    decision: dict[str, Any] = field(default_factory=dict)

    def text(self) -> str:
        """The one line: the bids (bid rooms), then the notes."""
        parts = ["bids: " + ", ".join(a.text() for a in self.answers)] if self.answers else []
        return " · ".join([*parts, *self.notes])

    def as_json(self) -> dict[str, Any]:
        """The same facts as fields, with the line itself."""
        return {"turn": self.turn, "run": self.run, "winner": self.winner,
                "answers": [asdict(answer) for answer in self.answers],
                "notes": list(self.notes), **self.decision, "line": self.text()}


def turn_line(spec: RoomSpec, record: TurnRecord, earlier: Sequence[TurnRecord] = ()
              ) -> TurnLine:
    """The line of a recorded turn of a room of ``spec``; ``earlier``, the turns before it
    (oldest first), tell a mention room's line who queued its speaker."""
    if spec.policy.kind == "mention":
        return mention_line(spec, record, earlier)
    build = {"bid": bid_line, "selector": selector_line,
             "roundtable": roundtable_line}[spec.policy.kind]
    return build(spec, record)


def answer_of(bid: Answer, adjusted: float | None = None) -> ShownAnswer:
    """A call's answer for the line; ``adjusted`` is shown only where it differs."""
    kind = bid.error_kind.value or None
    if bid.status is not AnswerStatus.OK:
        return ShownAnswer(bid.agent, bid.kind.value, OUTCOMES[bid.status], error_kind=kind)
    if not bid.message:  # as the policy has it: an empty message never wins
        return ShownAnswer(bid.agent, bid.kind.value, "silent")
    penalised = adjusted is not None and abs(adjusted - bid.score) > 1e-9
    return ShownAnswer(bid.agent, bid.kind.value, "bid", bid.score,
                  adjusted if penalised else None)


def failure_note(answer: Answer) -> str:
    """``Skeptic could not respond (timeout)``: a reply that left nothing to post."""
    kind = answer.error_kind.value or ("empty reply" if answer.status is AnswerStatus.OK
                                       else answer.status.value)
    return f"{answer.agent} could not respond ({kind})"


def legend(spec: RoomSpec) -> str:
    """How the room's policy gives the floor, in a sentence, for a first-time reader."""
    policy = spec.policy
    if isinstance(policy, BidPolicy):
        window = bid_policy.recent_window(policy)
        recent = "the last speaker's" if window == 1 else f"the last {window} speakers'"
        offer, outcome = (("a message", "is posted") if policy.bid_mode == "full" else
                          ("a one-line intent", "takes the floor and only then writes its message"))
        return (f"Each turn every agent bids: a score from 0 to 1 and {offer}. The highest "
                f"score above {policy.threshold:g} {outcome} (a tie goes to the agent listed "
                f"first; {recent} score counts {policy.recency_penalty:g} less); no score "
                "above it ends the run. Under each message: that turn's bids.")
    if isinstance(policy, SelectorPolicy):
        return ("Each turn a selector model picks who speaks next, or TERMINATE. Under each "
                "message: the selector's pick.")
    if isinstance(policy, RoundtablePolicy):
        return (f"The panelists speak in order, {policy.rounds} round(s); then "
                f"{policy.moderator} gives the verdict. Under each message: its place.")
    return ("Whoever a message names (@name) speaks next, from a speak queue. Under each "
            "message: why its agent had the turn, and whom it queued.")


# -- bid ------------------------------------------------------------------------------

def bid_line(spec: RoomSpec, record: TurnRecord) -> TurnLine:
    """Every agent's bid, and why the winner won where the raw scores do not tell."""
    policy = spec.policy
    assert isinstance(policy, BidPolicy)
    first = bid_policy.first_kind(policy)  # bids, or an intent room's intents
    bids = bids_in_order(spec.agent_names, [b for b in record.bids if b.kind is first])
    answers = tuple(answer_of(b, record.adjusted.get(b.agent)) for b in bids)
    tie = tied_with(record, bids)
    # The order without the penalty (an intent room's winner whose reply failed is silent).
    failed = {b.agent for b in record.bids if b.kind is not first and not usable(b)}
    raw = bid_policy.select_speaker(
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


# -- selector -------------------------------------------------------------------------

def selector_line(spec: RoomSpec, record: TurnRecord) -> TurnLine:
    """The selector's picks (a refused one, the retry), the rotation, TERMINATE, and a
    reply that failed."""
    policy = spec.policy
    assert isinstance(policy, SelectorPolicy)
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
        elif selector.ends_with_terminate(reply.message):
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
    said = selector.read_choice(answer.message)
    chosen = selector.valid_choice(policy, names, answer, last)
    if chosen == selector.TERMINATE:
        return {"said": said, "allowed": True, "why": "", "text": "said TERMINATE"}
    if chosen is not None:
        return {"said": said, "allowed": True, "why": "", "text": f"picked {chosen}"}
    known = any(name_key(name) == name_key(said) for name in names)
    why = "spoke last, and allow_repeat is off" if known else "not a participant"
    return {"said": said, "allowed": False, "why": why, "text": f"picked {said!r} ({why})"}


# -- roundtable -----------------------------------------------------------------------

def roundtable_line(spec: RoomSpec, record: TurnRecord) -> TurnLine:
    """The panelist's position and round, or the moderator's verdict."""
    policy = spec.policy
    assert isinstance(policy, RoundtablePolicy)
    panel = roundtable.panelists(spec)
    done = int(record.policy_state.get(roundtable.SPOKEN) or 0)
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


# -- mention --------------------------------------------------------------------------

def mention_line(spec: RoomSpec, record: TurnRecord, earlier: Sequence[TurnRecord] = ()
                 ) -> TurnLine:
    """Why the speaker had the turn, what its message queued or asked, and the queue."""
    view = policies.record_view(record)
    planned = mention.plan(spec, view, record.bids)
    decision = policies.decide(spec, view, record.bids)
    speaker = planned.speaker or None
    notes = [dispatch_note(planned.dispatch)] if planned.dispatch.reason else []
    because = ""
    if speaker:
        because = (why_queued(spec, record, planned, speaker)
                   or queued_earlier(spec, earlier, speaker) or "next in the queue")
        notes.append(f"{speaker}'s turn: {because}")
    answer = next((b for b in record.bids if b.kind is CallKind.DISCUSS), None)
    silent = answer is not None and is_silence(spec, answer)
    if answer is not None and (said := discuss_note(answer, silent)):
        notes.append(said)
    named = decision.addressed.get(POSTED, [])
    queued = [name for name in named if name in spec.agent_names and name != speaker
              and name not in planned.floor.queue]  # already queued: it keeps its place
    asked = [name for name in named if name not in spec.agent_names]
    if queued:
        notes.append(f"queued {', '.join(queued)} (named by {speaker})")
    if asked:
        notes.append(f"{speaker} asked {', '.join(asked)}")
    queue = mention.Floor.read(dict(decision.floor_state)).queue if decision.floor_state else []
    notes.append(f"queue: {', '.join(queue) or 'empty'}")
    return TurnLine(record.turn, record.run, "mention", record.winner, (), tuple(notes),
                    {"speaker": speaker, "because": because, "silent": silent,
                     "queued": queued, "asked": asked, "queue": queue})


def is_silence(spec: RoomSpec, answer: Answer) -> bool:
    """True when a discussion turn's answer is the room's silent token."""
    policy = spec.policy
    assert isinstance(policy, MentionPolicy)
    return usable(answer) and mention.is_silent(policy, answer.message)


def discuss_note(answer: Answer, silent: bool) -> str:
    """What became of a discussion turn that posted nothing: cut, silent or failed."""
    if answer.error_kind is ErrorKind.CANCELLED:
        return f"{answer.agent} was cut: it was set to only listen"
    if silent:
        return f"{answer.agent} stayed silent"
    return "" if usable(answer) else failure_note(answer)


def dispatch_note(dispatch: mention.Dispatch) -> str:
    """The classifier's decision on a message naming nobody."""
    chosen = ", ".join(dispatch.agents) or "nobody"
    if dispatch.reason == mention.FALLBACK:
        return f"the classifier failed: the rule gave {chosen}"
    return f"the classifier chose {chosen}"


def why_queued(spec: RoomSpec, record: TurnRecord, planned: mention.Plan, agent: str
               ) -> str | None:
    """Why ``agent`` is queued, as far as this turn's inputs tell (None: they do not)."""
    floor, dispatch = planned.floor, planned.dispatch
    if agent in floor.instructions:
        return "an operator instructed it"
    if any(op.op == "regenerate" for op in record.ops):
        return "an operator asked to regenerate"
    before = mention.Floor.read(dict(record.floor_state))
    people = [p for p in record.unread if mention.is_person(spec, p.sender)]
    for posted in reversed(record.unread):
        if agent in record.addressed.get(str(posted.seq), []):
            return f"named by {posted.sender}"
        if people and posted is people[-1] and agent in floor.last_person_asked:
            if dispatch.seq == posted.seq and dispatch.reason == mention.CLASSIFIER:
                return f"the classifier's pick for {posted.sender}'s message"
            if (agent, posted.sender) in before.asked:
                return f"{posted.sender} answered its question"
            return f"{posted.sender} named nobody, so everyone takes it in turn"
    return None


# How many earlier turns are searched for why an agent was queued.
LOOKBACK_TURNS = 50


def queued_earlier(spec: RoomSpec, earlier: Sequence[TurnRecord], agent: str) -> str | None:
    """Why ``agent`` was queued by an earlier turn since its last turn, newest first."""
    for record in reversed(earlier[-LOOKBACK_TURNS:]):
        if record.winner == agent:
            return None  # its last turn used up what queued it before
        planned = mention.plan(spec, policies.record_view(record), record.bids)
        if planned.speaker == agent:
            return None
        if (record.winner and agent in record.addressed.get(POSTED, [])
                and agent not in planned.floor.queue):
            return f"named by {record.winner}"
        reason = why_queued(spec, record, planned, agent)
        if reason:
            return reason
    return None


# -- the run's end --------------------------------------------------------------------

def stop_words(spec: RoomSpec, reason: StopReason, detail: str = "",
               last: TurnRecord | None = None) -> str:
    """Why the run ended, in words, from the spec's numbers and the stop's detail."""
    policy = spec.policy
    if reason is StopReason.LULL and isinstance(policy, BidPolicy):
        return f"no bid cleared the {policy.threshold:g} threshold"
    if reason is StopReason.MAX_MESSAGES and isinstance(policy, BidPolicy):
        return f"{policy.max_messages} messages posted (the cap, the task included)"
    if reason is StopReason.TERMINATE:
        who = last.winner if last is not None and last.winner else None
        return (f"{who} ended its message with TERMINATE" if who
                else "the selector said TERMINATE")
    if reason is StopReason.MAX_TURNS and isinstance(policy, SelectorPolicy):
        return f"{policy.max_turns} participant messages posted (max_turns)"
    if reason is StopReason.MAX_TURNS and isinstance(policy, MentionPolicy):
        return (f"the discussion is over: {policy.max_turns} agent turns were given "
                "(max_turns)")
    if reason is StopReason.VERDICT and isinstance(policy, RoundtablePolicy):
        return f"{policy.moderator} gave the verdict"
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


def next_steps(spec: RoomSpec, reason: StopReason | None, room: str) -> list[str]:
    """What to do after a run that ended for ``reason``, in room ``room``."""
    if reason is None:
        return []
    if reason is StopReason.MAX_TURNS:
        steps: tuple[str, ...] = ((NEW_RUN, DETAILS) if isinstance(spec.policy, SelectorPolicy)
                                  else ("the discussion is over: start a new room",))
    else:
        steps = NEXT_STEPS[reason]
    return [step.format(room=room) for step in steps]
