"""How runs and rooms are shown on a terminal or as JSON, and conversations in swarms'
output types."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from typing import IO, Any

import yaml
from rich.console import Console
from rich.markup import escape
from rich.table import Column, Table

from parley.client import RoomDetails, RunResult
from shared.models import Message, RoomStatus
from shared.store import RoomSummary

# Piped output is read by programs and kept in files: as wide as any line, so that rich
# neither wraps text nor cuts a table's cells there.
PIPED_WIDTH = 1 << 16
# The columns of ``parley status`` (heading: row field); those holding ids are never cut.
COLUMNS = {"room": "room", "status": "status", "run": "run", "turn": "turn",
           "messages": "last_seq", "stop": "stop_reason", "lease": "lease"}
ID_COLUMNS = ("room", "lease")


def make_console(file: IO[str] | None = None) -> Console:
    """A console on ``file`` (stdout when None): on a terminal, fitted to its width; piped
    to a file or another program, lines are never wrapped and tables never cut (whatever
    ``COLUMNS`` says; colours still follow rich's rules, ``FORCE_COLOR`` included)."""
    if writes_to_terminal(file or sys.stdout):
        return Console(file=file)
    return Console(file=file, width=PIPED_WIDTH, soft_wrap=True)


def writes_to_terminal(file: IO[str]) -> bool:
    """True when ``file`` is a terminal (not a file, a pipe or a test's buffer)."""
    isatty = getattr(file, "isatty", None)
    try:
        return bool(isatty and isatty())
    except ValueError:  # a closed file
        return False


def run_json(result: RunResult) -> dict[str, Any]:
    """The ``parley run --json`` object."""
    return {
        "room": result.room,
        "status": result.status.value,
        "stop_reason": result.stop_reason.value if result.stop_reason else None,
        "stop_detail": result.stop_detail,
        "answer": result.answer,
        "messages": [
            {"seq": m.seq, "sender": m.sender, "content": m.content, "score": m.score}
            for m in result.messages
        ],
    }


def message_json(message: Message) -> dict[str, Any]:
    """A message as ``parley transcript --json`` gives it."""
    return message.model_dump(mode="json")


def status_text(status: RoomStatus, paused: bool) -> str:
    """A room's status for a table: ``running``, or ``running, paused`` when paused."""
    return f"{status.value}, paused" if paused else status.value


def ago(when: float | None, now: float | None = None) -> str:
    """How long ago ``when`` (unix s) was, coarsely: ``12s ago``, ``5m ago``, ``3h ago``,
    ``2d ago``."""
    if when is None:
        return "-"
    seconds = max(0.0, (now or time.time()) - when)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit} ago"
    return f"{int(seconds)}s ago"


def room_list_table(rooms: list[RoomSummary]) -> Table:
    """Rooms for ``parley rooms list``."""
    # Room ids and holders are never cut: folded where the terminal is narrow, as in
    # parley status (piped output is never narrow).
    table = Table(Column("room", overflow="fold"), "status", "policy", "last activity",
                  Column("holder", overflow="fold"), "messages", "cost")
    for room in rooms:
        table.add_row(room.room, status_text(room.status, room.paused), room.policy,
                      ago(room.last_activity), room.holder or "-", str(room.messages),
                      f"${room.cost_usd:.4f}")
    return table


def print_room(console: Console, room: RoomDetails) -> None:
    """``parley rooms show``: one ``name: value`` line per fact."""
    stop = room.stop_reason.value if room.stop_reason else "-"
    lines = {
        "room": room.room, "name": room.name, "policy": room.policy,
        "agents": ", ".join(room.agents),
        "status": status_text(room.status, room.paused),
        "run": f"{room.run} ({room.run_turns} turns; turn {room.turn}"
               f"{' open' if room.turn_open else ''})",
        "stop": f"{stop}: {room.stop_detail}" if room.stop_detail else stop,
        "holder": room.holder or "-", "messages": str(room.messages),
        "posts waiting": str(room.posts_waiting),
        "usage": f"{room.prompt_tokens} prompt + {room.completion_tokens} completion tokens, "
                 f"${room.cost_usd:.4f}",
        "last activity": ago(room.last_activity),
        "expires": (time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(room.expires_at))
                    if room.expires_at else "-"),
        "streams": ", ".join(f"{name} {s.length}/{s.max_length or '-'}"
                             for name, s in room.streams.items()),
    }
    if room.last_error:
        lines["last error"] = room.last_error
    for name, value in lines.items():
        console.print(f"{name}: {value}", highlight=False, markup=False, soft_wrap=True)


def print_message(console: Console, message: Message) -> None:
    """One transcript line: seq, sender, score (agents only), content."""
    score = f" [dim](score {message.score:.2f})[/dim]" if message.score is not None else ""
    # What people and models write is text, never markup: "[/b]" in a reply prints as is.
    console.print(f"[bold]{message.seq:>3} {escape(message.sender)}[/bold]{score}: "
                  f"{escape(message.content)}", highlight=False)


def transcript_text(messages: list[Message]) -> str:
    """The whole conversation as plain text, one message a line as ``parley follow``
    prints it: seq, sender, score (agents only), content."""
    return "\n".join(
        f"{m.seq:>3} {m.sender}{'' if m.score is None else f' (score {m.score:.2f})'}: "
        f"{m.content}" for m in messages)


def print_run(console: Console, result: RunResult, printed: bool = False) -> None:
    """The transcript (unless already printed live) and how the run ended."""
    if not printed:
        for message in result.messages:
            print_message(console, message)
    reason = result.stop_reason.value if result.stop_reason else "-"
    detail = f": {result.stop_detail}" if result.stop_detail else ""
    console.print(f"[dim]room {result.room} · {result.status.value} · "
                  f"stopped by {reason}{escape(detail)}[/dim]", highlight=False)


def rooms_table(rows: list[dict[str, Any]]) -> Table:
    """Rooms for ``parley status``. Room ids and lease holders are never cut short: they
    are shown whole on one line where the terminal is wide enough, else folded over
    several lines of their cell (piped output is never narrow: see ``make_console``)."""
    table = Table()
    for heading in COLUMNS:
        if heading in ID_COLUMNS:
            table.add_column(heading, overflow="fold")
        else:
            table.add_column(heading)
    for row in rows:
        table.add_row(*(str(row[field]) for field in COLUMNS.values()))
    return table


# swarms' history formats, as swarms 16's ``history_output_formatter`` gives them for a
# GroupChat's conversation (tests/fixtures/swarms_outputs.json holds its real outputs).
HISTORY_OUTPUT_TYPES = (
    "list", "dict", "dictionary", "string", "str", "final", "last", "json", "all", "yaml",
    "dict-all-except-first", "str-all-except-first", "dict-final", "list-final",
)
# swarms' Conversation renders "str" from the newest lines that fit its default context,
# counted by litellm's tokenizer for its default model.
SWARMS_CONTEXT_TOKENS = 8192
SWARMS_TOKENIZER_MODEL = "gpt-5.4"


def conversation_rows(messages: list[Message]) -> list[dict[str, Any]]:
    """The messages as swarms' ``Conversation.conversation_history`` holds a GroupChat's:
    role and content, and ``metadata: {score}`` on scored (agent) messages only."""
    rows = []
    for message in messages:
        row: dict[str, Any] = {"role": message.sender, "content": message.content}
        if message.score is not None:
            row["metadata"] = {"score": message.score}
        rows.append(row)
    return rows


def format_history(messages: list[Message], output_type: str) -> Any:
    """The conversation in one of swarms' output types (``HISTORY_OUTPUT_TYPES``)."""
    return format_rows(conversation_rows(messages), output_type)


def format_rows(rows: list[dict[str, Any]], output_type: str) -> Any:
    """``rows`` (as ``conversation_rows`` gives them) in one of swarms' output types, with
    swarms' Python types: ``dict-final`` is a tuple, ``list-final`` a one-element list."""
    formats: dict[str, Callable[[], Any]] = {
        "list": lambda: [{"role": row["role"], "content": row["content"]} for row in rows],
        "dict": lambda: rows,
        "str": lambda: history_string(rows),
        "final": lambda: rows[-1]["content"] if rows else "",
        "json": lambda: json.dumps(rows),
        "yaml": lambda: yaml.safe_dump(rows, sort_keys=False),
        "dict-all-except-first": lambda: rows[_after_first_input(rows):],
        "str-all-except-first": lambda: "\n".join(
            f"{row['content']}" for row in rows[_after_first_input(rows):]),
        # A tuple of the content twice, and IndexError on no rows: swarms' own shapes.
        "dict-final": lambda: (rows[-1]["content"], rows[-1]["content"]),
        "list-final": lambda: [rows[-1]["content"]],
    }
    aliases = {"dictionary": "dict", "string": "str", "all": "str", "last": "final"}
    if output_type not in HISTORY_OUTPUT_TYPES:
        raise ValueError(f"output_type must be one of {', '.join(HISTORY_OUTPUT_TYPES)}, "
                         f"not {output_type!r}")
    return formats[aliases.get(output_type, output_type)]()


def _after_first_input(rows: list[dict[str, Any]]) -> int:
    # Past the first input, and past a System row before it when there is one.
    return (1 if rows and rows[0].get("role") == "System" else 0) + 1


def history_string(rows: list[dict[str, Any]]) -> str:
    """``role: content`` per row, blank-line separated: the newest rows that fit in
    ``SWARMS_CONTEXT_TOKENS`` (one token per separator), then the longest tail of the
    first row that does not, as swarms renders a long history."""
    lines = [f"{row['role']}: {row['content']}" for row in rows]
    # A token is at least one byte: a history of fewer bytes than the budget always fits,
    # and needs no tokenizer.
    if sum(len(line.encode()) for line in lines) + len(lines) - 1 <= SWARMS_CONTEXT_TOKENS:
        return "\n\n".join(lines)
    budget = SWARMS_CONTEXT_TOKENS
    kept: list[str] = []
    for line in reversed(lines):
        tokens = swarms_token_count(line)
        separator = 1 if kept else 0
        if tokens + separator > budget:
            tail = _longest_tail(line, budget - separator)
            if tail:
                kept.append(tail)
            break
        kept.append(line)
        budget -= tokens + separator
    return "\n\n".join(reversed(kept))


def _longest_tail(text: str, most_tokens: int) -> str:
    # swarms' binary search for the shortest cut from the front that fits.
    if most_tokens <= 0:
        return ""
    left, right = 0, len(text)
    while left < right:
        middle = (left + right) // 2
        if swarms_token_count(text[middle:]) <= most_tokens:
            right = middle
        else:
            left = middle + 1
    return text[left:]


def swarms_token_count(text: str) -> int:
    """Tokens in ``text`` as swarms counts them (none in blank text)."""
    if not text.strip():
        return 0
    import litellm  # importing litellm takes seconds: only long histories pay for it

    return len(litellm.encode(model=SWARMS_TOKENIZER_MODEL, text=text))
