"""What an agent's model is sent for one call: each call kind's prompt (``CALL_PROMPTS``,
its template in workers/templates/), the tool it forces, and the room's transcript as typed
chat turns, trimmed to the model's context budget.

Nothing inside a message can pass for another speaker: the sender of each other speaker's
turn is given outside its content (the chat ``name`` field) and by a ``Sender: `` prefix
the content follows, and every line of the content that reads as a participant taking the
floor (``Optimist: I agree``, see shared.speakers) is quoted as ``> Optimist: I agree``.
The decide prompt quotes the whole latest message, so none of its lines reads as prompt.

A message written from tool calls is followed by their results where its reader may read
them (``Message.shows_tool_results``: every agent in a room whose ``tool_results`` is
shared, its sender alone in a private one), after a line saying what they are: each call
and its whole result quoted, the result cut at its first line that speaks as a participant.

Pure functions: token counting comes in as a function (workers.llm passes litellm's
counter), so this module never imports an LLM client.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import cache, lru_cache
from importlib import resources
from itertools import count as numbering
from typing import Any, cast
from weakref import WeakKeyDictionary, ref

import orjson

from parley.shared.mentions import read_names
from parley.shared.models import (
    SEED_SENDER,
    TRANSFER_PREFIX,
    AgentSpec,
    BidPolicy,
    CallKind,
    HandoffPolicy,
    MentionPolicy,
    Message,
    RoomSpec,
    transfer_tool,
)
from parley.shared.protocol import RESPOND, RESPOND_INTENT_TOOL, RESPOND_TOOL
from parley.shared.speakers import QUOTE, SpeakerLines, quote_speaker_lines, speaker_lines

ChatMessage = dict[str, Any]
_PLACEHOLDER = re.compile(r"\{\{(\w+)\}\}")
TokenCounter = Callable[[list[ChatMessage]], int]

# A tool call's arguments, as its line in a prompt shows them, are cut to this many characters.
TOOL_ARGUMENTS_CHARS = 300
# Rendered turns a worker keeps (chat_turn): a few long rooms' worth, a few MB.
RENDERED_TURNS = 8192

# What OpenAI accepts in a chat message's ``name``; anything else in a sender becomes "_".
_CHAT_NAME_LENGTH = 64
_NOT_IN_CHAT_NAME = re.compile(r"[^A-Za-z0-9_-]+")

# tool_choice naming the tool: the model must call respond, not answer in prose.
RESPOND_CHOICE: dict[str, Any] = {"type": "function", "function": {"name": RESPOND}}
# The arguments that force the respond call (and count it in the prompt's tokens).
FORCE_RESPOND: dict[str, Any] = {"tools": [RESPOND_TOOL], "tool_choice": RESPOND_CHOICE}
# An intent bids respond(score, intent).
FORCE_RESPOND_INTENT: dict[str, Any] = {"tools": [RESPOND_INTENT_TOOL],
                                        "tool_choice": RESPOND_CHOICE}

@dataclass(frozen=True)
class Prompt:
    """The chat messages of one bid call, and how many transcript messages were left out."""

    messages: list[ChatMessage]
    dropped: int = 0


def system_message(agent: AgentSpec) -> ChatMessage:
    """The agent's own system prompt, or a one-line identity when it has none."""
    content = agent.system_prompt.strip()
    if not content:
        content = f"You are {agent.name}" + (f", who {agent.role}." if agent.role else ".")
    return {"role": "system", "content": content}


def profile(agent: AgentSpec) -> str:
    """The agent's role and description, as the others read them: ``Developer — Knows
    the code``, either alone, or empty."""
    return " — ".join(part for part in (agent.role.strip(), agent.description.strip()) if part)


def describe_agent(agent: AgentSpec) -> str:
    """``Name`` or ``Name (role — description)``, as the other agents see it."""
    known = profile(agent)
    return f"{agent.name} ({known})" if known else agent.name


def roles_text(agents: Iterable[AgentSpec], asked: Sequence[str] = (), person: str = "") -> str:
    """One ``- name: role — description`` line per agent (``participant`` when it has
    neither), marked ``(asked <person>)`` for the agents in ``asked``."""
    return "\n".join(f"- {agent.name}: {profile(agent) or 'participant'}"
                     + (f" (asked {person})" if agent.name in asked else "")
                     for agent in agents)


def participant_names(room_agents: Iterable[str], transcript: Sequence[Message]) -> list[str]:
    """Every name a line of content could speak under: the room's agents, the person who
    posts the task, and every sender in the transcript; in that order, once each."""
    names = [*room_agents, SEED_SENDER, *(message.sender for message in transcript)]
    return list(dict.fromkeys(names))


def sender_label(sender: str) -> str:
    """A sender as shown before its message: on one line, whatever it holds."""
    return " ".join(sender.split()) or "?"


def chat_name(sender: str) -> str | None:
    """A sender as a chat message's ``name`` (``^[a-zA-Z0-9_-]{1,64}$``), or None when
    nothing of it fits (then only the visible prefix names the sender)."""
    name = _NOT_IN_CHAT_NAME.sub("_", sender).strip("_")
    return name[:_CHAT_NAME_LENGTH].rstrip("_") or None


def quote_block(text: str) -> str:
    """Every line of ``text`` as a Markdown blockquote line."""
    return "".join(QUOTE + line for line in text.splitlines(keepends=True)) or QUOTE.rstrip()


def others_text(agent: AgentSpec, room_agents: Sequence[AgentSpec]) -> str:
    """The other agents of the room, described, for the bid-like instructions."""
    others = [describe_agent(other) for other in room_agents if other.name != agent.name]
    return ", ".join(others) or "nobody else yet"


def tool_results_text(message: Message, names: Sequence[str]) -> str:
    """The tool calls ``message`` was written from, as its readers read them after it: a
    line saying what follows, then each call's tool, arguments and status, and its result
    quoted, cut at its first line that speaks as one of ``names`` (a tool result speaks for
    nobody)."""
    lines = speaker_lines(names)
    calls = []
    for call in message.tool_calls or []:
        arguments = orjson.dumps(call.arguments).decode()
        if len(arguments) > TOOL_ARGUMENTS_CHARS:
            arguments = arguments[:TOOL_ARGUMENTS_CHARS - 3] + "..."
        status = call.status.value + (f", approved by {call.approved_by}"
                                      if call.approved_by else "")
        result = cut_forged(call.result, lines)
        calls.append(quote_block(f"{call.tool}({arguments}) -> {status}\n{result or '(empty)'}"))
    return render(template("tool_results"), sender=sender_label(message.sender),
                  calls="\n>\n".join(calls))


def cut_forged(result: str, lines: SpeakerLines) -> str:
    """A tool's ``result`` up to its first line that speaks as a participant (a tool result
    speaks for nobody: nothing after it can pass for someone's turn), marked there."""
    found = lines.first(result)
    if found is None:
        return result
    return f"{result[:found[0]].rstrip()}\n[cut: the result spoke as {found[1]}]"


def shown_content(message: Message, names: Sequence[str], reader: str) -> str:
    """``message``'s content as ``reader`` reads another's message (speaker lines quoted),
    followed by its tool results where ``reader`` may read them."""
    content = quote_speaker_lines(message.content, names)
    if message.shows_tool_results(reader):
        content = f"{content}\n\n{tool_results_text(message, names)}"
    return content


def decide_prompt(agent: AgentSpec, room_agents: Sequence[AgentSpec],
                  transcript: Sequence[Message], kind: str = "bid") -> str:
    """The decide instruction (``kind``'s template: bid, or intent): who the agent is, who
    else is here, and the latest message (quoted, its speaker lines quoted once more, its
    tool results after it where the agent may read them)."""
    latest = transcript[-1] if transcript else None
    if latest is None:
        message = "(the conversation is empty)"
    else:
        names = participant_names((other.name for other in room_agents), transcript)
        message = quote_block(shown_content(latest, names, agent.name))
    return render(
        template(kind),
        agent=agent.name,
        others=others_text(agent, room_agents),
        sender=sender_label(latest.sender) if latest else "nobody",
        sender_note=" (you)" if latest and latest.sender == agent.name else "",
        message=message,
    )


def other_turn(message: Message, names: Sequence[str], reader: str = "") -> ChatMessage:
    """Another speaker's message as a ``user`` turn: ``Sender: content``, the sender also
    in the ``name`` field, the content's speaker lines quoted, and its tool results after
    it where ``reader`` may read them."""
    content = shown_content(message, names, reader)
    # A quoted first line needs a line of its own to read as a quotation.
    separator = "\n" if content.startswith(QUOTE.rstrip()) else " "
    turn: ChatMessage = {"role": "user"}
    name = chat_name(message.sender)
    if name is not None:
        turn["name"] = name
    turn["content"] = f"{sender_label(message.sender)}:{separator}{content}"
    return turn


def chat_turn(agent_name: str, message: Message, names: Sequence[str]) -> ChatMessage:
    """One message from one agent's point of view (see rendered_turn), rendered once per
    reader and set of names: a worker's later calls of the room reuse it, so a call's
    prompt costs the same at message 560 as at message 40. Messages with tool calls are
    rendered each time (few, and their results are read by some readers only)."""
    if message.tool_calls:
        return rendered_turn(agent_name, message, names)
    names = names if isinstance(names, tuple) else tuple(names)
    return dict(_plain_turn(agent_name, message.sender, message.content, names))


@lru_cache(maxsize=RENDERED_TURNS)
def _plain_turn(agent_name: str, sender: str, content: str, names: tuple[str, ...]
                ) -> ChatMessage:
    return rendered_turn(agent_name, Message(seq=0, sender=sender, content=content), names)


def rendered_turn(agent_name: str, message: Message, names: Sequence[str]) -> ChatMessage:
    """One message from one agent's point of view: its own as an ``assistant`` turn (its
    tool results after it), anyone else's as a ``user`` turn naming the speaker (see
    other_turn)."""
    if message.sender == agent_name:
        content = message.content
        if message.shows_tool_results(agent_name):
            content = f"{content}\n\n{tool_results_text(message, names)}"
        return {"role": "assistant", "content": content}
    return other_turn(message, names, agent_name)


def chat_turns(agent_name: str, transcript: Sequence[Message],
               room_agents: Iterable[str] = ()) -> list[ChatMessage]:
    """The transcript from one agent's point of view (see chat_turn); ``room_agents`` are
    the room's agent names, whose speaker lines are quoted even before they speak."""
    names = participant_names(room_agents, transcript)
    return [chat_turn(agent_name, message, names) for message in transcript]


def input_budget(context_window: int | None, max_reply_tokens: int | None,
                 margin: float = 0.05, default_reply_tokens: int = 1024) -> int | None:
    """Tokens the prompt may use: the window less the reply's room and a margin for
    tokenizers that count differently from the provider. None when the window is unknown."""
    if context_window is None:
        return None
    reply = max_reply_tokens or min(default_reply_tokens, context_window // 4)
    return int(context_window * (1 - margin)) - reply


def task_index(transcript: Sequence[Message]) -> int:
    """Where the current run's task is: the first message of the latest run (a log's runs
    never go down, so a bisection finds it)."""
    if not transcript or transcript[0].run == transcript[-1].run:
        return 0
    return bisect_left(transcript, transcript[-1].run, key=lambda message: message.run)


class Tally:
    """Each message's tokens under one counter, counted the first time a prompt needs them
    and kept, with a running total along the log: a budget check over a long conversation
    then reads two totals instead of counting every message again.

    A message is counted as another speaker's turn (its ``Sender:`` prefix and chat name
    included) with its tool results, which is at least what it costs any reader as the
    agent's own turn or as a line of a thread. A running total continues the one of the
    message before it in the transcript it was counted in; a transcript whose ends belong
    to different runs of totals (say, a log read again from Redis) is counted again from
    its first message.
    """

    # Counts kept at most (about 200 bytes each); past it the tally starts over. A count
    # holds its message weakly: a log the worker no longer keeps is not kept alive here.
    LIMIT = 250_000

    def __init__(self, count: TokenCounter) -> None:
        self.count = count
        # id(message) -> (message, own tokens, running total, which run of totals)
        self.kept: dict[int, tuple[ref[Message], int, int, int]] = {}
        self.chains = numbering()
        self.empty: int | None = None  # what a request of no messages counts
        # id(first message) -> (that message, how many newest messages fitted last time):
        # the next check of the same log starts there, as its cut moves little per turn.
        self.hints: dict[int, tuple[ref[Message], int]] = {}

    def entry(self, message: Message) -> tuple[ref[Message], int, int, int] | None:
        found = self.kept.get(id(message))
        return found if found is not None and found[0]() is message else None

    def prefix(self, transcript: Sequence[Message], names: Sequence[str]
               ) -> Callable[[int], int]:
        """Tokens of ``transcript[:i]`` as a function of ``i``."""
        if len(self.kept) > self.LIMIT:
            self.kept.clear()
            self.hints.clear()
        new = len(transcript)
        while new and self.entry(transcript[new - 1]) is None:
            new -= 1
        first, last = self.entry(transcript[0]), self.entry(transcript[new - 1]) if new else None
        if first is None or last is None or first[3] != last[3]:
            new = 0
        if new < len(transcript) and self.empty is None:
            self.empty = self.count([])
        for i in range(new, len(transcript)):
            message = transcript[i]
            own = self.count([other_turn(message, names, message.sender)]) - (self.empty or 0)
            before = self.kept[id(transcript[i - 1])] if i else None
            chain = before[3] if before else next(self.chains)
            self.kept[id(message)] = (ref(message), own, own + (before[2] if before else 0), chain)
        _, own, total, _ = self.kept[id(transcript[0])]
        base = total - own
        return lambda i: self.kept[id(transcript[i - 1])][2] - base if i else 0


_tallies: WeakKeyDictionary[Callable[..., int], Tally] = WeakKeyDictionary()


def tally_for(count: TokenCounter) -> Tally:
    """The counts kept for ``count`` (one tally per counter, for as long as it lives)."""
    try:
        tally = _tallies.get(count)
        if tally is None:
            tally = _tallies.setdefault(count, Tally(count))
    except TypeError:  # a builtin (say ``len``) cannot be weakly referenced: count afresh
        return Tally(count)
    return tally


def fit(transcript: Sequence[Message], names: Sequence[str], budget: int,
        count: TokenCounter) -> tuple[range, range]:
    """Which messages fit into ``budget`` tokens: the run's task always (the first range,
    empty when the rest holds it), then the newest ones (the second); the oldest go first.
    A bisection over the kept running totals, so it costs about the same at 10,000
    messages as at 10."""
    if not transcript:
        return range(0), range(0)
    tally = tally_for(count)
    tokens = tally.prefix(transcript, names)
    end, keep = len(transcript), task_index(transcript)
    task = tokens(keep + 1) - tokens(keep)

    def fits(cut: int) -> bool:
        return tokens(end) - tokens(cut) + (task if keep < cut else 0) <= budget

    hint = tally.hints.get(id(transcript[0]))
    cut = end - hint[1] if hint is not None and hint[0]() is transcript[0] else -1
    if not (0 <= cut <= end and fits(cut) and (cut == 0 or not fits(cut - 1))):
        cut = bisect_left(range(end + 1), True, key=fits)
    tally.hints[id(transcript[0])] = (ref(transcript[0]), end - cut)
    return range(keep, min(keep + 1, cut)), range(cut, end)


def fitted(transcript: Sequence[Message], names: Sequence[str], budget: int | None,
           count: TokenCounter) -> list[Message]:
    """The messages that fit into ``budget`` (all of them when it is None), in order."""
    if budget is None:
        return list(transcript)
    task, newest = fit(transcript, names, budget, count)
    return [*transcript[task.start:task.stop], *transcript[newest.start:newest.stop]]


def build_prompt(agent: AgentSpec, room_agents: Sequence[AgentSpec],
                 transcript: Sequence[Message], budget: int | None,
                 count: TokenCounter) -> Prompt:
    """System prompt, transcript turns and decide instruction, fitted into ``budget``
    tokens (``count`` counts a list of chat messages, tools included)."""
    return turns_prompt(agent, room_agents, transcript, budget, count,
                        decide_prompt(agent, room_agents, transcript))


def build_intent_prompt(agent: AgentSpec, room_agents: Sequence[AgentSpec],
                        transcript: Sequence[Message], budget: int | None,
                        count: TokenCounter) -> Prompt:
    """An intent-mode bid: the bid prompt's layout, its instruction asking for one line of
    what the agent would say rather than the message."""
    return turns_prompt(agent, room_agents, transcript, budget, count,
                        decide_prompt(agent, room_agents, transcript, "intent"))


def build_reply_prompt(agent: AgentSpec, room_agents: Sequence[AgentSpec],
                       transcript: Sequence[Message], budget: int | None,
                       count: TokenCounter, intent: str = "") -> Prompt:
    """The intent-mode winner's reply: the same system prompt and transcript turns as its
    intent call (a provider's prompt cache holds them), then its intent to write out."""
    names = participant_names((other.name for other in room_agents), transcript)
    instruction = render(template("reply"), agent=agent.name,
                         others=others_text(agent, room_agents),
                         intent=quote_block(quote_speaker_lines(intent, names)))
    return turns_prompt(agent, room_agents, transcript, budget, count, instruction)


def turns_prompt(agent: AgentSpec, room_agents: Sequence[AgentSpec],
                 transcript: Sequence[Message], budget: int | None, count: TokenCounter,
                 instruction_text: str) -> Prompt:
    """System prompt, transcript turns, then the instruction: what changes turn to turn
    comes last, so a provider's prompt cache holds the rest. Fitted into ``budget``."""
    system = system_message(agent)
    instruction = {"role": "user", "content": instruction_text}
    names = tuple(participant_names((other.name for other in room_agents), transcript))
    kept = fitted(transcript, names, None if budget is None
                  else budget - count([system, instruction]), count)
    turns = [chat_turn(agent.name, message, names) for message in kept]
    return Prompt([system, *turns, instruction], len(transcript) - len(turns))


def render(template: str, **values: str) -> str:
    """Fill ``{{name}}`` placeholders in one pass: text put in is never read again, so a
    message that contains ``{{task}}`` stays as written."""
    return _PLACEHOLDER.sub(lambda match: values[match.group(1)], template)


@cache
def template(kind: str) -> str:
    """The prompt template of a call kind, ``workers/templates/<kind>.md``."""
    text = resources.files("parley.workers").joinpath("templates", f"{kind}.md").read_text()
    return text.rstrip("\n")  # a file ends with a newline; the prompt does not


def thread_lines(transcript: Sequence[Message], names: Sequence[str], reader: str = ""
                 ) -> list[str]:
    """The conversation as ``Name: message`` entries, one per message, each followed by its
    tool results where ``reader`` may read them; a line inside a message that looks like
    another entry (``Name:`` of a participant) is quoted."""
    return [f"{sender_label(message.sender)}: {shown_content(message, names, reader)}"
            for message in transcript]


def fit_thread(transcript: Sequence[Message], names: Sequence[str], fixed: list[ChatMessage],
               budget: int | None, count: TokenCounter, reader: str = "") -> tuple[str, int]:
    """The thread's text as ``reader`` reads it, within what ``budget`` leaves after the
    ``fixed`` messages, oldest replies dropped first and the run's task always kept; and
    how many dropped."""
    kept = fitted(transcript, names, None if budget is None else budget - count(fixed), count)
    return "\n\n".join(thread_lines(kept, names, reader)), len(transcript) - len(kept)


def build_select_prompt(selector: AgentSpec, participants: Sequence[AgentSpec],
                        transcript: Sequence[Message], budget: int | None,
                        count: TokenCounter) -> Prompt:
    """Seed 002's Speaker selector prompt over the thread."""
    system = [system_message(selector)] if selector.system_prompt.strip() else []
    names = ", ".join(agent.name for agent in participants)
    roles = roles_text(participants)
    frame = render(template("select"), roles=roles, thread="", participants=names)
    speakers = participant_names((agent.name for agent in participants), transcript)
    thread, dropped = fit_thread(transcript, speakers, [*system, _user(frame)], budget, count,
                                 selector.name)
    prompt = render(template("select"), roles=roles, thread=thread, participants=names)
    return Prompt([*system, _user(prompt)], dropped)


def build_speak_prompt(agent: AgentSpec, participants: Sequence[AgentSpec],
                       transcript: Sequence[Message], budget: int | None,
                       count: TokenCounter) -> Prompt:
    """Seed 002's Participant prompt: the agent's role, the task and the whole thread."""
    return thread_prompt("speak", [system_message(agent)], agent, participants, transcript,
                         budget, count, role=agent.role or "participant")


def build_discuss_prompt(agent: AgentSpec, participants: Sequence[AgentSpec],
                         transcript: Sequence[Message], budget: int | None,
                         count: TokenCounter) -> Prompt:
    """A mention room's turn: the agent's role, how names work, the task and the thread
    (the room's notes for the turn are in the agent's system prompt: see
    discussion_notes)."""
    others = [other.name for other in participants if other.name != agent.name]
    return thread_prompt("discuss", [system_message(agent)], agent, participants, transcript,
                         budget, count, role=agent.role or "participant",
                         first=others[0] if others else agent.name)


def discussion_notes(people: Sequence[str], silent_token: str, instruction: str = "") -> str:
    """What a mention room tells an agent for its turn: the people it may address, how to
    stay silent, and the operator's instruction the turn takes as its input."""
    lines = [f"If you have nothing to add, answer exactly {silent_token}: nothing is "
             "posted."]
    if people:
        lines.insert(0, "People in the room: " + ", ".join(f"@{name}" for name in people)
                     + ".")
    if instruction:
        lines.append(f"For this turn, the operator instructs you: {instruction}")
    return "\n".join(lines)


def task_caller(agent: AgentSpec, instruction: str) -> AgentSpec:
    """A background task's worker (seed 003's tasks): its system prompt, then the task it
    works off the floor, given the room's last messages as its context."""
    own = system_message(agent)["content"]
    notes = ("You are working a background task, apart from the conversation below (its "
             f"last messages, for context). The task: {instruction}\n"
             "Work it through, with your tools if you have any, and answer with its result "
             "only: it is handed back to the room.")
    return agent.model_copy(update={"system_prompt": f"{own}\n\n{notes}"})


def tasks_notes(lines: Sequence[str]) -> str:
    """What a turn's notes say of the room's background tasks (answer from these when
    asked how a task goes)."""
    if not lines:
        return ""
    return "The room's background tasks (from the newest):\n" + "\n".join(lines)


def with_task_notes(agent: AgentSpec, notes: str) -> AgentSpec:
    """The agent with the room's task notes after its system prompt."""
    if not notes:
        return agent
    own = system_message(agent)["content"]
    return agent.model_copy(update={"system_prompt": f"{own}\n\n{notes}"})


def build_panel_prompt(agent: AgentSpec, room_agents: Sequence[AgentSpec],
                       transcript: Sequence[Message], budget: int | None,
                       count: TokenCounter) -> Prompt:
    """A round-table panelist's turn (seed 004): its perspective and system prompt, the
    question (the run's task), the others at the table and the transcript so far."""
    return thread_prompt("panel", own_system(agent), agent, room_agents, transcript, budget,
                         count, role=agent.role or "the one your instructions give you")


def build_moderate_prompt(agent: AgentSpec, room_agents: Sequence[AgentSpec],
                          transcript: Sequence[Message], budget: int | None,
                          count: TokenCounter) -> Prompt:
    """A round-table moderator's verdict (seed 004): the question, the panelists (every
    other agent) and the whole debate, to be weighed into one verdict with its reasons."""
    return thread_prompt("moderate", own_system(agent), agent, room_agents, transcript,
                         budget, count)


def own_system(agent: AgentSpec) -> list[ChatMessage]:
    """The agent's system prompt as the first message, or none when it has none (the
    template says who the agent is)."""
    return [system_message(agent)] if agent.system_prompt.strip() else []


def thread_prompt(kind: str, system: list[ChatMessage], agent: AgentSpec,
                  room_agents: Sequence[AgentSpec], transcript: Sequence[Message],
                  budget: int | None, count: TokenCounter, **values: str) -> Prompt:
    """``kind``'s template filled with the agent's name, the others in the room, the run's
    task and the thread (fitted into ``budget``, the task always kept), after ``system``;
    ``values`` fill the template's other placeholders."""
    others = ", ".join(describe_agent(other) for other in room_agents if other.name != agent.name)
    speakers = participant_names((other.name for other in room_agents), transcript)
    task = transcript[task_index(transcript)].content if transcript else ""
    values = {"name": agent.name, "others": others or "nobody else",
              "task": quote_speaker_lines(task, speakers), **values}
    frame = render(template(kind), thread="", **values)
    thread, dropped = fit_thread(transcript, speakers, [*system, _user(frame)], budget, count,
                                 agent.name)
    return Prompt([*system, _user(render(template(kind), thread=thread, **values))], dropped)


def build_dispatch_prompt(classifier: AgentSpec, participants: Sequence[AgentSpec],
                          transcript: Sequence[Message], budget: int | None,
                          count: TokenCounter) -> Prompt:
    """A mention room's classifier prompt: each agent's name, role and description
    (marked when it asked the last message's sender), the recent conversation, and the
    message to route."""
    system = own_system(classifier)
    person = transcript[-1].sender if transcript else SEED_SENDER
    asked = askers_of(person, transcript, [agent.name for agent in participants])
    roles = roles_text(participants, asked, person)
    values = {"roles": roles, "person": person,
              "first": participants[0].name if participants else "agent"}
    speakers = participant_names((agent.name for agent in participants), transcript)
    frame = render(template("dispatch"), thread="", **values)
    thread, dropped = fit_thread(transcript, speakers, [*system, _user(frame)], budget, count,
                                 classifier.name)
    return Prompt([*system, _user(render(template("dispatch"), thread=thread, **values))],
                  dropped)


def build_handoff_prompt(agent: AgentSpec, room_agents: Sequence[AgentSpec],
                         transcript: Sequence[Message], budget: int | None,
                         count: TokenCounter, intent: str = "") -> Prompt:
    """A handoff room's active agent: its role, the task and the thread, how to hand the
    conversation on; ``intent`` is the policy's word on a transfer it refused."""
    refused = f"\n\n{intent}" if intent else ""
    return thread_prompt("handoff", [system_message(agent)], agent, room_agents, transcript,
                         budget, count, role=agent.role or "participant", refused=refused)


def askers_of(person: str, transcript: Sequence[Message], agents: Sequence[str]) -> list[str]:
    """The agents that named ``person`` since that person's message before the last."""
    earlier = [i for i, message in enumerate(transcript[:-1]) if message.sender == person]
    since = transcript[(earlier[-1] + 1 if earlier else 0):-1]
    return [message.sender for message in since if message.sender in agents
            and person.casefold() in {name.casefold() for name in read_names(message.content)}]


def _user(content: str) -> ChatMessage:
    return {"role": "user", "content": content}


# Marks the end of a prompt's cacheable prefix, for providers that cache only where marked.
CACHE_BREAKPOINT: dict[str, str] = {"type": "ephemeral"}


def with_cache_breakpoint(messages: list[ChatMessage]) -> list[ChatMessage]:
    """``messages`` with the end of what the next turn's prompt repeats marked for the
    provider's prompt cache: the message before the last (the last is the instruction,
    which changes every turn), or a lone system prompt. Other messages are left as they
    are; a prompt of one message has nothing to mark."""
    if len(messages) < 2:
        return messages
    index = len(messages) - 2
    marked = dict(messages[index])
    marked["content"] = [{"type": "text", "text": marked["content"],
                          "cache_control": CACHE_BREAKPOINT}]
    return [*messages[:index], marked, messages[-1]]


def as_asked(spec: RoomSpec, agent: AgentSpec, instruction: str) -> AgentSpec:
    """The agent as the spec has it: its call kind adds nothing to it."""
    return agent


def instructed_caller(spec: RoomSpec, agent: AgentSpec, instruction: str) -> AgentSpec:
    """A participant's turn, with the input it takes, if any, after the agent's system
    prompt (a relay turn: its background task's result, to say in its own words)."""
    if not instruction:
        return agent
    own = system_message(agent)["content"]
    return agent.model_copy(update={"system_prompt": f"{own}\n\nFor this turn: {instruction}"})


def intent_caller(spec: RoomSpec, agent: AgentSpec, instruction: str) -> AgentSpec:
    """An intent's caller: at most the room's intent_max_tokens (an intent is one line)."""
    most = cast(BidPolicy, spec.policy).intent_max_tokens  # intents are a bid room's calls
    return agent.model_copy(update={"max_tokens": min(agent.max_tokens or most, most)})


def discussion_caller(spec: RoomSpec, agent: AgentSpec, instruction: str) -> AgentSpec:
    """A mention room's turn: the room's notes for the turn (its people, the silent token,
    the operator's instruction) after the agent's system prompt."""
    policy = cast(MentionPolicy, spec.policy)  # discussion turns are a mention room's calls
    notes = discussion_notes(policy.people or [], policy.silent_token, instruction)
    own = system_message(agent)["content"]
    return agent.model_copy(update={"system_prompt": f"{own}\n\n{notes}"})


@dataclass(frozen=True)
class PolicyTools:
    """Tools a call's kind offers beside the agent's own (OpenAI's format) whose calls are
    not run: one ends the call, told on its answer (``Answer.policy_call``), and the
    policy decides what it does. A call of a name starting with ``prefix`` ends the call
    too, offered or not, so that the policy rules on one it did not offer."""

    offered: tuple[dict[str, Any], ...] = ()
    prefix: str = ""

    def ends_call(self, name: str) -> bool:
        """True when a tool call of ``name`` is the policy's, not the agent's."""
        return (bool(self.prefix) and name.startswith(self.prefix)) or any(
            tool["function"]["name"] == name for tool in self.offered)


NO_POLICY_TOOLS = PolicyTools()


def no_policy_tools(spec: RoomSpec, agent: AgentSpec) -> PolicyTools:
    """A call kind that offers only the agent's own tools."""
    return NO_POLICY_TOOLS


WORK_IN_BACKGROUND = "work_in_background"
# The tool an agent with background work set up is offered on every call whose answer is
# posted (never in a task's own call: a worker starts no task of its own).
WORK_TOOL: dict[str, Any] = {"type": "function", "function": {
    "name": WORK_IN_BACKGROUND,
    "description": ("Start long work as a background task, off the floor: it runs while the "
                    "conversation goes on, and its result comes back to the room when done. "
                    "Say in a sentence that you are on it."),
    "parameters": {"type": "object", "properties": {
        "what": {"type": "string", "description": "What to do, in full: the task's worker "
                 "reads only this and the room's last messages."}},
        "required": ["what"]}}}


def with_background_tools(tools: PolicyTools, agent: AgentSpec) -> PolicyTools:
    """The call kind's policy tools, and work_in_background for an agent set up for it."""
    if agent.background is None:
        return tools
    return PolicyTools((*tools.offered, WORK_TOOL), tools.prefix)


def transfer_tools(spec: RoomSpec, agent: AgentSpec) -> PolicyTools:
    """A handoff room's ``transfer_to_<agent>`` tools: one per agent ``agent`` may hand the
    conversation to, each with the reason as its argument."""
    policy = cast(HandoffPolicy, spec.policy)  # handoff calls are a handoff room's
    tools = tuple(
        {"type": "function", "function": {
            "name": transfer_tool(target.name),
            "description": f"Hand the conversation to {describe_agent(target)}: it takes "
                           "the next turn and talks with the people from then on.",
            "parameters": {"type": "object", "properties": {"reason": {
                "type": "string", "description": "Why it should take over, in a sentence."}},
                "required": ["reason"]}}}
        for target in map(spec.agent, policy.targets(agent.name, spec.agent_names)))
    return PolicyTools(tools, TRANSFER_PREFIX)


def nothing_held(spec: RoomSpec) -> str:
    """A call whose streamed text holds nothing back."""
    return ""


def silent_token(spec: RoomSpec) -> str:
    """A mention room's silent token: never streamed, as it is never posted."""
    return cast(MentionPolicy, spec.policy).silent_token


@dataclass(frozen=True)
class CallPrompt:
    """How a worker makes one kind of call: its prompt, the tool it forces (its answer is
    then that respond call, read as a score and a message) or none (plain text), whether
    its text streams to the room as the model writes it (a call whose answer is posted),
    what the room's spec adds to its caller, the text its stream holds back, and the
    policy's own tools it offers beside the agent's."""

    build: Callable[..., Prompt]
    forces: dict[str, Any] | None = None
    streams: bool = False
    reads_instruction: bool = False  # the call's instruction is its builder's ``intent``
    caller: Callable[[RoomSpec, AgentSpec, str], AgentSpec] = as_asked
    held: Callable[[RoomSpec], str] = nothing_held
    policy_tools: Callable[[RoomSpec, AgentSpec], PolicyTools] = no_policy_tools

    def prompt(self, agent: AgentSpec, room_agents: Sequence[AgentSpec],
               transcript: Sequence[Message], budget: int | None, count: TokenCounter,
               instruction: str = "") -> Prompt:
        """The call's prompt, given the input the call takes (``instruction``)."""
        if self.reads_instruction:
            return self.build(agent, room_agents, transcript, budget, count, intent=instruction)
        return self.build(agent, room_agents, transcript, budget, count)


# Every call kind, as a worker makes it. A call whose answer is posted streams its text (a
# full-mode bid's message comes whole, inside its respond call).
CALL_PROMPTS: dict[CallKind, CallPrompt] = {
    CallKind.BID: CallPrompt(build_prompt, forces=FORCE_RESPOND),
    CallKind.INTENT: CallPrompt(build_intent_prompt, forces=FORCE_RESPOND_INTENT,
                                caller=intent_caller),
    CallKind.REPLY: CallPrompt(build_reply_prompt, streams=True, reads_instruction=True),
    CallKind.SELECT: CallPrompt(build_select_prompt),
    CallKind.SPEAK: CallPrompt(build_speak_prompt, streams=True, caller=instructed_caller),
    CallKind.PANEL: CallPrompt(build_panel_prompt, streams=True),
    CallKind.MODERATE: CallPrompt(build_moderate_prompt, streams=True),
    CallKind.DISPATCH: CallPrompt(build_dispatch_prompt),
    CallKind.DISCUSS: CallPrompt(build_discuss_prompt, streams=True,
                                 caller=discussion_caller, held=silent_token),
    CallKind.HANDOFF: CallPrompt(build_handoff_prompt, streams=True, reads_instruction=True,
                                 policy_tools=transfer_tools),
}


# What the model reads of a tool call that did not return a result, by its status.
TOOL_STATUS_NOTES = {
    "error": "The tool failed",
    "timeout": "The tool timed out",
    "denied": "The tool call was denied",
    "uncertain": "The result is unknown because the worker running the tool stopped",
}


def tool_result_content(status: str, text: str, names: Sequence[str]) -> str:
    """A tool call's result as the model reads it: untrusted text, as a post is. Cut where
    a line speaks as a participant (nothing after it can pass for someone's turn), its
    speaker lines quoted, the whole of it a quotation; a call that did not return says
    why first."""
    text = cut_forged(text, speaker_lines(names))
    note = TOOL_STATUS_NOTES.get(status)
    body = quote_block(quote_speaker_lines(text, names)) if text else ""
    if note is None:
        return body or "(the tool returned nothing)"
    return f"{note}:\n{body}" if body else f"{note}."
