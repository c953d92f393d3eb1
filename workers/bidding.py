"""One agent's bid for one turn: get the model's output, parse it, account for it."""

from __future__ import annotations

import time
from collections.abc import Callable

import structlog

from shared.models import AgentSpec, Bid, BidStatus, Message
from workers.parsing import parse_respond
from workers.scripted import scripted_completion

log = structlog.get_logger("parley.worker")

Transcript = Callable[[], list[Message]]


def make_bid(agent: AgentSpec, room_agents: list[AgentSpec], turn: int, attempt: int,
             transcript: Transcript, deadline: float) -> Bid:
    """Ask the agent's model for its decision; any failure is a silent bid with the reason."""
    started = time.perf_counter()
    bid = Bid(agent=agent.name, turn=turn, attempt=attempt)
    try:
        if agent.is_scripted:
            raw, usage = scripted_completion(agent, turn), {}
        else:
            from workers.llm import call_model  # imports litellm: only for real agents

            raw, usage = call_model(agent, room_agents, transcript(), deadline)
    except Exception as error:  # noqa: BLE001 - any failure is this agent's silence
        bid = bid.model_copy(update={"status": BidStatus.ERROR,
                                     "error": f"{type(error).__name__}: {error}"})
        log.warning("bid_failed", agent=agent.name, turn=turn, error=bid.error)
    else:
        parsed = parse_respond(raw)
        status = BidStatus.UNPARSED if parsed.error else BidStatus.OK
        bid = bid.model_copy(update={"score": parsed.score, "message": parsed.message,
                                     "status": status, "error": parsed.error, **usage})
    latency_ms = round((time.perf_counter() - started) * 1000, 3)
    return bid.model_copy(update={"latency_ms": latency_ms})

