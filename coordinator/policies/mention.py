"""The ``mention`` floor policy: whoever is addressed speaks next (seed 003, to the letter).

The room keeps a speak queue; every committed message queues the agents it asks for, and
each turn goes to the first queued agent that can take it.

=====================  =================================================================
rule                   behaviour
=====================  =================================================================
a person's message     naming agents (``@dev @sre``): those agents, at the front, in the
                       order named (a listening agent named gets one turn); naming only
                       people: nobody; naming nobody: the agents that asked that person,
                       else ``everyone`` in its order (nobody with ``addressed_only``);
                       it ends the wait and opens a new chain (depth 0)
who is a person        with ``people`` set, the names it lists; else every sender that is
                       not an agent. Another sender's message asks the agents it names,
                       at the back
an agent's answer      the agents it names, at the back, once its turn has ended; the
                       people it names: the agent asked them (``asked``)
owed once              an agent already queued is not queued again (a person's naming
                       moves it to the front)
no immediate repeat    the agent that just spoke does not take the next turn while
                       another queued agent can
silence                an answer that is the silent token (case, a final period and its
                       brackets aside) is recorded in the turn record, never posted, never
                       read for names
failed call            posted as ``(<name> could not respond: <error>)``, read for no name
listening              a listening agent keeps its place and takes no turn an agent asks
                       for; a person naming it gives it one turn
nobody can speak       the run ends ``waiting_for_person`` when the room owes a person an
                       answer (``asked``) or a queued agent only listens, and a person is
                       in the room; else ``queue_empty``
``max_depth``          a turn past it is not given: the run ends ``max_depth`` (recorded
                       once per chain), its agent stays queued, the room waits for a person
``max_turns``          after that many agent turns in the room's life the discussion is
                       over: the queue is dropped, later messages ask nobody, ``max_turns``
dispatch (optional)    a person's unaddressed message (the last of a batch) is judged by
                       one classifier call (``dispatch``): the candidates whose probability
                       reaches ``threshold``, likeliest first (askers first on a tie), at
                       most ``max_agents``; none reaching it: nobody (``none``). A failed,
                       late or unreadable call: the rule above (``fallback``). Logged as
                       ``dispatch_decision`` and kept in ``floor:dispatched``
instruct               the agent goes to the front for a turn on the instruction (given
                       while waiting, to a listening agent, to the last speaker, past
                       max_depth); refused once the discussion is over
regenerate             each agent that answered the last person's message (each it asked,
                       when none did) goes to the front, once
cut                    listening set on the agent whose turn runs: its answer is recorded
                       ``cancelled``, nothing is posted, no turn counted, it keeps its place
addressed              whom each message named: the turn record's ``addressed`` (by seq,
                       ``posted`` for the turn's own), the agent message's log entry
state                  room-scoped fields ``floor:<field>`` (never cleared by a new run),
                       written with the turn's commit, or with the run's end; operators'
                       changes come through ``{R}:floor_ops`` and apply at the next turn
=====================  =================================================================
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, cast

import orjson

from parley.coordinator.policies.base import (
    POSTED,
    Calls,
    Decision,
    FloorOp,
    FloorPolicy,
    LogLine,
    Posted,
    TurnView,
    WatchedState,
    record_view,
)
from parley.coordinator.policies.common import could_not_respond, usable
from parley.coordinator.policies.impersonation import cut_answers
from parley.coordinator.policies.lines import TurnLine, failure_note
from parley.shared import silent_token
from parley.shared.events import EventType
from parley.shared.mentions import addressed
from parley.shared.models import (
    DISPATCH_NAME,
    Answer,
    CallKind,
    ErrorKind,
    MentionPolicy,
    RoomSpec,
    StopReason,
    TurnRecord,
    name_key,
)

# The most people a room without a roster remembers (the names its agents may address).
MAX_PEOPLE = 64
DISPATCH_DECISION = "dispatch_decision"  # the event logged for each classifier decision


@dataclass
class Floor:
    """A mention room's speak queue and what goes with it, as stored (``floor:<field>``)."""

    queue: list[str] = field(default_factory=list)
    listening: list[str] = field(default_factory=list)
    granted: list[str] = field(default_factory=list)  # listening agents a person named
    asked: list[tuple[str, str]] = field(default_factory=list)  # (agent, person)
    waiting: bool = False
    over: bool = False
    read_seq: int = 0  # the last posted message read for names
    ops_id: str = "0-0"  # the last floor change applied
    depth: int = 0  # agent turns since the last person's message
    depth_stopped: bool = False  # the chain's turn past max_depth is recorded
    turns: int = 0  # agent turns in the room's life
    last: str = ""  # the agent that spoke last
    people: list[str] = field(default_factory=list)  # persons seen (no roster)
    last_person_asked: list[str] = field(default_factory=list)
    answered: list[str] = field(default_factory=list)  # agents that answered that message
    instructions: dict[str, str] = field(default_factory=dict)  # agent -> instruction
    dispatched: dict[str, object] = field(default_factory=dict)  # the last classifier decision

    def fields(self) -> dict[str, str]:
        """The state fields (without the ``floor:`` prefix)."""
        return {
            "queue": _json(self.queue), "listening": _json(self.listening),
            "granted": _json(self.granted), "asked": _json([list(p) for p in self.asked]),
            "waiting": "1" if self.waiting else "0", "over": "1" if self.over else "0",
            "read_seq": str(self.read_seq), "ops_id": self.ops_id, "depth": str(self.depth),
            "depth_stopped": "1" if self.depth_stopped else "0", "turns": str(self.turns),
            "last": self.last, "people": _json(self.people),
            "last_person_asked": _json(self.last_person_asked),
            "answered": _json(self.answered), "instructions": _json(self.instructions),
            "dispatched": _json(self.dispatched),
        }

    @classmethod
    def read(cls, fields: dict[str, str]) -> Floor:
        """The floor as stored; missing fields read as a new room's."""
        def listed(name: str) -> list[str]:
            return list(orjson.loads(fields.get(name) or "[]"))

        return cls(
            queue=listed("queue"), listening=listed("listening"), granted=listed("granted"),
            asked=[(agent, person) for agent, person in orjson.loads(fields.get("asked") or "[]")],
            waiting=fields.get("waiting") == "1", over=fields.get("over") == "1",
            read_seq=int(fields.get("read_seq") or 0), ops_id=fields.get("ops_id") or "0-0",
            depth=int(fields.get("depth") or 0),
            depth_stopped=fields.get("depth_stopped") == "1",
            turns=int(fields.get("turns") or 0), last=fields.get("last") or "",
            people=listed("people"), last_person_asked=listed("last_person_asked"),
            answered=listed("answered"),
            instructions=dict(orjson.loads(fields.get("instructions") or "{}")),
            dispatched=dict(orjson.loads(fields.get("dispatched") or "{}")),
        )

    def copy(self) -> Floor:
        """An independent copy (the lists are not shared)."""
        return Floor.read(self.fields())


def _json(value: object) -> str:
    return orjson.dumps(value).decode()


def settings(spec: RoomSpec) -> MentionPolicy:
    """The room's mention policy settings."""
    return cast(MentionPolicy, spec.policy)  # the policy table dispatches on the kind


def is_person(spec: RoomSpec, sender: str) -> bool:
    """True when ``sender`` posts as a person: on the roster, or (no roster) not an agent."""
    roster = settings(spec).people
    if roster is not None:
        return name_key(sender) in {name_key(name) for name in roster}
    return name_key(sender) not in {name_key(name) for name in spec.agent_names}


def known_people(spec: RoomSpec, floor: Floor) -> list[str]:
    """The names agents may address as people."""
    roster = settings(spec).people
    return list(roster) if roster is not None else list(floor.people)


def to_front(queue: list[str], agents: list[str], at: int = 0) -> int:
    """Put ``agents`` at position ``at`` of the queue in their order (each once); returns
    the position after them."""
    for agent in agents:
        if agent in queue:
            index = queue.index(agent)
            queue.remove(agent)
            if index < at:
                at -= 1
        queue.insert(at, agent)
        at += 1
    return at


def to_back(queue: list[str], agents: list[str]) -> None:
    """Queue ``agents`` at the back, those not queued yet (an agent is owed one turn)."""
    for agent in agents:
        if agent not in queue:
            queue.append(agent)


@dataclass
class Dispatch:
    """The classifier's part in reading a batch of posted messages: the message it judges
    (0: none), its answer once it came, and what was decided from it."""

    seq: int = 0
    answer: Answer | None = None
    agents: list[str] = field(default_factory=list)
    reason: str = ""  # classifier, none or fallback, once decided

    @property
    def pending(self) -> bool:
        """True when a message waits for the classifier's call."""
        return bool(self.seq) and self.answer is None


def read_posted(spec: RoomSpec, floor: Floor, posted: Posted, front: int,
                dispatch: Dispatch) -> int:
    """Apply one posted message to the floor; returns where the next person's agents go
    (after this one's, so that messages keep their order)."""
    floor.read_seq = max(floor.read_seq, posted.seq)
    if floor.over:
        return front
    person = is_person(spec, posted.sender)
    if person and settings(spec).people is None and posted.sender not in floor.people:
        floor.people = [*floor.people, posted.sender][-MAX_PEOPLE:]
    agents, people = addressed(posted.content, spec.agent_names, known_people(spec, floor))
    if not person:
        to_back(floor.queue, agents)
        return front
    return read_person(spec, floor, posted, (agents, people), front, dispatch)


def read_person(spec: RoomSpec, floor: Floor, posted: Posted,
                named: tuple[list[str], list[str]], front: int, dispatch: Dispatch) -> int:
    """A person's message: who it asks, the wait it ends, the chain it opens."""
    agents, people = named
    person = posted.sender
    askers = list(dict.fromkeys(agent for agent, asked in floor.asked
                                if name_key(asked) == name_key(person)))
    floor.asked = [pair for pair in floor.asked if name_key(pair[1]) != name_key(person)]
    floor.waiting = False
    floor.depth = 0
    floor.depth_stopped = False
    if agents:
        chosen = agents
        floor.granted = [*floor.granted, *(a for a in agents
                                           if a in floor.listening and a not in floor.granted)]
    elif people:
        chosen = []
    elif dispatch.seq:
        # Unaddressed messages of one batch are one ask: the classifier judges the last.
        chosen = judged(spec, floor, askers, dispatch) if posted.seq == dispatch.seq else []
    else:
        chosen = by_rule(spec, floor, askers)
    floor.last_person_asked = chosen
    floor.answered = []
    return to_front(floor.queue, chosen, front)


def by_rule(spec: RoomSpec, floor: Floor, askers: list[str]) -> list[str]:
    """Who takes a person's message naming nobody, without a classifier: the agents that
    asked that person, else ``everyone`` (that talks), else nobody with addressed_only."""
    if askers:
        return askers
    if settings(spec).addressed_only:
        return []
    return [agent for agent in settings(spec).everyone if agent not in floor.listening]


def candidates(spec: RoomSpec, floor: Floor, askers: list[str]) -> list[str]:
    """Whom the classifier may pick: the agents that asked the person, then ``everyone``,
    less those that only listen."""
    return [agent for agent in dict.fromkeys([*askers, *settings(spec).everyone])
            if agent not in floor.listening]


def judged(spec: RoomSpec, floor: Floor, askers: list[str], dispatch: Dispatch) -> list[str]:
    """The agents the classifier picks (likeliest first, at most max_agents, none when no
    judgment reaches the threshold); the rule's agents when it failed (``fallback``)."""
    if dispatch.answer is None:
        return []  # the call is made first: nothing is queued until it answers
    config = settings(spec).dispatch
    assert config is not None
    pool = candidates(spec, floor, askers)
    scores = read_judgments(dispatch.answer.message, pool) if usable(dispatch.answer) else None
    if scores is None:
        dispatch.agents, dispatch.reason = by_rule(spec, floor, askers), FALLBACK
        return dispatch.agents
    reached = [agent for agent in pool if scores.get(agent, -1.0) >= config.threshold]
    reached.sort(key=lambda agent: -scores[agent])  # stable: askers first on a tie
    dispatch.agents = reached[:config.max_agents]
    dispatch.reason = CLASSIFIER if dispatch.agents else NOBODY
    return dispatch.agents


FALLBACK, CLASSIFIER, NOBODY = "fallback", "classifier", "none"
_JUDGMENT = re.compile(r"@?([\w.-]+)\W{0,3}\s*[:=]\s*\(?\s*([01](?:\.\d+)?|\.\d+)")


def read_judgments(text: str, pool: list[str]) -> dict[str, float] | None:
    """The classifier's probability for each candidate it judged, read from a JSON object
    (``{"dev": 0.9}``) or ``name: probability`` lines; None when it judged none of them."""
    by_key = {name_key(agent): agent for agent in pool}
    scores: dict[str, float] = {}
    found = re.search(r"\{.*\}", text, re.DOTALL)
    pairs: list[tuple[str, object]] = []
    if found:
        try:
            loaded = orjson.loads(found.group(0))
            if isinstance(loaded, dict):
                pairs = list(loaded.items())
        except orjson.JSONDecodeError:
            pairs = []
    if not pairs:
        pairs = [(name, value) for name, value in _JUDGMENT.findall(text)]
    for name, value in pairs:
        agent = by_key.get(name_key(str(name)))
        try:
            score = float(value)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            continue
        if agent is not None and 0 <= score <= 1:
            scores.setdefault(agent, score)
    return scores or None


def dispatched_seq(spec: RoomSpec, floor: Floor, unread: tuple[Posted, ...]) -> int:
    """The message the classifier judges in this batch: the last unread person's message
    naming nobody, in a room with dispatch (0: none)."""
    if settings(spec).dispatch is None or floor.over:
        return 0
    people = known_people(spec, floor) + [p.sender for p in unread]
    last = 0
    for posted in unread:
        if posted.seq > floor.read_seq and is_person(spec, posted.sender):
            agents, named = addressed(posted.content, spec.agent_names, people)
            if not agents and not named:
                last = posted.seq
    return last


def read_all(spec: RoomSpec, floor: Floor, unread: tuple[Posted, ...],
             answer: Answer | None = None) -> tuple[Floor, Dispatch]:
    """The floor once every unread posted message is applied (a new floor), and the
    classifier's part (``answer``: its call's answer, when it came)."""
    dispatch = Dispatch(seq=dispatched_seq(spec, floor, unread), answer=answer)
    floor = floor.copy()
    front = 0
    for posted in unread:
        if posted.seq > floor.read_seq:
            front = read_posted(spec, floor, posted, front, dispatch)
    return floor, dispatch


def can_speak(floor: Floor, agent: str) -> bool:
    """True when the queued agent may take a turn: it talks, or a person gave it one."""
    return agent not in floor.listening or agent in floor.granted or agent in floor.instructions


def next_speaker(floor: Floor) -> str | None:
    """The first queued agent that can speak, not the last speaker while another can."""
    able = [agent for agent in floor.queue if can_speak(floor, agent)]
    others = [agent for agent in able if agent != floor.last]
    if others:
        return others[0]
    return able[0] if able else None


def has_person(spec: RoomSpec, floor: Floor) -> bool:
    """True when the room has a person who can answer: a roster, or someone who posted."""
    return settings(spec).people is not None or bool(floor.people)


def owes_person(floor: Floor) -> bool:
    """True when the room waits for a person: an agent asked one, or a queued agent only
    listens."""
    return bool(floor.asked) or any(not can_speak(floor, agent) for agent in floor.queue)


def turn_limit_reached(spec: RoomSpec, floor: Floor) -> bool:
    """True when the room's lifetime turns are used up."""
    cap = settings(spec).max_turns
    return cap is not None and floor.turns >= cap


def ended(floor: Floor, reason: StopReason, recent: tuple[str, ...], detail: str = ""
          ) -> Decision:
    """The run ends with no turn; the floor as read is written with the run's end."""
    return Decision(recent=recent, stop=reason, detail=detail, floor_state=floor.fields())


@dataclass(frozen=True)
class Plan:
    """What the floor gives this turn: its agent, the classifier's call still to make, or
    the run's end; with the floor as read and the classifier's decision."""

    floor: Floor
    dispatch: Dispatch
    speaker: str = ""
    calls: Calls | None = None
    end: Decision | None = None


def plan(spec: RoomSpec, view: TurnView, answers: list[Answer] | tuple[Answer, ...] = ()) -> Plan:
    """The floor once the unread messages are read (with the classifier's answer among
    ``answers``), and who takes the turn, or why no one does."""
    judgment = next((a for a in answers if a.kind is CallKind.DISPATCH), None)
    floor = apply_ops(spec, Floor.read(dict(view.floor_state)), view.ops)
    floor, dispatch = read_all(spec, floor, view.unread, judgment)
    # Everything up to the turn's snapshot is read: the agents' own messages were read
    # as their turns ended.
    floor.read_seq = max(floor.read_seq, view.snapshot_seq)
    if dispatch.pending:
        return Plan(floor, dispatch, calls=Calls(CallKind.DISPATCH, (DISPATCH_NAME,)))
    if dispatch.reason:
        floor.dispatched = {"seq": dispatch.seq, "agents": dispatch.agents,
                            "reason": dispatch.reason}
    if floor.over or turn_limit_reached(spec, floor):
        floor.over, floor.queue, floor.waiting = True, [], False
        return Plan(floor, dispatch, end=ended(floor, StopReason.MAX_TURNS, view.recent,
                                               "the discussion is over: max_turns agent "
                                               "turns were given"))
    speaker = next_speaker(floor)
    if speaker is None:
        floor.waiting = owes_person(floor) and has_person(spec, floor)
        reason = StopReason.WAITING_FOR_PERSON if floor.waiting else StopReason.QUEUE_EMPTY
        return Plan(floor, dispatch, end=ended(floor, reason, view.recent,
                                               waiting_detail(floor)))
    if floor.depth >= settings(spec).max_depth and speaker not in floor.instructions:
        floor.waiting = has_person(spec, floor)
        floor.depth_stopped = True
        return Plan(floor, dispatch, end=ended(
            floor, StopReason.MAX_DEPTH, view.recent,
            f"{speaker}'s turn would pass max_depth ({settings(spec).max_depth}); it stays "
            "queued until a person's next message"))
    floor.waiting = False
    instruction = floor.instructions.get(speaker)
    inputs = ((speaker, instruction),) if instruction else ()
    return Plan(floor, dispatch, speaker=speaker,
                calls=Calls(CallKind.DISCUSS, (speaker,), inputs))


def waiting_detail(floor: Floor) -> str:
    """Who the room waits for, in a line."""
    asked = ", ".join(f"{agent} asked {person}" for agent, person in floor.asked)
    listening = ", ".join(agent for agent in floor.queue if not can_speak(floor, agent))
    parts = [asked, f"queued but listening: {listening}" if listening else ""]
    return "; ".join(part for part in parts if part)


def first_calls(spec: RoomSpec, view: TurnView) -> Calls | Decision:
    """The classifier's call, or one call to the agent whose turn it is, or the run's end
    (waiting, empty queue, depth or turn limit)."""
    planned = plan(spec, view)
    if planned.end is not None:
        return planned.end
    assert planned.calls is not None
    return planned.calls


def decide(spec: RoomSpec, view: TurnView, answers: list[Answer]) -> Decision:
    """Post the agent's answer (unless silent) and queue whom it names; after the
    classifier's call, the agent it gives the turn to is asked (or the run ends)."""
    planned = plan(spec, view, answers)
    lines = dispatch_lines(planned.dispatch)
    names = addressed_in(spec, view)
    if planned.end is not None:
        return replace(planned.end, log_lines=lines, addressed=names)
    assert planned.calls is not None
    answer = next((found for found in answers
                   if found.kind is CallKind.DISCUSS and found.agent == planned.speaker), None)
    if answer is None:
        return Decision(recent=view.recent, next=planned.calls)
    if answer.error_kind is ErrorKind.CANCELLED:
        # Cut: nothing posted, no turn counted; the agent keeps its place and listens
        # from the next turn, when the change that cut it applies.
        return replace(Decision(recent=view.recent, floor_state=planned.floor.fields()),
                       log_lines=lines, addressed=names)
    decision = after_turn(spec, view, planned.floor, answer)
    return replace(decision, log_lines=lines, addressed={**names, **decision.addressed})


def addressed_in(spec: RoomSpec, view: TurnView) -> dict[str, list[str]]:
    """Whom each posted message the turn reads addressed (agents, then people), by seq."""
    floor = Floor.read(dict(view.floor_state))
    people = [*known_people(spec, floor), *(p.sender for p in view.unread)]
    found = {}
    for posted in view.unread:
        if posted.seq > floor.read_seq:
            agents, named = addressed(posted.content, spec.agent_names, people)
            found[str(posted.seq)] = [*agents, *named]
    return found


def dispatch_lines(dispatch: Dispatch) -> tuple[LogLine, ...]:
    """The classifier's decision as logged once the turn is committed."""
    if not dispatch.reason:
        return ()
    return (LogLine(DISPATCH_DECISION, {"seq": str(dispatch.seq), "reason": dispatch.reason,
                                        "agents": ",".join(dispatch.agents)}),)


def is_silent(policy: MentionPolicy, message: str) -> bool:
    """True when the answer is the room's silent token: case, a final period and its
    brackets aside (shared.silent_token)."""
    return silent_token.is_silent(message, policy.silent_token)


def after_turn(spec: RoomSpec, view: TurnView, floor: Floor, answer: Answer) -> Decision:
    """The floor once ``answer``'s turn has ended, and what it posts."""
    policy = settings(spec)
    speaker = answer.agent
    floor.queue.remove(speaker)
    floor.granted = [agent for agent in floor.granted if agent != speaker]
    floor.instructions.pop(speaker, None)
    floor.turns += 1
    floor.depth += 1
    floor.last = speaker
    if speaker in floor.last_person_asked and speaker not in floor.answered:
        floor.answered.append(speaker)
    recent = (*view.recent, speaker)[-8:]
    if usable(answer) and is_silent(policy, answer.message):
        return finish(spec, floor, Decision(recent=recent))
    if not usable(answer):
        return finish(spec, floor, Decision(winner=speaker, message=could_not_respond(answer),
                                            recent=recent))
    agents, people = addressed(answer.message, spec.agent_names, known_people(spec, floor))
    to_back(floor.queue, [agent for agent in agents if agent != speaker])
    for person in people:
        if (speaker, person) not in floor.asked:
            floor.asked.append((speaker, person))
    return finish(spec, floor, Decision(winner=speaker, message=answer.message,
                                        recent=recent, answer=answer.message,
                                        addressed={POSTED: [*agents, *people]}))


def finish(spec: RoomSpec, floor: Floor, decision: Decision) -> Decision:
    """The decision with the floor written; the discussion over once max_turns is used."""
    stop = None
    if turn_limit_reached(spec, floor):
        floor.over, floor.queue, floor.waiting = True, [], False
        stop = StopReason.MAX_TURNS
    return replace(decision, stop=stop, floor_state=floor.fields())


def listen(spec: RoomSpec, floor: Floor, agent: str) -> Floor:
    """The agent only listens: it keeps its place and takes no turn an agent asks for."""
    floor = floor.copy()
    if agent not in floor.listening:
        floor.listening.append(agent)
    return floor


def talk(spec: RoomSpec, floor: Floor, agent: str) -> Floor:
    """The agent talks again; a wait that was for it ends."""
    floor = floor.copy()
    floor.listening = [name for name in floor.listening if name != agent]
    floor.granted = [name for name in floor.granted if name != agent]
    if agent in floor.queue:
        floor.waiting = False
    return floor


def instruct(spec: RoomSpec, floor: Floor, agent: str, text: str) -> Floor:
    """Queue the agent at the front for a turn that takes the instruction as its input
    (given even to a listening agent or the one that just spoke)."""
    floor = floor.copy()
    floor.instructions[agent] = text
    to_front(floor.queue, [agent])
    if floor.last == agent:
        floor.last = ""
    return floor


def regenerate(spec: RoomSpec, floor: Floor) -> Floor:
    """Queue, at the front, each agent that answered the last person's message (each
    agent it asked, when none answered), once each."""
    floor = floor.copy()
    agents = floor.answered or floor.last_person_asked
    to_front(floor.queue, list(dict.fromkeys(agents)))
    floor.granted = [*floor.granted, *(a for a in agents if a in floor.listening
                                       and a not in floor.granted)]
    floor.last = ""
    return floor


def queue_view(floor: Floor, speaking: str | None = None) -> dict[str, object]:
    """The speak queue as operators read it (``parley queue``)."""
    return {"speaking": speaking, "queue": list(floor.queue),
            "listening": list(floor.listening),
            "asked": [list(pair) for pair in floor.asked], "waiting": floor.waiting,
            "over": floor.over}


def stream_id(entry_id: str) -> tuple[int, int]:
    """A stream entry id as a comparable pair."""
    ms, _, seq = entry_id.partition("-")
    return int(ms or 0), int(seq or 0)


def apply_ops(spec: RoomSpec, floor: Floor, ops: tuple[FloorOp, ...]) -> Floor:
    """The floor once every floor change not applied yet is (in order); a change naming
    no agent of the room, or an instruction or regeneration once the discussion is over,
    changes nothing."""
    for change in ops:
        if stream_id(change.id) <= stream_id(floor.ops_id):
            continue
        floor = apply_op(spec, floor, change)
        floor.ops_id = change.id
    return floor


def apply_op(spec: RoomSpec, floor: Floor, change: FloorOp) -> Floor:
    """One floor change applied (a new floor)."""
    known = change.agent in spec.agent_names
    if change.op == "listen" and known:
        return listen(spec, floor, change.agent)
    if change.op == "talk" and known:
        return talk(spec, floor, change.agent)
    if change.op == "instruct" and known and not floor.over:
        return instruct(spec, floor, change.agent, change.text)
    if change.op == "regenerate" and not floor.over:
        return regenerate(spec, floor)
    return floor.copy()


# -- how its turns are told, and what followers and the dashboard see -------------------

def legend(spec: RoomSpec) -> str:
    """How a mention room gives the floor."""
    return ("Whoever a message names (@name) speaks next, from a speak queue. Under each "
            "message: why its agent had the turn, and whom it queued.")


def explain(spec: RoomSpec, record: TurnRecord, earlier: Sequence[TurnRecord] = ()) -> TurnLine:
    """Why the speaker had the turn, what its message queued or asked, and the queue;
    ``earlier`` (the room's turns before it, oldest first) tell who queued the speaker."""
    view = record_view(record)
    planned = plan(spec, view, record.bids)
    decision = decide(spec, view, cut_answers(spec, record.bids)[0])
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
    queue = Floor.read(dict(decision.floor_state)).queue if decision.floor_state else []
    notes.append(f"queue: {', '.join(queue) or 'empty'}")
    return TurnLine(record.turn, record.run, "mention", record.winner, (), tuple(notes),
                    {"speaker": speaker, "because": because, "silent": silent,
                     "queued": queued, "asked": asked, "queue": queue})


def is_silence(spec: RoomSpec, answer: Answer) -> bool:
    """True when a discussion turn's answer is the room's silent token."""
    return usable(answer) and is_silent(settings(spec), answer.message)


def said_nothing(spec: RoomSpec, answer: Answer) -> bool:
    """A discussion turn that answered the room's silent token."""
    return answer.kind is CallKind.DISCUSS and is_silence(spec, answer)


def discuss_note(answer: Answer, silent: bool) -> str:
    """What became of a discussion turn that posted nothing: cut, silent or failed."""
    if answer.error_kind is ErrorKind.CANCELLED:
        return f"{answer.agent} was cut: it was set to only listen"
    if silent:
        return f"{answer.agent} stayed silent"
    return "" if usable(answer) else failure_note(answer)


def dispatch_note(dispatch: Dispatch) -> str:
    """The classifier's decision on a message naming nobody."""
    chosen = ", ".join(dispatch.agents) or "nobody"
    if dispatch.reason == FALLBACK:
        return f"the classifier failed: the rule gave {chosen}"
    return f"the classifier chose {chosen}"


def why_queued(spec: RoomSpec, record: TurnRecord, planned: Plan, agent: str) -> str | None:
    """Why ``agent`` is queued, as far as this turn's inputs tell (None: they do not)."""
    floor, dispatch = planned.floor, planned.dispatch
    if agent in floor.instructions:
        return "an operator instructed it"
    if any(op.op == "regenerate" for op in record.ops):
        return "an operator asked to regenerate"
    before = Floor.read(dict(record.floor_state))
    people = [p for p in record.unread if is_person(spec, p.sender)]
    for posted in reversed(record.unread):
        if agent in record.addressed.get(str(posted.seq), []):
            return f"named by {posted.sender}"
        if people and posted is people[-1] and agent in floor.last_person_asked:
            if dispatch.seq == posted.seq and dispatch.reason == CLASSIFIER:
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
        planned = plan(spec, record_view(record), record.bids)
        if planned.speaker == agent:
            return None
        # The newest naming is the reason, also of an agent already queued for an
        # earlier one (a message naming nobody queues everyone).
        if record.winner and agent in record.addressed.get(POSTED, []):
            return f"named by {record.winner}"
        reason = why_queued(spec, record, planned, agent)
        if reason:
            return reason
    return None


def people_asked(floor_state: Mapping[str, str]) -> list[str]:
    """The people the room owes an answer, in the order asked."""
    return list(dict.fromkeys(person for _agent, person in Floor.read(dict(floor_state)).asked))


def cap_words(spec: RoomSpec, last: TurnRecord | None) -> str:
    """The end of the discussion, with the room's turn cap."""
    return (f"the discussion is over: {settings(spec).max_turns} agent turns were given "
            "(max_turns)")


def speak_queue_shown(spec: RoomSpec, policy_state: Mapping[str, str],
                      ended: StopReason | None = None) -> dict[str, Any]:
    """The dashboard follows the room's speak queue (its queue route and queue events)."""
    return {"speak_queue": True}


POLICY = FloorPolicy(
    kind="mention",
    calls=frozenset({CallKind.DISCUSS, CallKind.DISPATCH}),
    first_calls=first_calls,
    decide=decide,
    explain=explain,
    legend=legend,
    stop_words={StopReason.MAX_TURNS: cap_words},
    next_steps={StopReason.MAX_TURNS: ("the discussion is over: start a new room",)},
    contains_failures=True,
    reads_posted=True,
    cut_on_listen=frozenset({CallKind.DISCUSS}),
    # The speak queue as followers see it change (the queue_changed event's fields).
    watched=WatchedState(EventType.QUEUE_CHANGED.value, (
        ("queue", "[]"), ("listening", "[]"), ("asked", "[]"), ("waiting", "0"),
        ("over", "0"))),
    dashboard_state=speak_queue_shown,
    scored=frozenset({CallKind.DISPATCH}),
    silent=said_nothing,
    people_asked=people_asked,
    not_replayable="a mention room cannot be replayed under other settings: who speaks "
                   "follows what people posted and whom they addressed",
)
