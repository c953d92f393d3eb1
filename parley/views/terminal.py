"""How runs, rooms, events and turns are shown on a terminal (or piped from one): rich
tables and lines, fitted to the terminal's width and never cut when piped."""

from __future__ import annotations

import json
import sys
import time
from datetime import datetime
from typing import IO, Any

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Column, Table
from rich.text import Text

from parley.client.results import RoomDetails, RunResult, TurnReport
from parley.shared.events import Event, RunEnded
from parley.shared.logs import one_line
from parley.shared.models import Answer, Message, RoomSpec, RoomStatus
from parley.shared.store import RoomSummary
from parley.shared.tool_catalog import CatalogEntry, OfferedOptions
from parley.views import explain
from parley.views.documents import event_fields
from parley.views.terminal_text import CONTINUATION, terminal_text
from parley.views.tool_calls import tool_lines, turn_tool_lines

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
        # A task's room names the room whose task it works.
        name = f"{room.room} (task of {room.parent})" if room.parent else room.room
        table.add_row(Text(terminal_text(name)), status_text(room.status, room.paused),
                      room.policy,
                      ago(room.last_activity), Text(terminal_text(room.holder or "-")),
                      str(room.messages), f"${room.cost_usd:.4f}")
    return table


def tools_table(catalog: dict[str, CatalogEntry]) -> Table:
    """The tool catalog for ``parley tools``: one row per tool, its description's first
    line, how it runs, and the workers offering it (names never cut)."""
    table = Table(Column("tool", overflow="fold"), "description", "options",
                  Column("workers", overflow="fold"))
    for name, entry in catalog.items():
        first_line = entry.description.strip().split("\n", 1)[0]
        table.add_row(Text(terminal_text(name)), Text(terminal_text(first_line)),
                      Text(terminal_text(options_text(entry.options))),
                      Text(terminal_text(", ".join(entry.workers))))
    return table


def options_text(options: OfferedOptions) -> str:
    """``approval, idempotent, queue=ops, timeout 30s``: what is not a tool's default first."""
    parts = [flag for flag in ("approval", "idempotent") if getattr(options, flag)]
    if options.queue:
        parts.append(f"queue={options.queue}")
    parts.append(f"timeout {options.timeout_s:g}s")
    return ", ".join(parts)


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
    if room.parent:
        lines["task of"] = room.parent
    if room.children:
        lines["task rooms"] = ", ".join(room.children)
    if room.last_error:
        lines["last error"] = room.last_error
    for name, value in lines.items():
        console.print(f"{name}: {terminal_text(value)}", highlight=False, markup=False,
                      soft_wrap=True)


def print_message(console: Console, message: Message, tools: bool = True) -> None:
    """One transcript entry: seq, sender, score (agents only), content; the content's
    control characters escaped and each of its lines after the first marked; then, unless
    ``tools`` is False (a turn's line tells them), a line per tool call it was written
    from."""
    score = [(f" (score {message.score:.2f})", "dim")] if message.score is not None else []
    # What people and models write is text, never markup nor emoji codes: a Text is
    # printed as it is ("[/b]" and ":smile:" in a reply print as written).
    console.print(Text.assemble((f"{message.seq:>3} {terminal_text(message.sender)}", "bold"),
                                *score, ": ", terminal_text(message.content, CONTINUATION)),
                  highlight=False)
    for line in tool_lines(message) if tools else []:
        console.print(Text(line, style="dim"), highlight=False, soft_wrap=True)


def print_run(console: Console, result: RunResult, printed: bool = False) -> None:
    """The transcript (unless already printed live) and how the run ended."""
    if not printed:
        for message in result.messages:
            print_message(console, message)
    stop = explain.stop_code(result.stop_reason, result.stop_detail)
    console.print(f"[dim]room {result.room} · {result.status.value} · "
                  f"stopped by {escape(terminal_text(stop))}[/dim]", highlight=False)


def print_run_end(console: Console, event: RunEnded) -> None:
    """How a run ended, as ``parley follow`` shows it between the runs' messages."""
    stop = explain.stop_code(event.stop_reason, event.stop_detail or "")
    console.print(f"[dim]run {event.run} ended · {event.status.value} · "
                  f"stopped by {escape(terminal_text(stop))}[/dim]", highlight=False)


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
        table.add_row(*(Text(terminal_text(str(row[field]))) for field in COLUMNS.values()))
    return table


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
    return terminal_text(json.dumps(text, ensure_ascii=False) if not text or " " in text
                         else text)


def _clock(ts: float) -> str:
    """A unix time as local wall-clock time to the millisecond."""
    return datetime.fromtimestamp(ts).strftime("%H:%M:%S.%f")[:-3]


def print_turns(console: Console, report: TurnReport, spec: RoomSpec) -> None:
    """Each decided turn's outcome line, its answers and a line per tool call they made,
    then the open turn's progress."""
    for turn in report.turns:
        console.print(terminal_text(explain.decided_turn_line(turn)), highlight=False,
                      markup=False, soft_wrap=True)
        console.print(answers_table(spec, turn.bids, turn.adjusted))
        for line in turn_tool_lines(turn):
            console.print(line, highlight=False, markup=False, soft_wrap=True)
    in_flight = report.open_turn
    if in_flight is not None:
        console.print(terminal_text(explain.open_turn_line(in_flight)), highlight=False,
                      markup=False, soft_wrap=True)
        console.print(answers_table(spec, in_flight.answers, {}))
    if not report.turns and report.open_turn is None:
        console.print(f"room {report.room} has no turns yet", highlight=False, markup=False)


def answers_table(spec: RoomSpec, answers: list[Answer], adjusted: dict[str, float]) -> Table:
    """A turn's answers: agent, kind, phase, raw and adjusted score, status (``silent``
    where the agent chose to say nothing, as ``parley run`` marks it), error kind, latency
    and tokens (prompt + completion)."""
    table = Table("agent", "kind", "phase", "score", "adjusted", "status", "error", "ms",
                  "tokens", box=box.SIMPLE, pad_edge=False, show_edge=False)
    for bid in answers:
        adjusted_score = adjusted.get(bid.agent)
        table.add_row(
            Text(bid.agent), bid.kind.value, str(bid.phase), f"{bid.score:.2f}",
            "-" if adjusted_score is None else f"{adjusted_score:.2f}",
            "silent" if explain.is_silent_answer(spec, bid) else bid.status.value,
            bid.error_kind.value or "-", f"{bid.latency_ms:.1f}",
            f"{bid.prompt_tokens}+{bid.completion_tokens}")
    return table
