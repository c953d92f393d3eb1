"""One agent's bid for one turn: get the model's output, parse it, account for it."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

import structlog

from shared.models import AgentSpec, Bid, BidStatus, Message
from workers.parsing import parse_respond
from workers.scripted import scripted_completion

log = structlog.get_logger("parley.worker")

Transcript = Callable[[], list[Message]]

ERROR_CHARS = 500
# litellm repeats the class in the message ("litellm.AuthenticationError: AuthenticationError:
# OpenAIException - ..."); the recorded error names the class once.
_CLASS_PREFIX = re.compile(r"^(?:litellm\.)?[A-Za-z]*(?:Error|Exception|Timeout):\s+")


def make_bid(agent: AgentSpec, room_agents: list[AgentSpec], turn: int, attempt: int,
             transcript: Transcript, deadline: float) -> Bid:
    """Ask the agent's model for its decision; any failure is a silent bid with the reason."""
    started = time.perf_counter()
    bid = Bid(agent=agent.name, turn=turn, attempt=attempt)
    usage: dict[str, Any]
    try:
        if agent.is_scripted:
            raw, usage = scripted_completion(agent, turn), {}
        else:
            from workers.llm import call_model  # imports litellm: only for real agents

            raw, usage = call_model(agent, room_agents, transcript(), deadline)
    except Exception as error:  # noqa: BLE001 - any failure is this agent's silence
        bid = bid.model_copy(update={"status": BidStatus.ERROR, "error": describe_error(error)})
        log.warning("bid_failed", agent=agent.name, model=agent.model, turn=turn,
                    error=bid.error)
    else:
        parsed = parse_respond(raw)
        status = BidStatus.UNPARSED if parsed.error else BidStatus.OK
        bid = bid.model_copy(update={"score": parsed.score, "message": parsed.message,
                                     "status": status, "error": parsed.error, **usage})
        if parsed.error:
            log.warning("bid_unparsed", agent=agent.name, model=agent.model, turn=turn,
                        error=parsed.error)
    latency_ms = round((time.perf_counter() - started) * 1000, 3)
    return bid.model_copy(update={"latency_ms": latency_ms})


def describe_error(error: BaseException) -> str:
    """``ClassName: message`` on one line: the class once, no traceback, bounded length."""
    message = str(error).split("\nTraceback", 1)[0]
    previous = None
    while previous != message:
        previous, message = message, _CLASS_PREFIX.sub("", message, count=1)
    message = " ".join(message.split())
    text = f"{type(error).__name__}: {message}" if message else type(error).__name__
    return text if len(text) <= ERROR_CHARS else text[:ERROR_CHARS - 3] + "..."
