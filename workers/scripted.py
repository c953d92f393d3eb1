"""Offline agents: each script entry becomes the raw completion a provider would return,
so scripted bids go through the same parsing as real model output, with no LLM client.

A script is a list of groups, one per call of the agent: zero or more ``tool_calls``
entries (the model steps of the call's tool loop, one per round), then the entry that
answers. The agent's k-th call replays its k-th group; a script without ``tool_calls``
has one entry per group, so its k-th call replays its k-th entry.

    script:
      - tool_calls: [{name: search_logs, arguments: {service: checkout}}]   # call 1, round 0
      - content: "The logs show timeouts."                                  # call 1's answer
      - content: "Nothing more from me."                                    # call 2
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import orjson

from parley.shared.models import AgentSpec, ScriptEntry
from parley.workers.deadlines import pause
from parley.workers.parsing import parse_text


class ScriptedError(RuntimeError):
    """The error a script entry tells the agent to raise."""


# What an agent past the end of its script answers: a respond call that stays silent.
SILENT = ScriptEntry(score=0.0, message="")


def script_groups(script: list[ScriptEntry]) -> list[list[ScriptEntry]]:
    """The script's entries by call: each group its tool_calls entries, then the entry
    that answers (a script ending in tool_calls entries ends with a group of only those)."""
    groups: list[list[ScriptEntry]] = [[]]
    for entry in script:
        groups[-1].append(entry)
        if entry.tool_calls is None:
            groups.append([])
    return groups if groups[-1] else groups[:-1]


def group_for_call(agent: AgentSpec, number: int) -> list[ScriptEntry]:
    """The agent's k-th call in the room (1-based) replays group k; past the end of the
    script the agent is silent."""
    groups = script_groups(agent.script or [])
    return groups[number - 1] if 0 < number <= len(groups) else [SILENT]


def entry_for_call(agent: AgentSpec, number: int) -> ScriptEntry:
    """The entry that answers the agent's k-th call (silence where its group has none)."""
    last = group_for_call(agent, number)[-1]
    return last if last.tool_calls is None else SILENT


def tool_steps(agent: AgentSpec, number: int) -> list[ScriptEntry]:
    """The tool_calls entries of the agent's k-th call, one per round of its tool loop."""
    return [entry for entry in group_for_call(agent, number) if entry.tool_calls is not None]


def completion(entry: ScriptEntry, function_name: Callable[[str], str] = str) -> dict[str, Any]:
    """The provider-shaped completion (OpenAI chat format) the entry stands for; a
    tool_calls entry's tools named as ``function_name`` offers them."""
    if entry.error is not None:
        raise ScriptedError(entry.error)
    if entry.tool_calls is not None:
        calls = [{"id": f"call_scripted_{index}", "type": "function",
                  "function": {"name": function_name(call.name),
                               "arguments": orjson.dumps(call.arguments).decode()}}
                 for index, call in enumerate(entry.tool_calls)]
        return _response({"role": "assistant", "content": None, "tool_calls": calls})
    if entry.content is not None:
        return _response({"role": "assistant", "content": entry.content})
    if entry.arguments is not None:
        arguments = entry.arguments
    else:
        given = {name: getattr(entry, name) for name in ("score", "message")
                 if name in entry.model_fields_set}
        arguments = orjson.dumps(given).decode()
    call = {"id": "call_scripted", "type": "function",
            "function": {"name": "respond", "arguments": arguments}}
    return _response({"role": "assistant", "content": None, "tool_calls": [call]})


def scripted_completion(agent: AgentSpec, number: int, deadline: float,
                        on_text: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Replay the agent's entry for its ``number``-th call (sleeping first if it says so).
    With ``on_text`` (a call whose answer is posted), its text is handed on word by word,
    the entry's sleep spread over the words, as a model streams it.

    A sleep ends where a model's call would: at the deadline, or at the agent's
    ``timeout_s`` if that comes first (DeadlinePassed, a ``timeout``); at the worker's
    shutdown it ends at once and the entry answers."""
    entry = entry_for_call(agent, number)
    if agent.timeout_s is not None:
        deadline = min(deadline, time.time() + agent.timeout_s)
    if on_text is None or entry.error is not None:
        if entry.sleep:
            pause(entry.sleep, deadline, "the script's sleep")
        return completion(entry)
    response = completion(entry)
    words = stream_words(parse_text(response).message)
    for word in words:
        if entry.sleep:
            pause(entry.sleep / len(words), deadline, "the script's sleep")
        on_text(word)
    return response


def scripted_tool_step(agent: AgentSpec, number: int, round_: int, deadline: float,
                       function_name: Callable[[str], str]) -> dict[str, Any] | None:
    """The ``round_``-th tool_calls entry of the agent's ``number``-th call as a completion
    (after its sleep), or None when the call has no more: its answering entry comes next."""
    steps = tool_steps(agent, number)
    if round_ >= len(steps):
        return None
    entry = steps[round_]
    if agent.timeout_s is not None:
        deadline = min(deadline, time.time() + agent.timeout_s)
    if entry.sleep:
        pause(entry.sleep, deadline, "the script's sleep")
    return completion(entry, function_name)


def stream_words(text: str) -> list[str]:
    """``text`` cut into words, each with the space after it: they concatenate to it."""
    words = text.split(" ")
    return [f"{word} " for word in words[:-1]] + [words[-1]] if text else []


def _response(message: dict[str, Any]) -> dict[str, Any]:
    return {"object": "chat.completion", "model": "scripted",
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}}
