"""How runs and rooms are shown on a terminal or as JSON, and conversations in swarms'
output types."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from datetime import datetime
from typing import IO, TYPE_CHECKING, Any

import yaml
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Column, Table
from rich.text import Text

from parley.client import RoomDetails, RunResult
from parley.shared.events import Event, RunEnded
from parley.shared.logs import one_line
from parley.shared.models import Answer, Message, RoomStatus
from parley.shared.store import RoomSummary

if TYPE_CHECKING:
    from parley.turn_report import DecidedTurn, TurnInFlight, TurnReport

# An event's field shows at most this much of its value in the human output.
EVENT_VALUE_CHARS = 120
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


def print_run_end(console: Console, event: RunEnded) -> None:
    """How a run ended, as ``parley follow`` shows it between the runs' messages."""
    reason = event.stop_reason.value if event.stop_reason else "-"
    detail = f": {event.stop_detail}" if event.stop_detail else ""
    console.print(f"[dim]run {event.run} ended · {event.status.value} · "
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


def event_json(event: Event) -> dict[str, Any]:
    """One line of ``parley events --json``: the event's id and type, its fields (those
    it has: as in the stream, an absent value is an absent field), its ts."""
    return {"id": event.id, "type": event.type, **event_fields(event), "ts": event.ts}


def event_fields(event: Event) -> dict[str, Any]:
    """The event's own fields that have a value, typed (numbers as numbers)."""
    fields = event.model_dump(mode="json", exclude_none=True, exclude={"id", "type", "ts"})
    return {name: value for name, value in fields.items() if value != ""}


def event_line(event: Event) -> str:
    """One line of ``parley events``: id, time, type and the fields as name=value."""
    fields = event_fields(event)
    shown = " ".join(f"{name}={_field_text(name, value)}" for name, value in fields.items())
    return f"{event.id:<16} {_clock(event.ts)}  {event.type:<17} {shown}".rstrip()


def _field_text(name: str, value: Any) -> str:
    if name == "deadline" and isinstance(value, float):
        return _clock(value)
    if isinstance(value, bool):
        return json.dumps(value)  # as --json has it: true, false
    if isinstance(value, list | dict):  # as --json has it, without spaces
        value = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    text = one_line(str(value), EVENT_VALUE_CHARS)
    return json.dumps(text, ensure_ascii=False) if not text or " " in text else text


def _clock(ts: float) -> str:
    """A unix time as local wall-clock time to the millisecond."""
    return datetime.fromtimestamp(ts).strftime("%H:%M:%S.%f")[:-3]


def turns_json(report: TurnReport) -> dict[str, Any]:
    """The ``parley turns --json`` document."""
    return {"room": report.room, "turns": [decided_turn_json(turn) for turn in report.turns],
            "open_turn": open_turn_json(report.open_turn) if report.open_turn else None}


def decided_turn_json(turn: DecidedTurn) -> dict[str, Any]:
    """One decided turn: its outcome and every call's answer."""
    return {"turn": turn.turn, "run": turn.run, "winner": turn.winner, "score": turn.score,
            "stop_reason": turn.stop_reason.value if turn.stop_reason else None,
            "stop_detail": turn.stop_detail, "opened_at": turn.opened_at,
            "decided_at": turn.decided_at, "turn_ms": _turn_ms(turn),
            "answers": [answer_json(bid, turn.adjusted.get(bid.agent)) for bid in turn.answers]}


def open_turn_json(turn: TurnInFlight) -> dict[str, Any]:
    """The open turn: its current phase, who answered it, who is pending, every answer."""
    return {"turn": turn.turn, "run": turn.run, "phase": turn.phase,
            "kind": turn.kind.value if turn.kind else None, "agents": turn.agents,
            "answered": turn.answered, "pending": turn.pending, "opened_at": turn.opened_at,
            "deadline": turn.deadline,
            "answers": [answer_json(bid, None) for bid in turn.answers]}


def answer_json(bid: Answer, adjusted: float | None) -> dict[str, Any]:
    """One call's answer: raw and adjusted score, status, error, latency, tokens, cost."""
    return {"agent": bid.agent, "kind": bid.kind.value, "phase": bid.phase, "call": bid.call,
            "attempt": bid.attempt, "score": bid.score, "adjusted": adjusted,
            "status": bid.status.value, "error_kind": bid.error_kind.value or None,
            "error": bid.error or None, "latency_ms": bid.latency_ms,
            "prompt_tokens": bid.prompt_tokens, "completion_tokens": bid.completion_tokens,
            "cost_usd": bid.cost_usd}


def _turn_ms(turn: DecidedTurn) -> float | None:
    if not (turn.opened_at and turn.decided_at):
        return None
    return round((turn.decided_at - turn.opened_at) * 1000, 2)


def print_turns(console: Console, report: TurnReport) -> None:
    """Each decided turn's outcome line and its answers, then the open turn's progress."""
    for turn in report.turns:
        console.print(decided_turn_line(turn), highlight=False, markup=False, soft_wrap=True)
        console.print(answers_table(turn.answers, turn.adjusted))
    in_flight = report.open_turn
    if in_flight is not None:
        console.print(open_turn_line(in_flight), highlight=False, markup=False, soft_wrap=True)
        console.print(answers_table(in_flight.answers, {}))
    if not report.turns and report.open_turn is None:
        console.print(f"room {report.room} has no turns yet", highlight=False, markup=False)


def decided_turn_line(turn: DecidedTurn) -> str:
    """``turn 3 · run 1 · agent1 spoke (0.90) · 4.20 ms``, and the run's end if it stopped."""
    parts = [f"turn {turn.turn}", f"run {turn.run}"]
    if turn.winner is not None:
        score = "" if turn.score is None else f" ({turn.score:.2f})"
        parts.append(f"{turn.winner} spoke{score}")
    else:
        parts.append("nobody spoke")
    if turn.stop_reason is not None:
        detail = f": {one_line(turn.stop_detail, 200)}" if turn.stop_detail else ""
        parts.append(f"run ended: {turn.stop_reason.value}{detail}")
    ms = _turn_ms(turn)
    if ms is not None:
        parts.append(f"{ms:.2f} ms")
    return " · ".join(parts)


def open_turn_line(turn: TurnInFlight) -> str:
    """``turn 6 · run 2 · open · phase 0 (bid) · answered 2 of 4 · pending: agent2, agent3``."""
    kind = f" ({turn.kind.value})" if turn.kind else ""
    pending = ", ".join(turn.pending) or "nobody"
    return (f"turn {turn.turn} · run {turn.run} · open · phase {turn.phase}{kind} · "
            f"answered {len(turn.answered)} of {len(turn.agents)} · pending: {pending}")


def answers_table(answers: list[Answer], adjusted: dict[str, float]) -> Table:
    """A turn's answers: agent, kind, phase, raw and adjusted score, status, error kind,
    latency and tokens (prompt + completion)."""
    table = Table("agent", "kind", "phase", "score", "adjusted", "status", "error", "ms",
                  "tokens", box=box.SIMPLE, pad_edge=False, show_edge=False)
    for bid in answers:
        adjusted_score = adjusted.get(bid.agent)
        table.add_row(
            Text(bid.agent), bid.kind.value, str(bid.phase), f"{bid.score:.2f}",
            "-" if adjusted_score is None else f"{adjusted_score:.2f}", bid.status.value,
            bid.error_kind.value or "-", f"{bid.latency_ms:.1f}",
            f"{bid.prompt_tokens}+{bid.completion_tokens}")
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
