"""How runs and rooms are shown on a terminal or as JSON."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from parley.client import RunResult
from shared.models import Message


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
