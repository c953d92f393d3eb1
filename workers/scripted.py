"""Offline agents: each script entry becomes the raw completion a provider would return,
so scripted bids go through the same parsing as real model output, with no LLM client."""

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


def entry_for_call(agent: AgentSpec, number: int) -> ScriptEntry:
    """The agent's k-th call in the room (1-based) replays entry k; past the end of the
    script the agent is silent."""
    script = agent.script or []
    return script[number - 1] if 0 < number <= len(script) else SILENT


def completion(entry: ScriptEntry) -> dict[str, Any]:
    """The provider-shaped completion (OpenAI chat format) the entry stands for."""
    if entry.error is not None:
        raise ScriptedError(entry.error)
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


def stream_words(text: str) -> list[str]:
    """``text`` cut into words, each with the space after it: they concatenate to it."""
    words = text.split(" ")
    return [f"{word} " for word in words[:-1]] + [words[-1]] if text else []


def _response(message: dict[str, Any]) -> dict[str, Any]:
    return {"object": "chat.completion", "model": "scripted",
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}}
