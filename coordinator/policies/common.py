"""Stops every policy shares: when no agent could bid at all, the room cannot work.

The all-failed stop lists each agent's recorded error with a likely fix, matched on the
error text the worker recorded (``ClassName: message``, as litellm raised it):

=====================================================  =====================================
error (class or message)                               likely fix
=====================================================  =====================================
``KeyEnvNotAllowed`` (api_key_env not lent)            use a variable in
                                                       PARLEY_WORKER_KEY_ENVS, or add it there
``ApiBaseNotAllowed`` (api_base may not get a key)     add the base to
                                                       PARLEY_WORKER_ALLOWED_API_BASES
``environment variable X is not set`` (api_key_env)    set X on the workers
missing key (``Missing credentials``, ``Missing        set the provider's key variable
Anthropic API Key``, ...)                              (named from the message)
``AuthenticationError``                                check the key's value
``LLM Provider NOT provided``                          prefix the model with its provider
``UnsupportedParamsError`` naming tools                a model with function calling
``UnsupportedParamsError`` naming other parameters     remove them, or drop_params
no tool call / tools not supported                     a model with function calling
``NotFoundError``, ``model_not_found``                 check the model name
``ContextWindowExceededError``                         set max_context_tokens
``RateLimitError``                                     lower the rate or raise the quota
``Timeout``, deadline passed                           raise timeout_s or bid_timeout_s
no bid before the deadline                             check the queue's workers
connection errors                                      check api_base / reachability
``InternalServerError``, ``ServiceUnavailableError``   the provider failed
=====================================================  =====================================
"""

from __future__ import annotations

import re

from coordinator.policies.base import Decision, TurnView, stopped
from shared.models import Bid, BidStatus, StopReason

_KEY_ENV_NOT_ALLOWED = re.compile(r"KeyEnvNotAllowed: api_key_env (\w+)")
_UNSET_VARIABLE = re.compile(r"environment variable (\w+) is not set")
_MISSING_KEY = re.compile(
    r"missing\b.{0,40}\b(api[ _-]?key|credentials|auth[ _]token)"
    r"|api_key client option must be set|no api key (was )?(provided|found|set)",
    re.IGNORECASE,
)
_KEY_VARIABLE = re.compile(r"\b([A-Z][A-Z0-9_]*_(?:API_KEY|AUTH_TOKEN))\b")
_UNSUPPORTED = re.compile(r"UnsupportedParamsError|does not support parameters", re.IGNORECASE)
_TOOL_PARAMS = re.compile(r"'(tools|tool_choice|functions)'")

FUNCTION_CALLING_FIX = "use a model that supports function calling (tool calls)"

# (pattern, fix), first match wins; matched after the key and parameter cases above.
_HINTS = (
    (r"AuthenticationError|incorrect api key|invalid (x-)?api[ _-]?key",
     "the provider refused the API key: check the value of the variable the agent's "
     "api_key_env names (or of the provider's default key variable)"),
    (r"LLM Provider NOT provided",
     "prefix the model with its provider, as litellm spells it (e.g. openai/gpt-4o-mini)"),
    (r"no respond tool call|tools? (is|are) not supported|does not support (tools|function)"
     r"|function calling", FUNCTION_CALLING_FIX),
    (r"NotFoundError|model_not_found|not_found_error|does not exist|model not found",
     "check the model name (provider/model, as litellm spells it)"),
    (r"ContextWindowExceeded|context length|context window|prompt is too long",
     "set the agent's max_context_tokens to the model's real context window"),
    (r"RateLimitError|rate limit", "lower the request rate or raise the provider's quota"),
    (r"no bid before the deadline",
     "check that a worker consumes the agent's queue, or raise the policy's bid_timeout_s"),
    (r"Timeout|timed out|DeadlinePassed",
     "raise the agent's timeout_s or the policy's bid_timeout_s"),
    (r"APIConnectionError|connection error|connection refused|name or service not known"
     r"|failed to resolve", "check the agent's api_base and that the workers can reach it"),
    (r"InternalServerError|ServiceUnavailableError|BadGatewayError|overloaded",
     "the provider failed: check its status, or use another model"),
)
_COMPILED_HINTS = tuple((re.compile(pattern, re.IGNORECASE), fix) for pattern, fix in _HINTS)


def likely_fix(error: str) -> str:
    """A one-line suggestion for a recorded agent error, or an empty string."""
    not_lent = _KEY_ENV_NOT_ALLOWED.search(error)
    if not_lent:
        return (f"name a variable listed in the workers' PARLEY_WORKER_KEY_ENVS as the agent's "
                f"api_key_env, or have the operator add {not_lent.group(1)} there")
    if "ApiBaseNotAllowed" in error:
        return ("have the workers' operator add the agent's api_base (or the endpoint named) "
                "to PARLEY_WORKER_ALLOWED_API_BASES, or use the provider's default endpoint")
    unset = _UNSET_VARIABLE.search(error)
    if unset:
        return (f"set {unset.group(1)} in the environment of the workers serving this agent "
                "(the variable its api_key_env names)")
    if _MISSING_KEY.search(error):
        variable = _KEY_VARIABLE.search(error)
        key = variable.group(1) if variable else "the provider's API key variable"
        return f"set {key} on the workers, or name the key's variable in the agent's api_key_env"
    if _UNSUPPORTED.search(error):
        if _TOOL_PARAMS.search(error):
            return FUNCTION_CALLING_FIX
        return ("remove the parameters the provider does not support from the agent, or set "
                "litellm_kwargs: {drop_params: true}")
    for pattern, fix in _COMPILED_HINTS:
        if pattern.search(error):
            return fix
    return ""


def nobody_answered(answers: list[Bid]) -> bool:
    """True when every call of the turn so far timed out."""
    return bool(answers) and all(answer.status is BidStatus.TIMEOUT for answer in answers)


def failure_stop(view: TurnView, bids: list[Bid], timeout_s: float, queues: str) -> Decision | None:
    """Stop the run when no bid arrived at all, or when every agent failed on turn one.

    A failing agent is silent, as in swarms; but a room where nobody can bid is broken, and
    its operator needs to know why rather than see an unexplained lull.
    """
    if nobody_answered(bids):
        detail = (
            f"no agent answered within {timeout_s:g}s: is a parley worker running and "
            f"consuming queue {queues}?"
        )
        return stopped(StopReason.NO_BIDS, view.recent, detail)
    if view.run_turns == 1 and bids and all(bid.failed or bid.status is BidStatus.TIMEOUT
                                            for bid in bids):
        return stopped(StopReason.ALL_FAILED, view.recent, all_failed_detail(bids))
    return None


def all_failed_detail(bids: list[Bid]) -> str:
    """One ``agent: error (likely fix: ...)`` entry per agent, joined by semicolons."""
    lines = []
    for bid in bids:
        fix = likely_fix(bid.error)
        lines.append(f"{bid.agent}: {bid.error or bid.status}"
                     + (f" (likely fix: {fix})" if fix else ""))
    return "; ".join(lines)
