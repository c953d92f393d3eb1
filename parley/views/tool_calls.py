"""How a tool call is told, in one line: ``Investigator used search_logs(service=checkout)
→ 12 lines``, under the turn that made it (``parley run``, ``parley turns``) and under the
message written from it (``parley follow``, ``parley transcript``). Pure, and a leaf of
the views, so that every printer can use it."""

from __future__ import annotations

import json
import re
from typing import Any

from parley.shared.logs import one_line
from parley.shared.models import Message, ToolCallRecord, ToolCallStatus, TurnRecord
from parley.views.terminal_text import terminal_text

# Where a line told of a tool call starts, under its message or its turn (no line of a
# message's own starts so: see terminal_text.CONTINUATION).
TOOL_INDENT = "    "
# A tool call's arguments, as a line tells them, are cut to this many characters.
TOOL_ARGUMENTS_CHARS = 60
# An argument's value shown as it is (``service=checkout``); any other is shown as JSON.
_BARE_VALUE = re.compile(r"[\w.:/@+-]{1,40}")


def turn_tool_calls(record: TurnRecord) -> list[ToolCallRecord]:
    """Every tool call the turn's answers made, in the order of its answers."""
    return [call for answer in record.bids for call in answer.tool_calls]


def tool_call_line(call: ToolCallRecord) -> str:
    """``Investigator used search_logs(service=checkout) → 12 lines``."""
    return f"{call.agent} used {tool_call_text(call)}"


def tool_call_text(call: ToolCallRecord) -> str:
    """``search_logs(service=checkout) → 12 lines``: the tool, its arguments in short and
    what came of it."""
    return f"{call.tool}({tool_arguments_text(call.arguments)}) → {tool_outcome(call)}"


def tool_arguments_text(arguments: dict[str, Any]) -> str:
    """``service=checkout, since="10:00 UTC"``: each argument as name=value (a plain word
    as it is, anything else as JSON), on one line and cut short."""
    shown = []
    for name, value in arguments.items():
        plain = isinstance(value, str) and _BARE_VALUE.fullmatch(value)
        shown.append(f"{name}={value if plain else json.dumps(value, ensure_ascii=False)}")
    return one_line(", ".join(shown), TOOL_ARGUMENTS_CHARS)


def tool_outcome(call: ToolCallRecord) -> str:
    """What came of a tool call in a few words: ``12 lines``, ``40 chars``, ``empty``,
    ``error``, ``timed out``, ``denied by Ann``, ``uncertain``; ``approved by Ann`` after
    an approved call's result."""
    if call.status is ToolCallStatus.DENIED:
        return f"denied by {call.approved_by}" if call.approved_by else "denied"
    outcome = TOOL_OUTCOMES.get(call.status) or result_size(call.result)
    return f"{outcome}, approved by {call.approved_by}" if call.approved_by else outcome


TOOL_OUTCOMES = {ToolCallStatus.ERROR: "error", ToolCallStatus.TIMEOUT: "timed out",
                 ToolCallStatus.UNCERTAIN: "uncertain"}


def result_size(result: str) -> str:
    """``12 lines`` for a result of several lines, ``40 chars`` for one, ``empty``."""
    lines = len(result.splitlines())
    if lines > 1:
        return f"{lines} lines"
    return f"{len(result)} chars" if result else "empty"


def tool_lines(message: Message) -> list[str]:
    """The lines under a message told of the tool calls it was written from, indented and
    fit for a terminal."""
    return [TOOL_INDENT + terminal_text(tool_call_line(call))
            for call in message.tool_calls or []]


def turn_tool_lines(record: TurnRecord) -> list[str]:
    """The lines under a turn told of the tool calls its answers made, as tool_lines."""
    return [TOOL_INDENT + terminal_text(tool_call_line(call)) for call in turn_tool_calls(record)]
