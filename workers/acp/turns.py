"""One turn of an ACP agent: its prompt (what it has not read yet, then the message it
answers, under parley's header with the turn's notes), its text streamed as it writes it,
its tool calls for the turn record, its permission requests as the room's approvals, and
``parley listen`` while it runs as ACP ``session/cancel``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import structlog
from acp.schema import ToolCallProgress, ToolCallStart, ToolCallUpdate

from parley.shared.models import (
    AgentSpec,
    CallKind,
    JsonValue,
    MentionPolicy,
    Message,
    RoomSpec,
    RoundtablePolicy,
    ToolCallRecord,
    ToolCallStatus,
)
from parley.shared.store import RoomStore
from parley.workers.acp.sessions import AcpProcessEnded, AcpSession, AcpSessions, TurnHandlers
from parley.workers.deadlines import DeadlinePassed
from parley.workers.prompts import describe_agent, discussion_notes, participant_names
from parley.workers.streaming import ChunkWriter

log = structlog.get_logger("parley.acp")

HEADER = "=== parley: the room's notes for your turn ==="
HEADER_END = "=== end of parley's notes ==="
# A copy of the header in what participants wrote cannot pass for parley's own.
HEADER_COPY = "(a copy of parley's header, removed)"
# How often a running turn looks for its agent set to only listen.
LISTEN_POLL_S = 0.25
# How long a cancelled turn waits for the coordinator's cut before it answers.
CUT_WAIT_S = 5.0
RESULT_CHARS = 2000
ACP_STATUSES = {"completed": ToolCallStatus.OK, "failed": ToolCallStatus.ERROR}


class AcpTurnCancelled(RuntimeError):
    """The agent was set to only listen while its turn ran: its prompt was cancelled."""


def defused(text: str) -> str:
    """Participant text with any copy of parley's header lines replaced."""
    return text.replace(HEADER, HEADER_COPY).replace(HEADER_END, HEADER_COPY)


def message_lines(messages: Sequence[Message], reader: str) -> str:
    """Messages as ``[seq] sender: content``, the reader's own marked as its."""
    return "\n".join(f"[{m.seq}] {m.sender}{' (you)' if m.sender == reader else ''}: "
                     f"{defused(m.content)}" for m in messages)


def turn_notes(spec: RoomSpec, agent: AgentSpec, transcript: Sequence[Message],
               instruction: str, kind: CallKind = CallKind.DISCUSS) -> str:
    """Who is in the room, whom the agent may address, who asked for this turn, and how
    the room works for a turn of ``kind``: parley's header."""
    names = participant_names(spec.agent_names, transcript)
    people = [name for name in names[len(spec.agent_names):]]
    others = [describe_agent(a) for a in spec.agents if a.name != agent.name]
    asker = "the operator" if instruction else (transcript[-1].sender if transcript else "")
    lines = [HEADER, f"You are @{agent.name} in room {spec.name!r}.",
             "Agents in the room: " + (", ".join(others) or "none") + ".",
             "People in the room: " + (", ".join(people) or "none") + ".",
             "You may address: " + ", ".join(f"@{n}" for n in names if n != agent.name) + ".",
             f"Asked for this turn by: {asker or 'nobody'}.", how_the_room_works(spec, agent,
                                                                                 transcript, kind)]
    if isinstance(spec.policy, MentionPolicy):
        lines.append(discussion_notes(spec.policy.people or [], spec.policy.silent_token,
                                      instruction))
    elif instruction:
        lines.append(f"For this turn: {instruction}")
    return "\n".join([*lines, HEADER_END])


def how_the_room_works(spec: RoomSpec, agent: AgentSpec, transcript: Sequence[Message],
                       kind: CallKind) -> str:
    """What becomes of the answer, as the room's policy gives the floor (the same rules
    the policy's prompt templates tell a model)."""
    policy = spec.policy
    if kind is CallKind.PANEL and isinstance(policy, RoundtablePolicy):
        panel = [name for name in spec.agent_names if name != policy.moderator]
        run = transcript[-1].run if transcript else 0
        done = sum(1 for m in transcript if m.run == run and m.sender in panel)
        return (f"This is a round-table debating the run's question; you are a panelist "
                f"({agent.role or 'your own perspective'}), round {done // len(panel) + 1} "
                f"of {policy.rounds}. Your answer is posted as your turn in the debate: hold "
                f"your perspective, answer the others by name, speak only for yourself and "
                f"leave the verdict to @{policy.moderator}.")
    if kind is CallKind.MODERATE:
        return ("This is a round-table and you are its moderator: your answer is posted as "
                "the verdict that ends the debate. Weigh the panelists' turns into one "
                "verdict, with its reasons.")
    if kind is CallKind.SPEAK:
        return ("Your answer is posted in the room as your message; a selector picks who "
                "speaks next. If the task is complete and nothing is left for anyone to do, "
                "end with TERMINATE.")
    return ("Your answer is posted in the room as your message; an @name in it asks that "
            "one to speak next.")


def turn_prompt(session: AcpSession, agent: AgentSpec, spec: RoomSpec,
                transcript: Sequence[Message], instruction: str, history: int,
                kind: CallKind = CallKind.DISCUSS) -> str:
    """The turn's prompt: the instructions once per session, what the agent has not read
    (a new session: the room's last ``history`` messages), then the message it answers."""
    new = session.read_seq == 0
    unread = [m for m in transcript if m.seq > session.read_seq and (new or m.sender != agent.name)]
    unread = unread[-history:]
    answered, earlier = (unread[-1:], unread[:-1]) if unread else ([], [])
    parts = [turn_notes(spec, agent, transcript, instruction, kind)]
    if new and agent.instructions:
        parts.append("Your instructions for this room:\n" + agent.instructions)
    if earlier:
        parts.append("What was said in the room since you last read it:\n"
                     + message_lines(earlier, agent.name))
    if answered:
        parts.append("The message you answer:\n" + message_lines(answered, agent.name))
    return "\n\n".join(parts)


@dataclass
class AcpTurn:
    """The state of one running turn: its deadline (held while a permission waits), the
    text so far and the tool calls the agent reported."""

    agent: str
    call_id: str
    deadline: float
    stream: ChunkWriter | None
    permit_with: Callable[[ToolCallRecord], Any]
    kind: CallKind = CallKind.DISCUSS
    text: list[str] = field(default_factory=list)
    tools: dict[str, ToolCallRecord] = field(default_factory=dict)
    asked: int = 0

    def write(self, text: str) -> None:
        """Keep the text and stream it to the room."""
        self.text.append(text)
        if self.stream is not None:
            self.stream.write(text)

    def start_over(self) -> None:
        """Forget what an attempt that failed midway wrote: the next attempt's text streams
        from chunk 0 again, which tells followers to drop the draft (as a call made again
        after a takeover does: shared/events.py)."""
        self.text.clear()
        self.tools.clear()
        if self.stream is not None:
            self.stream.restart()

    def report(self, update: ToolCallStart | ToolCallProgress) -> None:
        """A tool call the agent started or moved on, as the turn record shows it."""
        known = self.tools.get(update.tool_call_id)
        record = known or ToolCallRecord(id=f"{self.call_id}.acp.{len(self.tools)}",
                                         agent=self.agent, tool=update.title or "tool",
                                         index=len(self.tools))
        changes: dict[str, Any] = {}
        if update.title:
            changes["tool"] = update.title
        if isinstance(update.raw_input, dict):
            changes["arguments"] = plain(update.raw_input)
        if update.status in ACP_STATUSES:
            changes["status"] = ACP_STATUSES[update.status]
        if update.raw_output is not None:
            changes["result"] = str(update.raw_output)[:RESULT_CHARS]
        self.tools[update.tool_call_id] = record.model_copy(update=changes)

    def permit(self, tool_call: ToolCallUpdate) -> bool:
        """Ask the room's approvers; the turn's deadline is held for the wait."""
        self.asked += 1
        record = ToolCallRecord(id=f"{self.call_id}.permission.{self.asked}", agent=self.agent,
                                tool=tool_call.title or "permission",
                                arguments=plain(tool_call.raw_input)
                                if isinstance(tool_call.raw_input, dict) else {})
        verdict = self.permit_with(record)
        self.deadline = verdict.held(self.deadline)
        known = self.tools.get(tool_call.tool_call_id)
        if known is not None and not verdict.approved:
            self.tools[tool_call.tool_call_id] = known.model_copy(
                update={"status": ToolCallStatus.DENIED})
        elif known is not None:
            self.tools[tool_call.tool_call_id] = known.model_copy(update={"approved_by": verdict.by})
        return bool(verdict.approved)


def plain(value: dict[str, Any]) -> dict[str, JsonValue]:
    """A tool's input as JSON values (what is not one, as its text)."""
    return {str(k): v if isinstance(v, str | int | float | bool | None) else str(v)
            for k, v in value.items()}


def wait_turn_moved(store: RoomStore, room: str, number: int, most_s: float) -> None:
    """Wait, at most ``most_s``, for the room's turn ``number`` to be decided."""
    until = time.monotonic() + most_s
    while time.monotonic() < until:
        turn, is_open = store.redis.hmget(store.keys.state(room), "turn", "turn_open")
        if is_open != b"1" or turn is None or int(turn) != number:
            return
        time.sleep(LISTEN_POLL_S)


def watch_listening(store: RoomStore, room: str, agent: str, cancel: Callable[[], None],
                    done: threading.Event) -> threading.Thread:
    """Cancel the turn when the agent is set to only listen while it runs."""
    newest = store.redis.xrevrange(store.keys.floor_ops(room), "+", "-", count=1)
    after = newest[0][0].decode() if newest else "0-0"

    def watch() -> None:
        while not done.wait(LISTEN_POLL_S):
            changes = store.read_floor_ops(room, after)
            if any(change.op == "listen" and change.agent == agent for change in changes):
                cancel()
                return

    thread = threading.Thread(target=watch, name="acp-listen", daemon=True)
    thread.start()
    return thread


def run_turn_once_more(sessions: AcpSessions, store: RoomStore, prefix: str, room: str,
                       spec: RoomSpec, agent: AgentSpec, turn: AcpTurn,
                       transcript: list[Message], instruction: str, history: int
                       ) -> tuple[str, list[ToolCallRecord]]:
    """``run_turn``; a turn whose session died midway is asked once more, of a new session
    that reads the room's recent history first."""
    args = (sessions, store, prefix, room, spec, agent)
    try:
        return run_turn(*args, turn, transcript, instruction, history)
    except AcpProcessEnded as error:
        log.warning("acp_turn_asked_again", room=room, agent=agent.name, error=str(error))
        turn.start_over()
        return run_turn(*args, turn, transcript, instruction, history)


def run_turn(sessions: AcpSessions, store: RoomStore, prefix: str, room: str, spec: RoomSpec,
             agent: AgentSpec, turn: AcpTurn, transcript: list[Message], instruction: str,
             history: int) -> tuple[str, list[ToolCallRecord]]:
    """Run one turn in the agent's session here (started if there is none): its answer
    and the tool calls it reported."""
    session = sessions.take((prefix, room, agent.name), agent.acp_profile, turn.deadline)
    cancelled = threading.Event()
    done = threading.Event()

    def cancel() -> None:
        cancelled.set()
        sessions.cancel(session)

    failed = True
    try:
        prompt = turn_prompt(session, agent, spec, transcript, instruction, history, turn.kind)
        watch_listening(store, room, agent.name, cancel, done)
        handlers = TurnHandlers(turn.write, turn.report, turn.permit)
        try:
            stop = sessions.prompt(session, prompt, handlers, lambda: turn.deadline)
        except TimeoutError as error:
            raise DeadlinePassed(str(error)) from None
        if transcript:
            session.read_seq = transcript[-1].seq
        failed = False
    finally:
        done.set()
        sessions.give_back(session, failed)
    if cancelled.is_set() or stop == "cancelled":
        # The coordinator cuts the turn itself: this answer must come after its cut (the
        # session is free meanwhile, for the next turn).
        wait_turn_moved(store, room, int(turn.call_id.split(".")[0]), CUT_WAIT_S)
        raise AcpTurnCancelled("the turn was cancelled: the agent was set to only listen")
    log.info("acp_turn_ended", room=room, agent=agent.name, stop=stop,
             tool_calls=len(turn.tools))
    return "".join(turn.text), list(turn.tools.values())
