"""Stops every policy shares: when no agent could bid at all, the room cannot work."""

from __future__ import annotations

from coordinator.policies.base import Decision, TurnView, stopped
from shared.models import Bid, BidStatus, StopReason

# Likely fixes, matched against the error text a worker recorded (first match wins).
_HINTS = (
    (("AuthenticationError", "api key", "api_key"), "set the provider's API key (api_key_env)"),
    (("NotFoundError", "model not found", "does not exist", "LLM Provider NOT provided"),
     "check the model name (provider/model, as litellm spells it)"),
    (("function calling", "tool_choice", "tools are not supported", "UnsupportedParams"),
     "use a model that supports function calling"),
    (("no respond tool call",), "use a model that supports function calling"),
    (("Timeout",), "raise the agent's timeout_s or the policy's bid_timeout_s"),
    (("RateLimitError",), "lower the request rate or raise the provider quota"),
)


def likely_fix(error: str) -> str:
    """A one-line suggestion for a recorded agent error, or an empty string."""
    lowered = error.lower()
    for needles, fix in _HINTS:
        if any(needle.lower() in lowered for needle in needles):
            return fix
    return ""


def failure_stop(view: TurnView, bids: list[Bid], timeout_s: float, queues: str) -> Decision | None:
    """Stop the run when no bid arrived at all, or when every agent failed on turn one.

    A failing agent is silent, as in swarms; but a room where nobody can bid is broken, and
    its operator needs to know why rather than see an unexplained lull.
    """
    if bids and all(bid.status is BidStatus.TIMEOUT for bid in bids):
        detail = (
            f"no agent answered within {timeout_s:g}s: is a parley worker running and "
            f"consuming queue {queues}?"
        )
        return stopped(StopReason.NO_BIDS, view.recent, detail)
    if view.run_turns == 1 and bids and all(bid.failed or bid.status is BidStatus.TIMEOUT
                                            for bid in bids):
        lines = []
        for bid in bids:
            fix = likely_fix(bid.error)
            lines.append(f"{bid.agent}: {bid.error or bid.status}" + (f" ({fix})" if fix else ""))
        return stopped(StopReason.ALL_FAILED, view.recent, "; ".join(lines))
    return None
