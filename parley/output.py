"""How runs and rooms are shown on a terminal or as JSON."""

from __future__ import annotations

import json
from datetime import datetime
from typing import TYPE_CHECKING, Any

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from parley.client import RunResult
from shared.events import Event, RunEnded
from shared.logs import one_line
from shared.models import Bid, Message

if TYPE_CHECKING:
    from parley.turn_report import DecidedTurn, TurnInFlight, TurnReport

# An event's field shows at most this much of its value in the human output.
EVENT_VALUE_CHARS = 120


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


def print_run_end(console: Console, event: RunEnded) -> None:
    """How a run ended, as ``parley follow`` shows it between the runs' messages."""
    reason = event.stop_reason.value if event.stop_reason else "-"
    detail = f": {event.stop_detail}" if event.stop_detail else ""
    console.print(f"[dim]run {event.run} ended · {event.status.value} · "
                  f"stopped by {reason}{escape(detail)}[/dim]", highlight=False)


def rooms_table(rows: list[dict[str, Any]]) -> Table:
    """Rooms for ``parley status``."""
    table = Table("room", "status", "run", "turn", "messages", "stop", "lease")
    for row in rows:
        table.add_row(*(str(row[name]) for name in
                        ("room", "status", "run", "turn", "last_seq", "stop_reason", "lease")))
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


def answer_json(bid: Bid, adjusted: float | None) -> dict[str, Any]:
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


def answers_table(answers: list[Bid], adjusted: dict[str, float]) -> Table:
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
