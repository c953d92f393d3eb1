"""The JSON documents of ``--json`` and the HTTP API: a run, a message, an event, a room's
turns. Each is what both the CLI and the API answer, built in one place."""

from __future__ import annotations

import time
from typing import Any

from parley.client.results import RunResult, TurnInFlight, TurnReport
from parley.shared.approvals import Approval
from parley.shared.events import Event
from parley.shared.models import Answer, Message, TurnRecord
from parley.views import explain


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


def event_json(event: Event) -> dict[str, Any]:
    """One line of ``parley events --json``: the event's id and type, its fields (those
    it has: as in the stream, an absent value is an absent field), its ts."""
    return {"id": event.id, "type": event.type, **event_fields(event), "ts": event.ts}


def event_fields(event: Event) -> dict[str, Any]:
    """The event's own fields that have a value, typed (numbers as numbers)."""
    fields = event.model_dump(mode="json", exclude_none=True, exclude={"id", "type", "ts"})
    return {name: value for name, value in fields.items() if value != ""}


def turns_json(report: TurnReport) -> dict[str, Any]:
    """The ``parley turns --json`` document."""
    return {"room": report.room, "turns": [decided_turn_json(turn) for turn in report.turns],
            "open_turn": open_turn_json(report.open_turn) if report.open_turn else None}


def decided_turn_json(turn: TurnRecord) -> dict[str, Any]:
    """One decided turn: its outcome and every call's answer."""
    return {"turn": turn.turn, "run": turn.run, "winner": turn.winner, "score": turn.score,
            "stop_reason": turn.stop_reason.value if turn.stop_reason else None,
            "stop_detail": turn.stop_detail, "opened_at": turn.opened_at,
            "decided_at": turn.decided_at, "turn_ms": explain.turn_ms(turn),
            "trace_id": turn.trace_id or None,
            "answers": [answer_json(bid, turn.adjusted.get(bid.agent)) for bid in turn.bids]}


def open_turn_json(turn: TurnInFlight) -> dict[str, Any]:
    """The open turn: its current phase, who answered it, who is pending, every answer."""
    return {"turn": turn.turn, "run": turn.run, "phase": turn.phase,
            "kind": turn.kind.value if turn.kind else None, "agents": turn.agents,
            "answered": turn.answered, "pending": turn.pending, "opened_at": turn.opened_at,
            "deadline": turn.deadline,
            "answers": [answer_json(bid, None) for bid in turn.answers]}


def answer_json(bid: Answer, adjusted: float | None) -> dict[str, Any]:
    """One call's answer: raw and adjusted score, status, error, latency, tokens, cost, and
    the record of each tool call it made."""
    return {"agent": bid.agent, "kind": bid.kind.value, "phase": bid.phase, "call": bid.call,
            "attempt": bid.attempt, "score": bid.score, "adjusted": adjusted,
            **explain.call_outcome(bid), "latency_ms": bid.latency_ms,
            "prompt_tokens": bid.prompt_tokens, "completion_tokens": bid.completion_tokens,
            "cost_usd": bid.cost_usd,
            "tool_calls": [call.model_dump(mode="json") for call in bid.tool_calls]}


def approval_json(approval: Approval, now: float | None = None) -> dict[str, Any]:
    """An approval as ``parley approvals --json`` gives it, with how long it waited (or
    has waited by ``now``), in seconds."""
    end = approval.answered_at if approval.answered_at is not None else now or time.time()
    return {**approval.model_dump(mode="json"),
            "waiting_s": round(end - approval.requested_at, 3)}
