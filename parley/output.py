"""How runs and rooms are shown on a terminal or as JSON."""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console
from rich.table import Column, Table

from parley.client import RoomDetails, RunResult
from shared.models import Message, RoomStatus
from shared.store import RoomSummary


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
    # Room ids are never cut: they are what every other command takes.
    room_width = max((len(room.room) for room in rooms), default=4)
    table = Table(Column("room", no_wrap=True, min_width=room_width), "status", "policy",
                  "last activity", "holder", "messages", "cost")
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
    console.print(f"[bold]{message.seq:>3} {message.sender}[/bold]{score}: {message.content}",
                  highlight=False)


def print_run(console: Console, result: RunResult, printed: bool = False) -> None:
    """The transcript (unless already printed live) and how the run ended."""
    if not printed:
        for message in result.messages:
            print_message(console, message)
    reason = result.stop_reason.value if result.stop_reason else "-"
    detail = f": {result.stop_detail}" if result.stop_detail else ""
    console.print(f"[dim]room {result.room} · {result.status.value} · "
                  f"stopped by {reason}{detail}[/dim]", highlight=False)


def rooms_table(rows: list[dict[str, Any]]) -> Table:
    """Rooms for ``parley status``."""
    table = Table("room", "status", "run", "turn", "messages", "stop", "lease")
    for row in rows:
        table.add_row(*(str(row[name]) for name in
                        ("room", "status", "run", "turn", "last_seq", "stop_reason", "lease")))
    return table
