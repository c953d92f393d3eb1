"""swarms' ``GroupChat`` interface over parley: the same constructor, ``run``, ``run_batch``
and ``conversation``, with each run in its own distributed room.

Code written against ``swarms.GroupChat`` (16.x) moves over by swapping the import. Agents
may be parley agent specs, dicts, or swarms-style objects: ``agent_name``,
``system_prompt``, ``model_name``, ``agent_description`` (the description),
``temperature``, ``max_tokens`` and ``llm_base_url`` (the ``api_base``, which the workers'
allow-list still governs) are carried, and an ``api_key_env`` attribute if the object has
one. An agent with ``llm_api_key`` set is refused: keys stay on the workers, named by
``api_key_env``. ``run`` returns exactly what swarms' ``history_output_formatter`` returns
for the same conversation, for every ``output_type``. ``idle_timeout`` and ``auto_equip``
are accepted for compatibility: parley never ends a run on a wall clock, and always forces
the ``respond`` tool.

Warnings go through the standard library's ``logging`` (logger ``parley.groupchat``), as
swarms' go through its logger: each failed or unparsed bid, as its turn is decided, and
swarms' warning for a first turn without a reply. ``verbose=True`` also prints each bid's
failure among the posted messages' panels; message text is printed as text, never read
as rich markup.

The one deliberate difference: a run that ends ``failed`` (every agent failed on the first
turn, no worker answered, the room kept erroring) logs swarms' warning and raises
``RunFailed``; swarms logs the warning and returns. ``raise_on_failure=False`` returns.

``streaming_callback(agent_name, chunk, is_final)`` gets a message's real chunks as the
model writes it, then an empty chunk with ``is_final=True`` once it is posted; a message
that was not streamed (a full-mode bid's, whose text arrives whole) is replayed word by
word, as swarms does. ``bid_mode="intent"`` (and ``intent_max_tokens``) makes every agent
bid one line of what it would say, and only the winner write its message.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import Any

from pydantic import ValidationError
from rich.console import Console
from rich.panel import Panel
from rich.text import Text

from parley.client.client import Client, RunResult
from parley.coordinator.policies.common import failure_reason, likely_fix
from parley.shared.events import MessageChunk
from parley.shared.models import (
    AgentSpec,
    Answer,
    AnswerStatus,
    BidPolicy,
    CallKind,
    Message,
    RoomSpec,
    RoomStatus,
    TurnRecord,
)
from parley.swarms.history import HISTORY_OUTPUT_TYPES, conversation_rows, format_history, format_rows
from parley.views.problems import describe_fields
from parley.views.terminal_text import terminal_text

__all__ = ["OUTPUT_TYPES", "Conversation", "GroupChat", "RunFailed", "as_agent_spec",
           "format_history", "stream_message"]

# The standard library's: a swarms user sees its warnings on stderr with no set-up, as
# swarms' own; a parley process renders them with its other logs. Named as documented, not
# after the module's place in the package: users filter on it.
log = logging.getLogger("parley.groupchat")


def warn(message: str, **fields: Any) -> None:
    """Log a warning; when no handler would show it, print it as Python does when logging
    is not set up (importing swarms sets the root logger to ERROR: its own warnings go
    through loguru, and ours would vanish)."""
    if log.isEnabledFor(logging.WARNING) and shown_by_a_handler(log, logging.WARNING):
        log.warning(message, extra=fields)
        return
    record = log.makeRecord(log.name, logging.WARNING, __file__, 0, message, (), None,
                            extra=fields)
    (logging.lastResort or logging.StreamHandler(sys.stderr)).handle(record)


def shown_by_a_handler(logger: logging.Logger, level: int) -> bool:
    """True when a handler on ``logger`` or on the loggers it propagates to takes ``level``."""
    current: logging.Logger | None = logger
    while current is not None:
        if any(level >= handler.level for handler in current.handlers):
            return True
        current = current.parent if current.propagate else None
    return False

StreamingCallback = Callable[[str, str, bool], None]
Deliver = Callable[[Callable[[], None]], None]

OUTPUT_TYPES = HISTORY_OUTPUT_TYPES
# swarms' warning when no agent replies on the first turn, word for word.
FIRST_TURN_SILENT = (
    "No agent produced a reply on the first turn. The chat will end immediately. Likely "
    "causes: an invalid model_name, a missing/invalid API key, a model without "
    "function-calling support, or replies that are not a parseable respond() tool call. Run "
    "with verbose=True to see each agent's bid."
)
RUN_FAILED = "The run failed and the chat ended early: see stop_reason and stop_detail."
# A swarms agent's attributes, by the AgentSpec field each one fills.
AGENT_ATTRIBUTES = {
    "name": "agent_name", "description": "agent_description", "system_prompt": "system_prompt",
    "model": "model_name", "temperature": "temperature", "max_tokens": "max_tokens",
    "api_base": "llm_base_url", "api_key_env": "api_key_env",
}
KEY_REFUSED = ("llm_api_key: parley takes no API keys: keys stay on the workers. Set the key "
               "in the workers' environment and name its variable as the agent's "
               "api_key_env (e.g. api_key_env='OPENAI_API_KEY'), in a parley agent spec or as "
               "an attribute of the agent")


class RunFailed(RuntimeError):
    """A run ended ``failed``: why (``stop_reason``, ``stop_detail``), its room, the whole
    ``result``, and ``output``, what swarms would have returned."""

    def __init__(self, result: RunResult, output: Any) -> None:
        self.result = result
        self.room = result.room
        self.stop_reason = result.stop_reason
        self.stop_detail = result.stop_detail
        self.output = output
        reason = result.stop_reason.value if result.stop_reason else "unknown"
        super().__init__(f"run in room {result.room} failed ({reason})"
                         + (f": {result.stop_detail}" if result.stop_detail else ""))


class Conversation:
    """A run's conversation as swarms' ``Conversation`` holds it: ``conversation_history``
    is a list of ``{role, content}`` dicts, with ``metadata: {score}`` (the speaker's raw
    bid) on agent messages only."""

    def __init__(self, messages: Iterable[Message] = ()) -> None:
        self.messages = list(messages)
        self.conversation_history = conversation_rows(self.messages)

    def format(self, output_type: str) -> Any:
        """The conversation in one of swarms' output types."""
        return format_rows(self.conversation_history, output_type)


def as_agent_spec(agent: Any) -> AgentSpec:
    """An AgentSpec from a spec, a dict, or a swarms-style agent object.

    Raises ValueError with one line naming the agent, the field and the rule it breaks.
    """
    if isinstance(agent, AgentSpec):
        return agent
    if isinstance(agent, dict):
        return _validated_agent(agent, agent.get("name"), {})
    fields = {field: getattr(agent, attribute, None) for field, attribute in AGENT_ATTRIBUTES.items()}
    fields = {field: value for field, value in fields.items() if value is not None}
    if getattr(agent, "llm_api_key", None):
        # Dropping the key would send the calls unauthenticated, or with another key.
        raise ValueError(f"agent {fields.get('name')!r}: {KEY_REFUSED}")
    return _validated_agent(fields, fields.get("name"), AGENT_ATTRIBUTES)


def _validated_agent(fields: dict[str, Any], name: Any, spelled: dict[str, str]) -> AgentSpec:
    try:
        return AgentSpec.model_validate(fields)
    except ValidationError as error:
        raise ValueError(f"agent {name!r}: {describe_fields(error, spelled)}") from None


def stream_message(message: Message, callback: StreamingCallback) -> None:
    """Replay a posted message word by word, then an empty chunk with ``is_final=True``."""
    words = message.content.split(" ")
    for index, word in enumerate(words):
        chunk = word if index == len(words) - 1 else f"{word} "
        if chunk:
            callback(message.sender, chunk, False)
    callback(message.sender, "", True)


def failed_bid_line(chat: str, answer: Answer) -> str:
    """A failed, unparsed or missing answer as swarms words a failed bid: ``[chat] Alpha
    failed to bid on turn 1: <error> (likely fix: ...)``."""
    call = "reply" if answer.kind is CallKind.REPLY else "bid"
    happened = (f"'s {call} on turn {answer.turn} could not be parsed"
                if answer.status is AnswerStatus.UNPARSED else f" failed to {call} on turn {answer.turn}")
    fix = likely_fix(answer.error_kind, answer.error_variable)
    return (f"[{chat}] {answer.agent}{happened}: {failure_reason(answer)}"
            + (f" (likely fix: {fix})" if fix else ""))


class TurnsSeen:
    """A run's turn records, read as its messages arrive: each failed answer of a newly
    decided turn is told once, in turn order."""

    def __init__(self, client: Client, room: str, tell: Callable[[Answer], None]) -> None:
        self.client = client
        self.room = room
        self.tell = tell
        self.after = "0-0"
        self.records: list[TurnRecord] = []

    def catch_up(self) -> None:
        """Read the turns decided since the last read; tell their failed answers."""
        for entry_id, record in self.client.store.read_turn_entries(self.room, self.after):
            self.after = entry_id
            self.records.append(record)
            for answer in record.bids:
                if answer.status is not AnswerStatus.OK:
                    self.tell(answer)


@dataclass
class Outcome:
    """One finished run: how it ended, its conversation, and the formatted output."""

    result: RunResult
    conversation: Conversation
    output: Any


class InOrder:
    """Callbacks of runs going on side by side, delivered one run at a time in task order:
    the current run's as they come, a later run's held until every earlier one finished."""

    def __init__(self, runs: int) -> None:
        self._lock = threading.Lock()
        self._current = 0
        self._held: list[list[Callable[[], None]]] = [[] for _ in range(runs)]
        self._finished = [False] * runs

    def deliver(self, run: int, emit: Callable[[], None]) -> None:
        """Call ``emit`` now if ``run`` is the current run, else when its turn comes."""
        with self._lock:
            if run == self._current:
                emit()
            else:
                self._held[run].append(emit)

    def finish(self, run: int) -> None:
        """Mark ``run`` over; replay what the next unfinished runs held."""
        with self._lock:
            self._finished[run] = True
            while self._current < len(self._finished) and self._finished[self._current]:
                self._current += 1
                if self._current < len(self._held):
                    for emit in self._held[self._current]:
                        emit()
                    self._held[self._current].clear()


def emit_now(emit: Callable[[], None]) -> None:
    """Deliver a callback at once (a single run)."""
    emit()


class GroupChat:
    """A turn-based, self-selecting group chat: each turn every agent bids, and the single
    highest recency-adjusted bid strictly above ``threshold`` is posted."""

    def __init__(
        self,
        name: str = "dynamic-groupchat",
        description: str = "Agents take turns; one speaker per turn.",
        agents: Iterable[Any] | None = None,
        max_loops: int = 20,
        threshold: float = 0.5,
        recency_penalty: float = 0.3,
        recency_window: int = 1,
        idle_timeout: float = 8.0,
        output_type: str = "str-all-except-first",
        verbose: bool = False,
        auto_equip: bool = True,
        bid_timeout_s: float = 30.0,
        client: Client | None = None,
        raise_on_failure: bool = True,
        bid_mode: str = "full",
        intent_max_tokens: int = 60,
    ) -> None:
        agent_specs = [as_agent_spec(agent) for agent in agents or []]
        if len(agent_specs) < 2:
            raise ValueError("GroupChat requires at least 2 agents.")
        if output_type not in OUTPUT_TYPES:
            raise ValueError(f"output_type must be one of {', '.join(OUTPUT_TYPES)}, "
                             f"not {output_type!r}")
        self.name = name
        self.description = description
        self.output_type = output_type
        self.verbose = verbose
        self.idle_timeout = idle_timeout  # accepted, unused: runs end on a lull
        self.auto_equip = auto_equip  # accepted: the respond tool is always forced
        self.raise_on_failure = raise_on_failure
        self.spec = self._room_spec(agent_specs, max_loops, threshold, recency_penalty,
                                    recency_window, bid_timeout_s,
                                    {"bid_mode": bid_mode, "intent_max_tokens": intent_max_tokens})
        self.client = client or Client()
        self.rooms: list[str] = []
        self.conversation = Conversation()

    def run(self, task: str, streaming_callback: StreamingCallback | None = None) -> Any:
        """Run ``task`` in a fresh room until a lull or ``max_loops`` messages; return the
        conversation formatted per ``output_type``.

        Raises RunFailed when the run ends ``failed`` (unless ``raise_on_failure=False``).
        """
        (output,) = self._settle([self._run_room(task, streaming_callback, emit_now)])
        return output

    def run_batch(self, tasks: list[str],
                  streaming_callback: StreamingCallback | None = None) -> list[Any]:
        """Run each task in its own room, side by side; outputs in task order.

        Callbacks (``streaming_callback``, ``verbose`` panels, warnings) come one task at a
        time in task order, never interleaved. A failed run raises RunFailed once every
        task is over; ``conversation`` is then that run's.
        """
        order = InOrder(len(tasks))

        def run_one(index: int, task: str) -> Outcome:
            try:
                return self._run_room(task, streaming_callback, partial(order.deliver, index))
            finally:
                order.finish(index)

        with ThreadPoolExecutor(max_workers=min(16, max(1, len(tasks)))) as pool:
            futures = [pool.submit(run_one, index, task) for index, task in enumerate(tasks)]
        return self._settle([future.result() for future in futures])

    def _run_room(self, task: str, callback: StreamingCallback | None,
                  deliver: Deliver) -> Outcome:
        seen = 0
        streamed: set[tuple[int | None, str]] = set()  # (turn, agent) whose chunks came
        room = self.client.create_room(self.spec)
        turns = TurnsSeen(self.client, room,
                          lambda answer: deliver(partial(self._tell_failure, answer)))

        def on_chunk(chunk: MessageChunk) -> None:
            streamed.add((chunk.turn, chunk.agent))
            if callback is not None and chunk.text:
                deliver(lambda: callback(chunk.agent, chunk.text, False))

        def on_message(message: Message) -> None:
            nonlocal seen
            seen = max(seen, message.seq)
            if message.turn is not None:  # its turn is decided: its failures come first
                turns.catch_up()
            was_streamed = (message.turn, message.sender) in streamed
            deliver(lambda: self._show(message, callback, was_streamed))

        # Only an intent room streams (a full-mode bid's message arrives whole).
        streams = (callback is not None and isinstance(self.spec.policy, BidPolicy)
                   and self.spec.policy.bid_mode == "intent")
        inbox_id = self.client.post(room, task)
        result = self.client.wait(room, inbox_id, on_message=on_message,
                                  on_chunk=on_chunk if streams else None)
        # The wait may end before its last message reached on_message: none is ever missed.
        for message in result.messages:
            if message.seq > seen:
                on_message(message)
        turns.catch_up()  # the turns after the last message (a lull, a failed turn)
        conversation = Conversation(result.messages)
        warning = self._warning(result, turns.records)
        if warning:
            details = {"chat": self.name, "room": result.room, "stop_reason": result.stop_reason,
                       "stop_detail": result.stop_detail}
            deliver(lambda: warn(warning, **details))
        return Outcome(result, conversation, conversation.format(self.output_type))

    def _tell_failure(self, answer: Answer) -> None:
        line = failed_bid_line(self.name, answer)
        warn(line, chat=self.name, agent=answer.agent, turn=answer.turn,
             status=answer.status.value, error_kind=answer.error_kind.value)
        if self.verbose:
            Console().print(Text(line, style="yellow"))

    def _settle(self, outcomes: list[Outcome]) -> list[Any]:
        """Every run's room is kept, whatever failed; the first failed run raises (unless
        ``raise_on_failure`` is off), else the outputs in task order."""
        self.rooms.extend(outcome.result.room for outcome in outcomes)
        failed = next((outcome for outcome in outcomes
                       if outcome.result.status is RoomStatus.FAILED), None)
        if failed is not None and self.raise_on_failure:
            self.conversation = failed.conversation
            raise RunFailed(failed.result, failed.output)
        if outcomes:
            self.conversation = outcomes[-1].conversation
        return [outcome.output for outcome in outcomes]

    def _warning(self, result: RunResult, turns: list[TurnRecord]) -> str | None:
        """swarms' warning for a first turn without a reply; parley's for a failed run."""
        task_only = len(result.messages) <= 1
        # A lull right after the task: was it no reply at all, or replies under the bar?
        first_silent = bool(turns) and not any(bid.message for bid in turns[0].bids)
        if task_only and (result.status is RoomStatus.FAILED or first_silent):
            return f"[{self.name}] {FIRST_TURN_SILENT}"
        if result.status is RoomStatus.FAILED:
            return f"[{self.name}] {RUN_FAILED}"
        return None

    def _show(self, message: Message, callback: StreamingCallback | None,
              streamed: bool = False) -> None:
        # A streamed message's chunks were handed on as they came: only its end is left.
        if callback is not None and streamed:
            callback(message.sender, "", True)
        elif callback is not None:
            stream_message(message, callback)
        if self.verbose:
            score = "" if message.score is None else f"  (score={message.score:.2f})"
            style = "bold green" if message.score is None else "bold blue"
            # Text, not a str: rich reads a str as markup ("[b]" vanishes, "[/]" raises). The
            # panel holds the message alone: its line breaks stay, its control characters
            # are shown escaped.
            Console().print(Panel(Text(terminal_text(message.content, continuation="")),
                                  title=Text(f"{terminal_text(message.sender)}{score}"),
                                  border_style=style))

    def _room_spec(self, agents: list[AgentSpec], max_loops: int, threshold: float,
                   recency_penalty: float, recency_window: int, bid_timeout_s: float,
                   intent: dict[str, Any]) -> RoomSpec:
        try:
            return RoomSpec(
                name=self.name, description=self.description, agents=agents,
                policy=BidPolicy(threshold=threshold, recency_penalty=recency_penalty,
                                 recency_window=recency_window, max_messages=max_loops,
                                 bid_timeout_s=bid_timeout_s, **intent),
            )
        except ValidationError as error:
            problems = describe_fields(error, {"max_messages": "max_loops"})
            raise ValueError(f"GroupChat {self.name!r}: {problems}") from None
