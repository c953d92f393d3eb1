"""What the console shows of a room, kept from its messages, events and turn records: the
transcript's lines, a card per agent with its live state, the text being written, and the
floor (speak queue, panel position, the selector's pick, the open turn's bids). Pure: the
app feeds it what it reads and draws what it holds."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from parley.coordinator.policies import record_of
from parley.coordinator.policies.selector import read_choice
from parley.shared.approvals import describe_call
from parley.shared.events import (
    AnswerArrived,
    Event,
    MessageChunk,
    RoomPaused,
    RoomResumed,
    RunEnded,
    RunStarted,
    ToolApprovalAnswered,
    ToolApprovalRequested,
    ToolCalled,
    ToolResult,
    TurnDecided,
    TurnOpened,
)
from parley.shared.models import AnswerStatus, CallKind, Message, RoomSpec, TurnRecord
from parley.views.terminal_text import terminal_text
from parley.views.tool_calls import tool_lines

# A card's live states, in the order one wins over another.
WRITING = "writing…"
ASKING_YOU = "asking you"
LISTENING = "listening"
SPEAKING = "speaking"
NEXT = "next"
NOTHING_TO_ADD = "nothing to add"


@dataclass(frozen=True)
class Line:
    """One line of the transcript: ``kind`` is message, mine, tool, approval or note."""

    kind: str
    text: str


@dataclass
class Card:
    """An agent as its card presents it."""

    name: str
    role: str = ""
    description: str = ""
    model: str = ""
    tools: tuple[str, ...] = ()
    state: str = ""
    score: float | None = None  # a bid room's: its last bid


@dataclass
class RoomView:
    """The room as the console shows it to ``me``."""

    room: str
    spec: RoomSpec
    me: str
    lines: list[Line] = field(default_factory=list)
    writing: dict[tuple[int, int, str], str] = field(default_factory=dict)
    bids: dict[str, float] = field(default_factory=dict)  # the open (or last) turn's
    queue: dict[str, Any] = field(default_factory=dict)  # a mention room's speak queue
    policy_state: dict[str, str] = field(default_factory=dict)
    silent: set[str] = field(default_factory=set)  # had nothing to add on the last turn
    speaking: str | None = None
    pick: str | None = None  # the selector's last pick
    paused: bool = False
    ended: RunEnded | None = None
    seen_seq: int = 0

    def __post_init__(self) -> None:
        self.cards = {a.name: Card(a.name, a.role, a.description, a.model, tuple(a.tools))
                      for a in self.spec.agents}

    @property
    def kind(self) -> str:
        """The room's policy kind."""
        return self.spec.policy.kind

    @property
    def follows_queue(self) -> bool:
        """True for a room whose floor is a speak queue (its record says so)."""
        return bool(self.floor_state().get("speak_queue"))

    def see_message(self, message: Message) -> None:
        """A committed message: a line (yours, or under its sender's label), and the end
        of its sender's text being written."""
        if message.seq <= self.seen_seq:
            return
        self.seen_seq = message.seq
        content = terminal_text(message.content, "\n    ")
        if message.sender == self.me:
            self.lines.append(Line("mine", f"{message.seq:>3} you: {content}"))
        else:
            score = "" if message.score is None else f" ({message.score:.2f})"
            self.lines.append(Line("message", f"{message.seq:>3} {terminal_text(message.sender)}"
                                              f"{score}: {content}"))
        self.lines += [Line("tool", line) for line in tool_lines(message)]
        self.writing = {key: text for key, text in self.writing.items() if key[2] != message.sender}
        if message.sender in self.cards:
            self.speaking = message.sender

    def see_event(self, event: Event) -> None:
        """One event of the room's stream."""
        if isinstance(event, MessageChunk):
            key = (event.turn, event.phase, event.agent)
            before = "" if event.index == 0 else self.writing.get(key, "")
            self.writing[key] = before + event.text
        elif isinstance(event, TurnOpened) and event.phase == 0:
            self.bids, self.silent = {}, set()
        elif isinstance(event, AnswerArrived):
            self.see_answer(event)
        elif isinstance(event, TurnDecided):
            self.writing = {k: t for k, t in self.writing.items() if k[2] == event.winner}
        elif isinstance(event, RunStarted):
            self.ended = None
        elif isinstance(event, RunEnded):
            self.ended, self.speaking, self.writing = event, None, {}
            self.note(f"run {event.run} ended: {event.status.value}"
                      f"{f' ({event.stop_reason.value})' if event.stop_reason else ''}")
        elif isinstance(event, RoomPaused | RoomResumed):
            self.paused = isinstance(event, RoomPaused)
            self.note("the room is paused" if self.paused else "the room goes on")
        else:
            self.see_tool_event(event)

    def see_answer(self, event: AnswerArrived) -> None:
        """An answer: a bid's score for the card and the floor; a failed call's text
        being written is abandoned."""
        if event.kind in record_of(self.spec).scored and event.status is AnswerStatus.OK:
            self.bids[event.agent] = event.score
            if event.agent in self.cards:
                self.cards[event.agent].score = event.score
        if event.status is not AnswerStatus.OK:
            self.writing.pop((event.turn, event.phase, event.agent), None)

    def see_tool_event(self, event: Event) -> None:
        """Tool calls, their results, and approvals asked and answered."""
        if isinstance(event, ToolCalled):
            self.lines.append(Line("tool", f"    {terminal_text(event.agent)} calls "
                                           f"{terminal_text(event.tool)}({terminal_text(event.arguments)})"))
        elif isinstance(event, ToolResult):
            self.lines.append(Line("tool", f"    {terminal_text(event.tool)} {event.status.value}: "
                                           f"{terminal_text(event.result)}"))
        elif isinstance(event, ToolApprovalRequested):
            call = terminal_text(describe_call(event.tool, event.arguments))
            self.lines.append(Line("approval", f"{terminal_text(event.agent)} asks you to approve "
                                               f"{call}: /approve {event.approval_id} or "
                                               f"/deny {event.approval_id} [reason]"))
        elif isinstance(event, ToolApprovalAnswered):
            by = f" by {terminal_text(event.by)}" if event.by else ""
            self.note(f"{terminal_text(event.tool)} {event.status}{by}")

    def see_turn(self, record: TurnRecord) -> None:
        """A decided turn's record: who had nothing to add, the selector's pick, the
        policy's own fields."""
        policy = record_of(self.spec)
        self.silent = {a.agent for a in record.bids if policy.silent(self.spec, a)}
        picks = [a for a in record.bids if a.kind is CallKind.SELECT and a.status is AnswerStatus.OK]
        if picks:
            self.pick = read_choice(picks[-1].message)
        self.policy_state = dict(record.policy_state)

    def see_queue(self, queue: Mapping[str, Any]) -> None:
        """A mention room's speak queue (speaking, queue, listening, asked, waiting, over);
        an agent that newly asks you, noted."""
        before = {tuple(pair) for pair in self.queue.get("asked", [])}
        for agent, person in queue.get("asked", []):
            if person == self.me and (agent, person) not in before:
                self.note(f"{terminal_text(agent)} asks you")
        self.queue = dict(queue)

    def note(self, text: str) -> None:
        """A line of the console's own (a command's answer, a run's end)."""
        self.lines.append(Line("note", f"· {text}"))

    # -- what is drawn ----------------------------------------------------------------

    def card_state(self, name: str) -> str:
        """The agent's live state, the most telling first."""
        asked = [person for agent, person in self.queue.get("asked", []) if agent == name]
        upcoming = self.queue.get("queue") or []
        if any(key[2] == name for key in self.writing):
            return WRITING
        if asked:
            return ASKING_YOU if self.me in asked else f"asking {', '.join(asked)}"
        if name in self.queue.get("listening", []):
            return LISTENING
        speaking = self.queue.get("speaking") if self.follows_queue else self.speaking
        if name == speaking and self.ended is None:
            return SPEAKING
        if (upcoming and upcoming[0] == name) or self.floor_state().get("next") == name:
            return NEXT
        return NOTHING_TO_ADD if name in self.silent else ""

    def floor_state(self) -> dict[str, Any]:
        """What the policy's record shows of its state (the panel position, ...)."""
        ended = self.ended.stop_reason if self.ended else None
        return record_of(self.spec).dashboard_state(self.spec, self.policy_state, ended) or {}

    def floor_line(self) -> str:
        """The floor under the cards: the speak queue, the panel position, the selector's
        last pick, or the open turn's bids."""
        if self.follows_queue:
            q = self.queue
            parts = [f"speaking: {q.get('speaking') or '-'}",
                     f"queue: {', '.join(q.get('queue') or []) or '-'}"]
            if q.get("listening"):
                parts.append(f"listening: {', '.join(q['listening'])}")
            if q.get("waiting"):
                parts.append("waiting for a person")
            return " · ".join(parts)
        if self.pick is not None:
            return f"the selector picked {terminal_text(self.pick)}"
        if record_of(self.spec).scores_messages:
            bids = ", ".join(f"{name} {score:.2f}" for name, score in self.bids.items())
            return f"bids: {bids or '-'}"
        return str(self.floor_state().get("note") or "")

    def writing_lines(self) -> list[str]:
        """The text each agent is writing, under "writing…"."""
        return [f"{terminal_text(agent)} writing…: {terminal_text(text, ' ')}"
                for (_, _, agent), text in self.writing.items()]

    def card_text(self, name: str) -> str:
        """A card's lines: name and role, description, model and tools, live state."""
        card = self.cards[name]
        lines = [f"{card.name}{f' · {card.role}' if card.role else ''}"]
        if card.description:
            lines.append(card.description)
        tools = " · tools: " + ", ".join(card.tools) if card.tools else ""
        lines.append(card.model + tools)
        state = self.card_state(name)
        scored = record_of(self.spec).scores_messages and card.score is not None
        score = f" · last bid {card.score:.2f}" if scored else ""
        lines.append(f"{state or 'idle'}{score}")
        return "\n".join(terminal_text(line) for line in lines)
